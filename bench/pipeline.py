"""Softswitch pipeline throughput, without I/O: ``make bench``.

Feeds prebuilt frames straight into ``DistCachePipeline.process`` on a state
holding the controller's entries, and prints packets per second for the main
paths (cache hit at a storage leaf, miss forwarded, client-leaf routing, reply
stamping).  Figures are for comparing versions on one machine; quote ratios.
"""

from __future__ import annotations

import argparse
import time

from distcache import p4names as n
from distcache.cluster import Cluster
from distcache.hashing import wire_key
from distcache.partition import spine_buckets
from distcache.scapy_layer import frame
from distcache.wire import DC_PORT, Message, Op
from p4rt.plan import plan
from softswitch.dataplane import PROGRAM, DistCachePipeline
from softswitch.local import install
from softswitch.state import SwitchState


def installed(cluster: Cluster, name: str) -> SwitchState:
    return install(SwitchState(PROGRAM), plan(cluster, cluster.switch(name), spine_buckets([1])))


def measure(state: SwitchState, port: int, pkt: bytes, seconds: float) -> float:
    pipe = DistCachePipeline()
    n_done, start = 0, time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        for _ in range(500):
            pipe.process(state, port, pkt, 1_000_000)
        n_done += 500
    return n_done / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="per path (default 1)")
    args = ap.parse_args()
    c = Cluster()
    srv, cli = c.server(0, 0), c.client(0, 0)
    key = wire_key("bench")
    leaf = installed(c, "sl0")
    leaf.tables[n.CACHE_LOOKUP].insert([int.from_bytes(key, "big")], n.CACHE_HIT, {"slot": 1, "version": 1})
    pipe = DistCachePipeline()
    up = lambda m: bytes(frame(m, srv.ip, c.spine_address(1), sport=DC_PORT))  # noqa: E731
    pipe.process(leaf, 1, up(Message(op=Op.INVALIDATE, key=key, seq=9)), 0)
    pipe.process(leaf, 1, up(Message(op=Op.UPDATE, key=key, seq=9, value=b"v" * 64)), 0)
    get = lambda target: bytes(frame(Message(op=Op.GET, key=key, seq=2, target=target), cli.ip, srv.ip))  # noqa: E731
    reply = bytes(
        frame(Message(op=Op.GET_REPLY, key=key, seq=2, value=b"v" * 64), srv.ip, cli.ip, sport=DC_PORT, dport=40000)
    )
    rows = [
        ("storage leaf: cache hit (64 B value)", leaf, 2, get(64)),
        ("storage leaf: read for another cache", leaf, 2, get(1)),
        ("storage leaf: reply stamped", leaf, 1, reply),
        ("client leaf: power-of-two routing", installed(c, "cl0"), 1, get(0)),
    ]
    for name, state, port, pkt in rows:
        print(f"{name:<40} {measure(state, port, pkt, args.seconds):>10,.0f} pkt/s")


if __name__ == "__main__":
    main()
