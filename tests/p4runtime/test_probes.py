"""The controller's probe piece (p4rt/probes.py) and packet-out through P4Runtime on softswitch.

The data-plane behaviour (probes forwarded, reflected, counted; dead spines routed around) is tested
packet by packet on both targets by tests/ptf/tests/test_liveness.py; here: the probe frame against
the protocol, the ledger that tells the controller which spines stopped answering, and the packet-out
plumbing (metadata by name, serialized into the packet_out header, refused when malformed).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from finsy.proto import p4i, p4r
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from distcache import p4names
from distcache.cluster import Cluster
from distcache.partition import spine_buckets
from distcache.wire import DC_PORT, Op, decode
from harness.netns import delete_namespace, make_veth_namespace
from p4rt.client import P4RuntimeError, SwitchConnection
from p4rt.plan import plan
from p4rt.probes import (
    ProbeCounts,
    ProbeLedger,
    ProbeSource,
    leaf_address,
    packet_out_header,
    probe_frame,
    probe_interfaces,
    read_probe_counts,
    send_probe,
)
from softswitch.dataplane import PROGRAM, DistCachePipeline
from softswitch.server import P4RuntimeError as ServerError
from softswitch.server import p4info_mismatch, packet_out_frame
from softswitch.switch import SoftSwitch

pytestmark = pytest.mark.timeout(60)

C = Cluster(spines=2, storage_racks=2, client_racks=2)
SP0, SP1, SL1, CL0 = C.spine(0), C.spine(1), C.storage_leaf(1), C.client_leaf(0)


def test_probe_frame_is_a_probe_from_the_leafs_gateway_to_the_spines_address() -> None:
    f = Ether(probe_frame(CL0, SP1, 77))
    assert (f.src, f.dst, f.type) == (CL0.mac, CL0.mac, 0x0800)
    ip = f[IP]
    assert (ip.src, ip.dst, ip.ttl, ip.proto, ip.ihl) == ("10.2.0.254", "10.255.0.2", 64, 17, 5)
    checksum = ip.chksum
    del ip.chksum
    assert Ether(bytes(f))[IP].chksum == checksum
    assert (f[UDP].sport, f[UDP].dport, f[UDP].chksum) == (DC_PORT, DC_PORT, 0)
    m = decode(bytes(f[UDP].payload))
    assert (m.op, m.seq, m.target, m.leaf_id, m.digest, m.value) == (
        Op.PROBE,
        77,
        SP1.switch_id,
        CL0.switch_id,
        bytes(16),
        b"",
    )
    assert leaf_address(SL1) == C.server(1, 0).gateway and leaf_address(CL0) == C.client(0, 0).gateway


def test_only_leaves_probe_and_only_spines_are_probed() -> None:
    with pytest.raises(ValueError, match="not a leaf"):
        probe_frame(SP0, SP1, 1)
    with pytest.raises(ValueError, match="not a spine"):
        probe_frame(CL0, SL1, 1)


def test_ledger_finds_spines_silent_at_every_leaf() -> None:
    led = ProbeLedger(misses=3)
    led.update("cl0", {1: ProbeCounts(5, 5), 2: ProbeCounts(5, 5)})
    led.update("sl0", {1: ProbeCounts(4, 4), 2: ProbeCounts(4, 4)})
    assert led.silent("cl0") == set() and led.dead() == set()
    led.update("cl0", {1: ProbeCounts(8, 5), 2: ProbeCounts(8, 8)})  # sp1: 3 probes, no reply
    assert led.silent("cl0") == {1} and led.dead() == set()  # sl0 still hears sp1
    led.update("sl0", {1: ProbeCounts(6, 4), 2: ProbeCounts(6, 6)})
    assert led.dead() == set()  # only 2 unanswered at sl0
    led.update("sl0", {1: ProbeCounts(7, 4), 2: ProbeCounts(7, 7)})
    assert led.silent("sl0") == {1} and led.dead() == {1} and led.dead([2]) == set()
    led.update("cl0", {1: ProbeCounts(9, 6), 2: ProbeCounts(9, 9)})  # sp1 answered at cl0 again
    assert led.silent("cl0") == set() and led.dead() == set()
    assert led.dead(misses=2) == set()  # and the count can be asked for lower than the ledger's
    led.update("cl0", {1: ProbeCounts(11, 6), 2: ProbeCounts(11, 11)})
    assert led.dead(misses=2) == {1} and led.dead() == set()


def test_ledger_restarts_a_leaf_whose_counters_went_down() -> None:
    led = ProbeLedger(misses=2)
    led.update("cl0", {1: ProbeCounts(100, 100)})
    led.update("cl0", {1: ProbeCounts(3, 3)})  # the leaf's pipeline was pushed again
    assert led.silent("cl0") == set()
    led.update("cl0", {1: ProbeCounts(5, 3)})
    assert led.silent("cl0") == {1}
    fresh = ProbeLedger(misses=2)
    fresh.update("cl0", {1: ProbeCounts(2, 0)})  # never answered since it was first seen
    fresh.update("cl0", {1: ProbeCounts(9, 0)})
    assert fresh.silent("cl0") == set() and fresh.dead() == set()  # never heard: not "silent" (no link yet?)
    fresh.update("cl0", {1: ProbeCounts(10, 1)})
    fresh.update("cl0", {1: ProbeCounts(12, 1)})
    assert fresh.silent("cl0") == {1}  # heard once, then silent
    with pytest.raises(ValueError, match="misses"):
        ProbeLedger(misses=0)


def test_packet_out_metadata_is_serialized_ahead_of_the_frame() -> None:
    sw = SoftSwitch(DistCachePipeline(), device_id=3, grpc_addr="127.0.0.1:0")
    sw.start()
    c = SwitchConnection(sw.server.address, 3, name="t")
    try:
        c.connect()
        c.set_pipeline(PROGRAM.p4info())
        cfg = sw.server.service.committed
        assert cfg is not None
        pkt = c.p4info.packet_out(b"frame", {"spine_id": 7})
        assert packet_out_frame(PROGRAM, cfg, pkt) == b"\x07frame"
        bad = p4r.PacketOut(payload=b"x")
        bad.metadata.add(metadata_id=9, value=b"\x01")
        with pytest.raises(ServerError, match="metadata id 9"):
            packet_out_frame(PROGRAM, cfg, bad)
        wide = p4r.PacketOut(payload=b"x")
        wide.metadata.add(metadata_id=1, value=b"\x01\x00")
        with pytest.raises(ServerError, match="does not fit in 8 bits"):
            packet_out_frame(PROGRAM, cfg, wide)
        with pytest.raises(P4RuntimeError, match="needs metadata 'spine_id'"):
            c.packet_out(b"x")
        with pytest.raises(P4RuntimeError, match="no metadata 'port'"):
            c.packet_out(b"x", spine_id=1, port=2)
    finally:
        c.close()
        sw.close()


def test_p4info_with_another_packet_out_header_is_refused() -> None:
    info = PROGRAM.p4info()
    assert p4info_mismatch(PROGRAM, info) is None
    info.controller_packet_metadata[0].metadata[0].bitwidth = 16
    assert "controller header 'packet_out'" in (p4info_mismatch(PROGRAM, info) or "")
    info = PROGRAM.p4info()
    del info.controller_packet_metadata[:]
    assert "missing from the P4Info" in (p4info_mismatch(PROGRAM, info) or "")
    assert isinstance(PROGRAM.p4info().controller_packet_metadata[0], p4i.ControllerPacketMetadata)


@pytest.fixture
def leaf() -> Iterator[tuple[SoftSwitch, SwitchConnection]]:
    """A softswitch playing cl0 with the controller's entries, its packet loop running."""
    sw = SoftSwitch(DistCachePipeline(), device_id=4, grpc_addr="127.0.0.1:0")
    sw.start()
    loop = threading.Thread(target=sw.run, daemon=True)
    loop.start()
    c = SwitchConnection(sw.server.address, 4, name="cl0")
    try:
        c.connect()
        c.set_pipeline(PROGRAM.p4info())
        p = plan(C, CL0, spine_buckets([SP0.switch_id, SP1.switch_id]))
        c.set_default(p4names.SWITCH_CONFIG, p4names.SET_CONFIG, p.config)
        for e in p.entries:
            c.insert(e.table, e.match_dict, e.action, e.params_dict)
        yield sw, c
    finally:
        c.close()
        sw.stop()
        loop.join(5)
        sw.close()


def test_probes_sent_by_packet_out_are_counted_per_spine(leaf: tuple[SoftSwitch, SwitchConnection]) -> None:
    sw, c = leaf
    for seq in range(3):
        send_probe(c, CL0, SP1, seq)
    send_probe(c, CL0, SP0, 9)
    deadline = time.monotonic() + 5
    while read_probe_counts(c) != {SP0.switch_id: ProbeCounts(1, 0), SP1.switch_id: ProbeCounts(3, 0)}:
        assert time.monotonic() < deadline, read_probe_counts(c)
        time.sleep(0.02)
    assert sw.stats.packet_out == 4
    assert c.read_counter(p4names.DC_DROPS, int(p4names.DropReason.PROBE)) == {int(p4names.DropReason.PROBE): (0, 0)}


def test_packet_out_header_is_the_p4_header_s_bytes() -> None:
    assert packet_out_header(spine_id=7) == bytes([7])
    with pytest.raises(ValueError, match="does not fit 8 bits"):
        packet_out_header(spine_id=256)
    with pytest.raises(ValueError, match="no field 'port'"):
        packet_out_header(spine_id=1, port=2)
    with pytest.raises(KeyError):
        packet_out_header()


# run inside the test's namespace (ip netns exec remounts /sys there, so the source sees only its veth)
_WRITE_ROUND = """
import json, socket, sys
from distcache.cluster import Cluster
from p4rt.probes import ProbeSource, probe_interfaces
c = Cluster(spines=2, storage_racks=2, client_racks=2)
rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
rx.bind((probe_interfaces(c.client_leaf(0))[0], 0))
rx.settimeout(5)
src = ProbeSource(c.client_leaf(0))
src.round(None, [c.spine(0), c.spine(1)])
src.round(None, [c.spine(1)])
frames = [rx.recv(2048).hex() for _ in range(3)]
print(json.dumps({"frames": frames, "written": src.written, "packet_outs": src.packet_outs}))
"""


def test_probe_source_writes_into_the_leaf_s_probe_port() -> None:
    """Where the leaf's probe port has its peer on this host, each probe is a raw write there: the
    packet_out header, then the probe frame (what the switch's parser takes at PROBE_PORT), no PacketOut."""
    if os.geteuid() != 0:
        pytest.skip("needs root (a network namespace, raw sockets)")
    ns = f"dcprobe{os.getpid()}"
    make_veth_namespace(ns, [probe_interfaces(CL0)])
    try:
        r = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", _WRITE_ROUND],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        delete_namespace(ns)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert (got["written"], got["packet_outs"]) == (3, 0)
    want = [
        packet_out_header(spine_id=sp.switch_id) + probe_frame(CL0, sp, seq)
        for seq, sp in ((1, SP0), (2, SP1), (3, SP1))
    ]
    assert [bytes.fromhex(f) for f in got["frames"]] == want


def test_probe_source_without_a_probe_port_sends_packet_outs(leaf: tuple[SoftSwitch, SwitchConnection]) -> None:
    """No probe port on this host (a leaf named so that none exists): PacketOuts on the session, and
    without a session the round fails with a P4RuntimeError, which the probe loops take as a stream down."""
    sw, c = leaf
    elsewhere = dataclasses.replace(CL0, name="nosuchleaf9")
    assert not os.path.exists(f"/sys/class/net/{probe_interfaces(elsewhere)[1]}")
    src = ProbeSource(elsewhere)
    src.round(c, [SP0, SP1])
    deadline = time.monotonic() + 5
    while read_probe_counts(c) != {SP0.switch_id: ProbeCounts(1, 0), SP1.switch_id: ProbeCounts(1, 0)}:
        assert time.monotonic() < deadline, read_probe_counts(c)
        time.sleep(0.02)
    assert (sw.stats.packet_out, src.packet_outs, src.written) == (2, 2, 0)
    with pytest.raises(P4RuntimeError, match="no probe port and no session"):
        src.round(None, [SP0])
    with pytest.raises(ValueError, match="not a leaf"):
        ProbeSource(SP0)
