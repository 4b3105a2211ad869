"""The packet fault injector (tools/faultinject, dcnet.netfaults) on real frames between namespaces.

Why: the fault matrix counts a fault by its effect, so each effect is shown here twice over, by
the datagrams a receiver actually gets and by the injector's own counters: drops that hit only
the configured class, loss bursts of exactly N frames, duplicates, reordering (sequence numbers
out of order), late copies, seeded schedules that replay, and a detach that leaves nothing
behind.  Two private namespaces joined by one veth pair (``dcfault-a`` in one, ``dcfault-b`` in
the other, no route out); DistCache messages are built with distcache.wire and sent over UDP.

Run as root under the shared lock (``flock /tmp/dc-net.lock``).  This module also runs as a
program inside a namespace (``python -m tests.e2e.test_netfaults send|recv``): the two ends of the
exchange.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest
from dcnet.netfaults import (
    BPFFS,
    FILTER_PREF,
    OBJECT,
    PIN_PREFIX,
    FaultConfig,
    FaultCounters,
    FaultInjectorError,
    PacketFaults,
    Port,
    remove_leftovers,
)

from distcache.wire import DC_PORT, Message, Op, decode, encode

if TYPE_CHECKING:
    from bench.switch import SwitchBed

ROOT = Path(__file__).resolve().parents[2]
ADDR_A, ADDR_B = "10.99.0.1", "10.99.0.2"
OTHER_PORT = 9999  # a UDP port that is not DistCache's
END_PORT = 9998  # the sender's last datagram: the receiver stops shortly after it
KEY = b"dcfault-key".ljust(16, b"\0")

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: creates network namespaces and loads BPF"),
    pytest.mark.skipif(not OBJECT.is_file(), reason="build/faultinject.bpf.o missing: run make build"),
]


# ---- the two ends, run inside the namespaces ---------------------------------------------------------------
def _send_main(items: list[list[int]]) -> None:
    """Send [sport, dport, op, seq] datagrams from ADDR_A in order, 2 ms apart (op -1: not DistCache)."""
    socks: dict[int, socket.socket] = {}
    for sport, dport, op, seq in items:
        if sport not in socks:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((ADDR_A, sport))
            socks[sport] = s
        payload = encode(Message(op=Op(op), digest=KEY, seq=seq)) if op >= 0 else seq.to_bytes(4, "big") + b"x" * 36
        socks[sport].sendto(payload, (ADDR_B, dport))
        time.sleep(0.002)


def _recv_main(idle: float) -> None:
    """Print one JSON line [dport, sport, op, seq] per datagram to ADDR_B; stop 0.3 s after END_PORT or when idle."""
    socks = {}
    for port in (DC_PORT, OTHER_PORT, END_PORT):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((ADDR_B, port))
        socks[s.fileno()] = (s, port)
    print("ready", flush=True)
    last, end_at = time.monotonic(), float("inf")
    while (timeout := min(last + idle, end_at) - time.monotonic()) > 0:
        ready, _, _ = select.select(list(socks), [], [], timeout)
        for fd in ready:
            s, port = socks[fd]
            data, (_, sport) = s.recvfrom(4096)
            last = time.monotonic()
            if port == END_PORT:
                end_at = last + 0.3
                continue
            try:
                msg = decode(data)
                op, seq = int(msg.op), msg.seq
            except ValueError:
                op, seq = -1, int.from_bytes(data[:4], "big")
            print(json.dumps([port, sport, op, seq]), flush=True)


# ---- fixtures -------------------------------------------------------------------------------------------
def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check)


@dataclass
class Pair:
    """Namespaces ``a`` and ``b`` joined by dcfault-a <-> dcfault-b."""

    a: str
    b: str

    @property
    def port_a(self) -> Port:
        return Port("dcfault-a", self.a)

    @property
    def port_b(self) -> Port:
        return Port("dcfault-b", self.b)

    def start_receiver(self, idle: float = 10.0) -> subprocess.Popen:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.b, sys.executable, "-m", "tests.e2e.test_netfaults", "recv", str(idle)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return proc

    def send(self, items: list[tuple[int, int, int, int]], end: bool = True) -> None:
        """Send [sport, dport, op, seq] from a; ``end``: then the receiver's stop datagram."""
        all_items = [list(x) for x in items] + ([[0, END_PORT, -1, 0]] if end else [])
        sh(
            "ip",
            "netns",
            "exec",
            self.a,
            sys.executable,
            "-m",
            "tests.e2e.test_netfaults",
            "send",
            json.dumps(all_items),
        )

    @staticmethod
    def received(proc: subprocess.Popen) -> list[tuple[int, int, int, int]]:
        out, _ = proc.communicate(timeout=30)
        return [tuple(json.loads(line)) for line in out.splitlines() if line.strip()]

    def exchange(self, items: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
        proc = self.start_receiver()
        self.send(items)
        return self.received(proc)


@pytest.fixture
def pair() -> Iterator[Pair]:
    p = Pair(f"dcfault-{os.getpid()}-a", f"dcfault-{os.getpid()}-b")
    for ns in (p.a, p.b):
        sh("ip", "netns", "del", ns, check=False)
        sh("ip", "netns", "add", ns)
    try:
        sh("ip", "link", "add", "dcfault-a", "netns", p.a, "type", "veth", "peer", "name", "dcfault-b", "netns", p.b)
        macs = {}
        for ns, dev, addr in ((p.a, "dcfault-a", ADDR_A), (p.b, "dcfault-b", ADDR_B)):
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "netns", "exec", ns, "ethtool", "-K", dev, "tx", "off", check=False)
            macs[dev] = json.loads(sh("ip", "-j", "-n", ns, "link", "show", dev).stdout)[0]["address"]
        # no ARP on the wire: the first datagrams are not queued behind a resolution
        sh(
            "ip",
            "-n",
            p.a,
            "neigh",
            "replace",
            ADDR_B,
            "lladdr",
            macs["dcfault-b"],
            "dev",
            "dcfault-a",
            "nud",
            "permanent",
        )
        sh(
            "ip",
            "-n",
            p.b,
            "neigh",
            "replace",
            ADDR_A,
            "lladdr",
            macs["dcfault-a"],
            "dev",
            "dcfault-b",
            "nud",
            "permanent",
        )
        yield p
    finally:
        for ns in (p.a, p.b):
            sh("ip", "netns", "del", ns, check=False)


def coherence(op: Op, seq: int) -> tuple[int, int, int, int]:
    """A coherence message as the shim sends it (to DistCache's port) or a spine answers it (from it)."""
    return (DC_PORT, OTHER_PORT, int(op), seq) if op.is_reply else (0, DC_PORT, int(op), seq)


def seqs(got: list[tuple[int, int, int, int]], op: Op | None = None) -> list[int]:
    return [seq for _dport, _sport, o, seq in got if op is None or o == int(op)]


def our_pins() -> list[Path]:
    return sorted(BPFFS.glob(f"{PIN_PREFIX}*")) if BPFFS.is_dir() else []


# ---- tests ----------------------------------------------------------------------------------------------
def test_config_layout_matches_the_program(pair: Pair) -> None:
    """FaultConfig.pack writes struct dc_cfg field by field (read back through the program's BTF)."""
    cfg = FaultConfig(
        match="coherence",
        drop=0.25,
        burst=0.5,
        burst_len=7,
        duplicate=1.0,
        reorder=0.125,
        reorder_distance=3,
        replay=0.0625,
        hold_max=0.02,
        seed=12345,
        port=8888,
    )
    with PacketFaults([pair.port_a]) as faults:
        faults.configure(cfg)
        pin = pair.port_a.pin_dir / "dc_cfg"
        dump = json.loads(sh("bpftool", "-j", "map", "dump", "pinned", str(pin)).stdout)
        values = {e["formatted"]["key"]: e["formatted"]["value"] for e in dump}
    assert values[0]["enabled"] == 0  # ingress not attached: untouched
    v = values[1]
    ops = [Op.INVALIDATE, Op.UPDATE, Op.INVALIDATE_ACK, Op.UPDATE_ACK]
    want_ops = [0] * 8
    for op in ops:
        want_ops[op >> 5] |= 1 << (op & 31)
    assert v == {
        "enabled": 1,
        "match": 1,
        "port": 8888,
        "use_ops": 1,
        "ops": want_ops,
        "seed": 12345,
        "drop_p": 1 << 30,
        "burst_p": 1 << 31,
        "dup_p": 1 << 32,
        "hold_p": 1 << 29,
        "replay_p": 1 << 28,
        "burst_len": 7,
        "hold_distance": 3,
        "hold_max_ns": 20_000_000,
        "copy_ifindex": 0,
        "pad": 0,
    }  # the veth peer is in another namespace: copies stay here


def test_drop_hits_only_coherence(pair: Pair) -> None:
    sent = [
        coherence(Op.INVALIDATE, 0),
        coherence(Op.UPDATE, 1),
        coherence(Op.INVALIDATE_ACK, 2),
        coherence(Op.UPDATE_ACK, 3),
        (0, DC_PORT, int(Op.GET), 4),
        (0, DC_PORT, int(Op.PUT), 5),
        (DC_PORT, OTHER_PORT, int(Op.GET_REPLY), 6),
        (0, OTHER_PORT, -1, 7),
        (0, OTHER_PORT, int(Op.INVALIDATE), 8),
    ]  # shaped like an INVALIDATE, but not DistCache's port
    with PacketFaults([pair.port_a]) as faults:
        faults.configure(FaultConfig(match="coherence", drop=1.0))
        got = pair.exchange(sent)
        c = faults.counters()
    assert sorted(seqs(got)) == [4, 5, 6, 7, 8]
    assert c == FaultCounters(matched=4, dropped=4)


def test_drop_classes_distcache_and_ipv4(pair: Pair) -> None:
    sent = [coherence(Op.INVALIDATE, 0), (0, DC_PORT, int(Op.GET), 1), (0, OTHER_PORT, -1, 2)]
    with PacketFaults([pair.port_a]) as faults:
        faults.configure(FaultConfig(match="distcache", drop=1.0))
        assert seqs(pair.exchange(sent)) == [2]
        assert faults.counters() == FaultCounters(matched=2, dropped=2)
        faults.reset_counters()
        faults.configure(FaultConfig(match="ipv4", drop=1.0))
        proc = pair.start_receiver()
        pair.send(sent, end=False)
        assert faults.counters() == FaultCounters(matched=3, dropped=3)
        faults.configure(FaultConfig(match="ipv4", enabled=False))
        pair.send([])  # the stop datagram, now let through
        assert pair.received(proc) == []


@pytest.mark.parametrize("direction", ["egress", "ingress"])
def test_duplicate_delivers_each_matching_datagram_twice(pair: Pair, direction: str) -> None:
    port = pair.port_a if direction == "egress" else pair.port_b
    sent = [coherence(Op.INVALIDATE, i) for i in range(5)] + [(0, DC_PORT, int(Op.GET), 5)]
    with PacketFaults([port], directions=[direction]) as faults:
        faults.configure(FaultConfig(match="coherence", duplicate=1.0))
        got = pair.exchange(sent)
        c = faults.counters()
    assert seqs(got) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5]
    assert c == FaultCounters(matched=5, duplicated=5)


def test_loss_burst_drops_exactly_n_consecutive_matching(pair: Pair) -> None:
    sent = []
    for i in range(12):
        sent += [coherence(Op.UPDATE, i), (0, DC_PORT, int(Op.GET), 100 + i)]
    with PacketFaults([pair.port_a]) as faults:
        faults.configure(FaultConfig(match="coherence"))
        faults.start_burst(5)
        got = pair.exchange(sent)
        c = faults.counters()
    assert seqs(got, Op.UPDATE) == list(range(5, 12))
    assert seqs(got, Op.GET) == [100 + i for i in range(12)]  # non-matching frames do not use up the burst
    assert c == FaultCounters(matched=12, burst_dropped=5, bursts=1)


def test_random_bursts_are_whole_and_replay_with_their_seed(pair: Pair) -> None:
    n, length = 60, 3
    sent = [coherence(Op.INVALIDATE, i) for i in range(n)]
    cfg = FaultConfig(match="coherence", burst=0.1, burst_len=length, seed=11)
    runs = []
    with PacketFaults([pair.port_a]) as faults:
        for seed in (11, 11, 12):
            faults.reset_counters()
            faults.configure(dataclasses.replace(cfg, seed=seed))
            got = seqs(pair.exchange(sent))
            runs.append((got, faults.counters()))
    (got, c), (again, c2), (other, _) = runs
    missing = sorted(set(range(n)) - set(got))
    assert c.bursts >= 1 and c.burst_dropped == len(missing) == n - len(got)
    # each burst drops `length` consecutive frames (the last may be cut short by the end of the run)
    assert (c.bursts - 1) * length < c.burst_dropped <= c.bursts * length
    gaps, start = [], None
    for i in range(n + 1):
        if i in missing and start is None:
            start = i
        elif i not in missing and start is not None:
            gaps.append((start, i - start))
            start = None
    assert all(size % length == 0 or begin + size == n for begin, size in gaps), gaps
    assert (again, c2) == (got, c)  # same seed, same frames: the same schedule
    assert other != got


def test_seeded_drops_and_duplicates_replay(pair: Pair) -> None:
    sent = [coherence(Op.UPDATE, i) for i in range(40)]
    results = []
    with PacketFaults([pair.port_a]) as faults:
        for seed in (5, 5, 6):
            faults.reset_counters()
            faults.configure(FaultConfig(match="coherence", drop=0.3, duplicate=0.3, seed=seed))
            results.append((seqs(pair.exchange(sent)), faults.counters()))
    (got, c), again, (other, _) = results
    assert again == (got, c)
    assert other != got
    assert 0 < c.dropped < 40 and 0 < c.duplicated < 40
    assert len(got) == 40 - c.dropped + c.duplicated
    assert len(set(range(40)) - set(got)) == c.dropped
    assert sum(1 for i in range(40) if got.count(i) == 2) == c.duplicated


@pytest.mark.parametrize("direction", ["egress", "ingress"])
def test_reorder_sends_a_held_frame_after_the_next(pair: Pair, direction: str) -> None:
    port = pair.port_a if direction == "egress" else pair.port_b
    with PacketFaults([port], directions=[direction]) as faults:
        faults.configure(FaultConfig(match="coherence", reorder=1.0, hold_max=0))
        got = seqs(pair.exchange([coherence(Op.INVALIDATE, i) for i in range(10)]))
        c = faults.counters()
        assert got == [1, 0, 3, 2, 5, 4, 7, 6, 9, 8]
        assert c == FaultCounters(matched=10, held=5, reordered=5)
        faults.reset_counters()
        faults.configure(FaultConfig(match="coherence", reorder=1.0, reorder_distance=3, hold_max=0))
        got = seqs(pair.exchange([coherence(Op.INVALIDATE, i) for i in range(9)]))
        c = faults.counters()
    assert got == [1, 2, 3, 0, 5, 6, 7, 4]  # 8 is still held: nothing came after it
    assert c == FaultCounters(matched=9, held=3, reordered=2, held_now=1)


def test_held_frame_goes_after_hold_max_behind_other_traffic(pair: Pair) -> None:
    with PacketFaults([pair.port_a]) as faults:
        faults.configure(FaultConfig(match="coherence", reorder=1.0, hold_max=0.05))
        proc = pair.start_receiver()
        pair.send([coherence(Op.INVALIDATE, 0)], end=False)
        time.sleep(0.2)
        held = faults.counters()
        pair.send([(0, DC_PORT, int(Op.GET), 1)])  # not coherence: it carries the held frame out
        got = pair.received(proc)
        c = faults.counters()
    assert held == FaultCounters(matched=1, held=1, held_now=1)
    assert seqs(got) == [1, 0]
    assert c == FaultCounters(matched=1, held=1, delayed=1)


def test_replay_sends_a_late_copy(pair: Pair) -> None:
    with PacketFaults([pair.port_a]) as faults:
        faults.configure(FaultConfig(match="coherence", replay=1.0, hold_max=0))
        got = seqs(pair.exchange([coherence(Op.UPDATE, i) for i in range(6)]))
        c = faults.counters()
    assert got == [0, 1, 0, 2, 3, 2, 4, 5, 4]
    assert c == FaultCounters(matched=6, replayed=3)


def test_detach_leaves_nothing_behind(pair: Pair) -> None:
    def tc_show(what: str, *args: str) -> list:
        return json.loads(
            sh("nsenter", f"--net=/run/netns/{pair.a}", "tc", "-j", what, "show", "dev", "dcfault-a", *args).stdout
            or "[]"
        )

    assert our_pins() == []
    with PacketFaults([pair.port_a], directions=["egress", "ingress"]) as faults:
        faults.configure(FaultConfig(match="coherence", reorder=1.0, hold_max=0))
        pair.exchange([coherence(Op.INVALIDATE, 0)])
        assert faults.counters().held_now == 1
        assert [q["kind"] for q in tc_show("qdisc")].count("clsact") == 1
        assert len(tc_show("filter", "egress")) > 0 and len(tc_show("filter", "ingress")) > 0
        assert our_pins() == [pair.port_a.pin_dir]
    assert "clsact" not in [q["kind"] for q in tc_show("qdisc")]
    assert our_pins() == []
    assert seqs(pair.exchange([coherence(Op.INVALIDATE, 1)])) == [1]  # traffic flows untouched again

    # a clsact that was there before stays, with its own filter; only ours goes
    ns = ["nsenter", f"--net=/run/netns/{pair.a}"]
    sh(*ns, "tc", "qdisc", "add", "dev", "dcfault-a", "clsact")
    sh(
        *ns,
        "tc",
        "filter",
        "add",
        "dev",
        "dcfault-a",
        "egress",
        "pref",
        "10",
        "u32",
        "match",
        "u32",
        "0",
        "0",
        "flowid",
        "1:1",
    )
    with PacketFaults([pair.port_a]):
        assert {f["pref"] for f in tc_show("filter", "egress")} == {10, FILTER_PREF}
    assert {f["pref"] for f in tc_show("filter", "egress")} == {10}
    assert "clsact" in [q["kind"] for q in tc_show("qdisc")]
    assert our_pins() == []


def test_cleanup_removes_what_a_killed_run_left() -> None:
    """dcnet.cleanup's part: filters on root-namespace interfaces, their clsact, the pins, dcfault- links."""
    sh("ip", "link", "add", "dcfault-r0", "type", "veth", "peer", "name", "dcfault-r1")
    try:
        faults = PacketFaults(["dcfault-r0"], directions=["egress", "ingress"])
        faults.attach()  # and never detached, as if the process had been killed
        assert our_pins() == [Port("dcfault-r0").pin_dir]
        removed = remove_leftovers()
        assert "egress filter on dcfault-r0" in removed and "ingress filter on dcfault-r0" in removed
        assert our_pins() == []
        assert sh("ip", "link", "show", "dcfault-r0", check=False).returncode != 0
        # no filter and no pin holds the programs any more: the kernel unloaded them
        assert "dc_fault_" not in sh("bpftool", "prog", "show").stdout
    finally:
        sh("ip", "link", "del", "dcfault-r0", check=False)


@pytest.mark.parametrize("target", ["softswitch", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_faults_reach_what_a_switch_sends(target: str) -> None:
    """On a real switch's port: the switch handles one GET each time, the wire carries 1, 2 or 0 copies."""
    if target == "bmv2":
        from bench.switch import BMV2_JSON, BMV2_SWITCH

        if not (shutil.which(BMV2_SWITCH) and BMV2_JSON.is_file()):
            pytest.skip("needs simple_switch_grpc on PATH and build/distcache.json (make build with p4c-bm2-ss)")
    res = sh(sys.executable, "-m", "tests.e2e.test_netfaults", "switch", target, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    port, r = out["server_port"], out["results"]
    assert r["copies_to_peer"]  # a switch-side veth whose peer is in the same namespace
    assert r["clean"]["miss"] == [port] and r["duplicate"]["miss"] == [port, port] and r["drop"]["miss"] == []
    assert r["clean"]["fwd"] == r["duplicate"]["fwd"] == r["drop"]["fwd"] == [port]  # not DistCache: untouched
    assert r["clean"]["switch"] == r["duplicate"]["switch"] == r["drop"]["switch"]  # the switch saw the same
    assert r["clean"]["switch"]
    assert FaultCounters(**r["clean"]["counters"]) == FaultCounters(matched=1)
    assert FaultCounters(**r["duplicate"]["counters"]) == FaultCounters(matched=1, duplicated=1)
    assert FaultCounters(**r["drop"]["counters"]) == FaultCounters(matched=1, dropped=1)
    # two GETs, switched once each (no copy came back into the switch), on the wire in reverse order
    assert r["reorder"]["held"] == 0 and r["reorder"]["seqs"] == [1002, 1001]
    assert r["reorder"]["switch"] == {k: 2 * v for k, v in r["clean"]["switch"].items()}
    assert FaultCounters(**r["reorder"]["counters"]) == FaultCounters(matched=2, held=1, reordered=1)


def test_clear_errors_and_nothing_left(pair: Pair, tmp_path: Path) -> None:
    with pytest.raises(FaultInjectorError, match=r"faultinject.bpf.o is missing: run make build"):
        PacketFaults([pair.port_a], obj=tmp_path / "faultinject.bpf.o").attach()
    with pytest.raises(FaultInjectorError, match="no interface dcfault-zz"):
        PacketFaults([pair.port_a, Port("dcfault-zz", pair.a)]).attach()
    assert our_pins() == []
    assert "clsact" not in sh("nsenter", f"--net=/run/netns/{pair.a}", "tc", "qdisc", "show").stdout
    with pytest.raises(FaultInjectorError, match="not attached"):
        PacketFaults([pair.port_a]).counters()
    with pytest.raises(ValueError, match="drop is a probability"):
        FaultConfig(drop=1.5)
    with pytest.raises(ValueError, match="match must be one of"):
        FaultConfig(match="tcp")
    with pytest.raises(ValueError, match="burst > 0 needs burst_len"):
        FaultConfig(burst=0.1)
    if shutil.which("bpftool") or Path("/usr/sbin/bpftool").exists():
        with PacketFaults([pair.port_a]) as faults, pytest.raises(ValueError, match="not attached"):
            faults.configure(FaultConfig(), directions=["ingress"])


def _configure(bench: ModuleType, bed: SwitchBed) -> None:
    """The pipeline and sl0's entries (SwitchBed.configure without filling the cache: only forwarding is needed)."""
    from distcache import p4names
    from p4rt.p4info import load_p4info
    from p4rt.plan import plan
    from softswitch.dataplane import PROGRAM

    if bed.target == "bmv2":
        bed.sw.set_pipeline(load_p4info(bench.BMV2_P4INFO), bench.BMV2_JSON.read_bytes())
    else:
        bed.sw.set_pipeline(PROGRAM.p4info(), b"")
    entries = plan(bench.CLUSTER, bench.LEAF, bench.BUCKETS)
    bed.sw.set_default(p4names.SWITCH_CONFIG, p4names.SET_CONFIG, entries.config)
    for e in entries.defaults:
        bed.sw.set_default(e.table, e.action, e.params_dict)
    for e in entries.entries:
        bed.sw.insert(e.table, e.match_dict, e.action, e.params_dict)


def _switch_main(target: str) -> None:
    """Print JSON: per fault setting, where a GET miss and a plain UDP frame left the switch, and the counters.

    The switch is ``make bench-switch``'s: storage leaf sl0 with the controller's entries, in a
    namespace of its own (here ``dcfault-sw-<pid>``); the injector sits on the egress of the
    switch's server-facing port, so it faults what the switch itself transmits.
    """
    from bench import switch as bench

    frames = bench.build_frames()
    ns = bench.Namespace(bench.PORTS)
    ns.name = f"dcfault-sw-{os.getpid()}"
    results = {}
    with tempfile.TemporaryDirectory(prefix="dcfault-") as tmp:
        try:
            ns.create()
            ns.enter()  # before any thread, as bench.switch does
            bed = bench.SwitchBed(target, ns, Path(tmp), None)  # type: ignore[arg-type]  # no progress bars here
            try:
                bed.start()
                _configure(bench, bed)
                port = Port(f"bsw{bench.SERVER_PORT}", ns.name)
                with PacketFaults([port]) as faults:
                    results["copies_to_peer"] = faults.copies_go_to_peer(port)
                    for label, cfg in (
                        ("clean", FaultConfig(match="distcache")),
                        ("duplicate", FaultConfig(match="distcache", duplicate=1.0)),
                        ("drop", FaultConfig(match="distcache", drop=1.0)),
                    ):
                        faults.configure(cfg)
                        faults.reset_counters()
                        before = bed.stats()
                        miss = bench.probe(frames.paths["miss"], timeout=1.0)
                        fwd = bench.probe(frames.paths["fwd"], timeout=1.0)
                        after = bed.stats()
                        results[label] = {
                            "miss": [p for p, _ in miss],
                            "fwd": [p for p, _ in fwd],
                            "counters": dataclasses.asdict(faults.counters()),
                            "switch": {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)},
                        }
                    # reordering: the first GET is held, the second overtakes it
                    faults.configure(FaultConfig(match="distcache", reorder=1.0, hold_max=0))
                    faults.reset_counters()
                    before = bed.stats()
                    miss = frames.paths["miss"]
                    first, second = (miss[:46] + seq.to_bytes(8, "big") + miss[54:] for seq in (1001, 1002))
                    held = bench.probe(first, timeout=0.5)
                    out = bench.probe(second, timeout=1.0)
                    after = bed.stats()
                    results["reorder"] = {
                        "held": len(held),
                        "seqs": [decode(bench.udp_payload(f)[2]).seq for _, f in out],
                        "counters": dataclasses.asdict(faults.counters()),
                        "switch": {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)},
                    }
            finally:
                bed.close()
        finally:
            ns.delete()
    print(json.dumps({"server_port": bench.SERVER_PORT, "results": results}))


if __name__ == "__main__":
    if sys.argv[1] == "send":
        _send_main(json.loads(sys.argv[2]))
    elif sys.argv[1] == "switch":
        _switch_main(sys.argv[2])
    else:
        _recv_main(float(sys.argv[2]))
