"""Softswitch pipeline throughput, without I/O: ``make bench``.

Feeds prebuilt frames straight into ``DistCachePipeline.process`` on a state
holding the controller's entries, and prints packets per second for the main
paths (cache hit at a storage leaf, a read past the caches, client-leaf routing,
reply stamping), each checked first to take the path it is named after (its
dc_stats counter moves, it leaves by its port).  Figures are for comparing
versions on one machine; quote ratios.
"""

from __future__ import annotations

import argparse
import time
from typing import NamedTuple

from distcache import p4names
from distcache.cluster import Cluster
from distcache.p4defines import Stat
from distcache.partition import spine_buckets
from distcache.scapy_layer import frame
from distcache.wire import DC_PORT, Message, Op, populate_invalidate
from p4rt.plan import plan
from softswitch.dataplane import PROGRAM, DistCachePipeline
from softswitch.install_plan import install
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


class Row(NamedTuple):
    """One measured path: a frame into a switch state, and how to tell it took the path it is named after
    (the dc_stats counter it moves, if any, and the port it leaves by)."""

    name: str
    state: SwitchState
    port: int
    frame: bytes
    stat: Stat | None
    out_port: int


def rows(c: Cluster) -> list[Row]:
    """The measured paths.  The hit row's entry is armed as the protocol arms a new one -- the key's shim
    populates it: an INVALIDATE with the entry's tag (populate_invalidate), then the UPDATE with the value.
    A plain INVALIDATE never arms a new entry, and the row measured a miss (READ_HIT never moved)."""
    srv, cli = c.server(0, 0), c.client(0, 0)
    name = b"bench"
    key = c.digest(name)
    leaf = installed(c, "sl0")
    version = 1
    leaf.tables[p4names.CACHE_LOOKUP].insert(
        [int.from_bytes(key, "big")], p4names.CACHE_HIT, {"slot": 1, "version": version}
    )
    epoch = leaf.tables[p4names.CACHE_EPOCH].lookup()[1]["epoch"]
    pipe = DistCachePipeline()
    up = lambda m: bytes(frame(m, srv.ip, c.spine_address(1), sport=DC_PORT))  # noqa: E731
    sl0 = c.switch("sl0").switch_id
    pipe.process(leaf, 1, up(populate_invalidate(key, 9, sl0, epoch, version)), 0)
    pipe.process(leaf, 1, up(Message(op=Op.UPDATE, digest=key, seq=9, value=b"v" * 64)), 0)
    get = lambda target: bytes(frame(Message(Op.GET, name, key, seq=2, target=target), cli.ip, srv.ip))  # noqa: E731
    reply = bytes(
        frame(Message(Op.GET_REPLY, name, key, seq=2, value=b"v" * 64), srv.ip, cli.ip, sport=DC_PORT, dport=40000)
    )
    return [
        Row("storage leaf: cache hit (64 B value)", leaf, 2, get(sl0), Stat.READ_HIT, 2),
        Row("storage leaf: read past the caches", leaf, 2, get(0), None, 1),
        Row("storage leaf: reply stamped", leaf, 1, reply, Stat.REPLY_STAMPED, 2),
        Row("client leaf: power-of-two routing", installed(c, "cl0"), 1, get(0), Stat.ROUTED_SPINE, 2),
    ]


def takes_its_path(row: Row) -> bool:
    """Whether one frame of ``row`` moves the counter of its path (if it has one) and leaves by its port."""
    counted = row.state.counters[p4names.DC_STATS]
    before = counted.read(row.stat)[0] if row.stat is not None else 0
    out = DistCachePipeline().process(row.state, row.port, row.frame, 0)
    moved = row.stat is None or counted.read(row.stat)[0] == before + 1
    return moved and [port for port, _ in out] == [row.out_port]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="per path (default 1)")
    args = ap.parse_args()
    for row in rows(Cluster()):
        if not takes_its_path(row):
            raise SystemExit(f"bench: {row.name!r} does not take the path it is named after")
        print(f"{row.name:<40} {measure(row.state, row.port, row.frame, args.seconds):>10,.0f} pkt/s")


if __name__ == "__main__":
    main()
