"""No packet circles the fabric (issue 15, defect 6), end to end in Mininet.

The issue's scenario, from a client host through real switches: reads sent
to an unused address of an existing storage rack, a ping of the client's own
gateway, and packets whose TTL runs out on the way.  Before the fix each of
them circled a leaf and a spine for ever (the TTL wrapped from 0 to 255, the
leaf's catch-all route sent what came down back up), the switches spent
their time on them (the issue measured the median read latency going from
0.7 ms to 40 ms), and a circling read counted as a read and a detector sample
at the storage leaf on every pass (here: tens of thousands in two seconds).

Now each is dropped once, within three hops, counted under its reason: LOOP
where it would turn back (the storage leaf for the rack's unused address,
the spine for the client's gateway), TTL_EXPIRED where its TTL runs out (the
spine, for TTL 2 sent by the client).  The counters settle and stay put,
the storage leaf counts none of those reads, and read latency stays where
it was.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Iterator

import pytest
from dcnet.deploy import Deployment

from distcache import p4names
from distcache.cluster import Cluster
from distcache.p4names import DropReason, Stat
from distcache.wire import DC_PORT, Message, Op, encode
from tests.common.keys import digest
from tests.e2e.targets import targets

pytestmark = [
    pytest.mark.timeout(300),
]

CLUSTER = Cluster()  # sp0, sl0 (storage rack 0), cl0 (client rack 0)
CLIENT, SERVER = CLUSTER.client(0, 0), CLUSTER.server(0, 0)
SWITCHES = ("cl0", "sp0", "sl0")
UNUSED = "10.1.0.200"  # in storage rack 0's prefix; no host has it
N_GETS = 400  # reads to the unused address (each circled for ever before: a few hundred swamp a switch)
N_UDP = 50  # plain UDP to it
N_PINGS = 5  # echo requests to the client's gateway
N_SHORT_TTL = 50  # UDP to the real server with TTL 2: it runs out at the spine
SEND_RATE = 300  # datagrams per second at most: well within what BMv2 forwards here

TARGETS = targets()


@pytest.fixture(scope="module", params=TARGETS)
def dep(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with Deployment(CLUSTER, target=request.param, run_dir=tmp_path_factory.mktemp("run")) as d:
        yield d


def counters(dep: Deployment) -> dict[tuple[str, str], int]:
    """The drop reasons and read counts the test follows, per switch."""
    out = {}
    for sw in SWITCHES:
        conn = dep.controller.conns[sw]
        drops, stats = conn.read_counter(p4names.DC_DROPS), conn.read_counter(p4names.DC_STATS)
        for r in (DropReason.LOOP, DropReason.TTL_EXPIRED, DropReason.NO_ROUTE):
            out[(sw, r.name)] = drops.get(int(r), (0, 0))[0]
        for s in (Stat.READ_HIT, Stat.READ_MISS, Stat.HH_COUNTED, Stat.ROUTED_SPINE, Stat.ROUTED_LEAF):
            out[(sw, s.name)] = stats.get(int(s), (0, 0))[0]
    return out


def moved(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


def once_each(counted: int, sent: int) -> bool:
    """Each of ``sent`` packets counted at most once; a few may be lost uncounted on a loaded machine
    (a software switch's input queue overflows), none counted twice."""
    return 0.95 * sent <= counted <= sent


def median_read_us(client, key: str, reads: int = 40) -> float:  # noqa: ANN001
    lat = []
    for _ in range(reads):
        r = client.call("get", key)
        assert r["ok"] and r["value"] == "here", r
        lat.append(r["latency_us"])
    return statistics.median(lat)


def run_in(dep: Deployment, host: str, code: str) -> None:
    p = dep.host(host).popen(["python3", "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert p.wait(60) == 0, p.stdout.read()


def test_packets_to_nowhere_are_dropped_within_three_hops(dep: Deployment) -> None:
    client = dep.client()
    r = client.call("put", "steady", "here")
    assert r["ok"], r
    median_read_us(client, "steady", 10)  # warm up (ARP, caches of the client process)
    before_lat = median_read_us(client, "steady")
    before = counters(dep)

    # one datagram a line: TTL, address, port, payload; too many for a command line
    sends = [
        (64, UNUSED, DC_PORT, encode(Message(Op.GET, digest=digest(f"nowhere-{i}"), seq=i + 1))) for i in range(N_GETS)
    ]
    sends += [(64, UNUSED, 9, b"x" * 32)] * N_UDP + [(2, SERVER.ip, 9, b"y" * 32)] * N_SHORT_TTL
    script = dep.run_dir / "nowhere.txt"
    script.write_text("".join(f"{ttl} {ip} {port} {data.hex()}\n" for ttl, ip, port, data in sends))
    run_in(
        dep,
        CLIENT.name,
        (  # paced: a burst would overflow a switch's input queue and lose packets uncounted
            "import socket, time\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"for line in open({str(script)!r}):\n"
            "    ttl, ip, port, data = line.split()\n"
            "    s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, int(ttl))\n"
            "    s.sendto(bytes.fromhex(data), (ip, int(port)))\n"
            f"    time.sleep({1 / SEND_RATE})\n"
        ),
    )
    ping = dep.host(CLIENT.name).cmd(f"ping -c {N_PINGS} -i 0.2 -W 1 {CLIENT.gateway}")
    assert f"{N_PINGS} packets transmitted, 0 received" in ping, ping

    time.sleep(1.0)
    settled = counters(dep)
    time.sleep(1.0)
    after = counters(dep)
    # every packet was dropped once, where it would have turned back or where its TTL ran out; the reads
    # the client leaf marked for the spine were misses there, once each; the storage leaf counted none
    m = moved(before, settled)
    spine_reads = {k: m.pop(k) for k in (("sp0", "READ_MISS"), ("sp0", "HH_COUNTED")) if k in m}
    routed = m.pop(("cl0", "ROUTED_SPINE"), 0) + m.pop(("cl0", "ROUTED_LEAF"), 0)
    assert once_each(routed, N_GETS), (routed, m)  # the client leaf marked each read once
    want = {("sl0", "LOOP"): N_GETS + N_UDP, ("sp0", "LOOP"): N_PINGS, ("sp0", "TTL_EXPIRED"): N_SHORT_TTL}
    assert set(m) == set(want) and all(once_each(m[k], want[k]) for k in want), (m, want)
    assert all(v <= N_GETS for v in spine_reads.values()), spine_reads
    # ... and nothing is still circling: no counter moves any more
    assert moved(settled, after) == {}
    after_lat = median_read_us(client, "steady")
    assert after_lat <= max(3 * before_lat, before_lat + 3000), (before_lat, after_lat)
