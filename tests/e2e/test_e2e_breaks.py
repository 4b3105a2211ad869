"""Check the checks: each deliberate break of coherence (tests/breaks.py) is caught, by the staleness oracle
(loadgen.oracle: ``stale>0`` or ``wrong>0``) and by the fault matrix's linearizability check (lincheck: a
violation), on the same recorded history.

What they break is the shims' or the controller's, the same on every target: checked on softswitch.  A check
that passes a broken protocol proves nothing, so each must report its break.  Acknowledging before
invalidating is caught by a cell of the fault matrix itself (its control run); the others by the
interleaving each break gives away, played step by step (a fault cell's writes come too often for them to
show: a hot key is written again, and so invalidated again, before a read meets the copy the break left),
and the same steps on the protocol as it is must show nothing.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from dcnet.deploy import Deployment
from dcnet.matrix_cell import run_cell
from dcnet.matrix_result import LINCHECK

from distcache.cluster import Cluster
from distcache.wire import Op, WireError, decode
from tests.common.history_recorder import Recorder

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not LINCHECK.exists(), reason="build/lincheck missing: `make deps` builds it (needs Go)"),
    pytest.mark.timeout(600),
]


def test_acknowledging_a_write_before_invalidating_is_caught_by_a_matrix_cell(tmp_path: Path) -> None:
    cell = run_cell(
        "distcache",
        tmp_path,
        "softswitch",
        duration=10,
        clients=6,
        seed=7,
        per_kind=0,
        breaks=("ack-before-invalidate",),
        packet_faults=False,
    )
    assert cell.cached_reads > 50, f"too few reads met a cache to show anything: {cell.line}"
    assert cell.oracle.stale > 0, f"the oracle missed it: {cell.line}; see {cell.history}"
    assert cell.violations > 0, f"lincheck missed it: {cell.line}; see {cell.history}"
    assert cell.html is not None and cell.html.stat().st_size > 1000


# -- interleavings, step by step ----------------------------------------------------------------------------------
CLUSTER = Cluster(spines=2, storage_racks=1, client_racks=1, cache_slots=8)
READS = 30


def cached_at(dep: Deployment, rec: Recorder, spine: str, prefix: str) -> str:
    """A key written (v1) and cached by hand at ``spine`` (its h0 owner) and its storage leaf."""
    for i in range(64):
        key = f"{prefix}{i}"
        if spine in dep.controller.caches_of(key):
            assert rec.put(key, "v1")
            assert {e.state for e in dep.controller.cache(key).values()} == {"valid"}
            return key
    raise AssertionError(f"no key of {spine} among {prefix}0..63")


def skipped_invalidation(dep: Deployment, rec: Recorder) -> None:
    """A write of a key the lowest spine caches (the one skip-one-invalidate leaves out)."""
    key = cached_at(dep, rec, "sp0", "skip")
    assert rec.put(key, "v2")
    rec.reads(key, READS)


def delayed_phase_two(dep: Deployment, rec: Recorder, tmp_path: Path) -> None:
    """k = v2 written while the storage host's interface is captured; k = v3 written; then v2's UPDATE, as
    captured, sent again from the storage host: a phase 2 delayed past a newer write (the network may)."""
    key = cached_at(dep, rec, "sp0", "late")
    server = dep.host(CLUSTER.servers()[0].name)
    intf = server.defaultIntf().name  # type: ignore[attr-defined]
    pcap = tmp_path / "update.pcap"
    dump = server.popen(
        ["tcpdump", "--immediate-mode", "-U", "-n", "-i", intf, "-w", str(pcap), "udp"], stderr=subprocess.DEVNULL
    )  # type: ignore[attr-defined]
    time.sleep(1.0)  # tcpdump is listening
    assert rec.put(key, "v2")
    time.sleep(0.5)  # phase 2 went out (--immediate-mode: each packet written as it comes, not a block later)
    dump.terminate()
    dump.wait(5)
    assert rec.put(key, "v3")
    time.sleep(0.5)
    from scapy.all import UDP, rdpcap  # imported here: scapy's import is slow

    updates = []
    for frame in rdpcap(str(pcap)):
        try:
            m = decode(bytes(frame[UDP].payload))
        except (IndexError, WireError):
            continue
        if m.op == Op.UPDATE and m.value == b"v2":
            updates.append(bytes(frame))
    assert updates, "no UPDATE of v2 captured"
    code = "import socket,sys; s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW); s.bind((sys.argv[1],0)); "
    code += "s.send(bytes.fromhex(sys.argv[2]))"
    server.cmd(f"{sys.executable} -c '{code}' {intf} {updates[0].hex()}")  # type: ignore[attr-defined]
    time.sleep(0.3)
    rec.reads(key, READS)


def unflushed_recovery(dep: Deployment, rec: Recorder) -> None:
    """The key's spine taken out of service but left running (its cache kept), the key written meanwhile (the
    spine is skipped: it is down), the spine recovered; then reads, some of them routed to it."""
    key = cached_at(dep, rec, "sp1", "drain")
    assert dep.controller.ctl.fail("sp1", keep_running=True)
    assert rec.put(key, "v2")
    dep.controller.ctl.recover("sp1")
    dep.wait_switch("sp1", failed=False)
    rec.reads(key, READS)


def caught(tmp_path: Path, breaks: tuple[str, ...], steps: object) -> None:
    with Deployment(CLUSTER, run_dir=tmp_path / "run", breaks=breaks) as dep:
        rec = Recorder(dep.client())
        steps(dep, rec)  # type: ignore[operator]
        assert sum(line.get("served_by", 0) != 0 for line in rec.lines) > 0, "no read met a cache"
        bad, violations = rec.judged(tmp_path / "history.jsonl")
    assert bad > 0, f"the oracle missed {breaks}; see {tmp_path / 'history.jsonl'}"
    assert violations > 0, f"lincheck missed {breaks}; see {tmp_path / 'history.jsonl'}"


def test_skipping_the_invalidation_of_one_switch_is_caught(tmp_path: Path) -> None:
    caught(tmp_path, ("skip-one-invalidate",), skipped_invalidation)


def test_a_reused_sequence_number_letting_a_delayed_phase_two_revalidate_is_caught(tmp_path: Path) -> None:
    caught(tmp_path, ("reuse-seq",), lambda dep, rec: delayed_phase_two(dep, rec, tmp_path))


def test_recovering_a_spine_without_its_flush_is_caught(tmp_path: Path) -> None:
    caught(tmp_path, ("no-flush-on-recover",), unflushed_recovery)


def test_the_same_interleavings_on_the_protocol_as_it_is_show_nothing(tmp_path: Path) -> None:
    with Deployment(CLUSTER, run_dir=tmp_path / "run") as dep:
        rec = Recorder(dep.client())
        skipped_invalidation(dep, rec)
        delayed_phase_two(dep, rec, tmp_path)
        unflushed_recovery(dep, rec)
        assert sum(line.get("served_by", 0) != 0 for line in rec.lines) > READS, "too few reads met a cache"
        assert rec.judged(tmp_path / "history.jsonl") == (0, 0), f"see {tmp_path / 'history.jsonl'}"
