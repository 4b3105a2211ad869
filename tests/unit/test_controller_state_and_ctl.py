"""The controller's state file and the operator CLI's behaviour without a running deployment."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from google.protobuf import text_format

from controller.controller import Controller
from controller.state import ControllerState, Failure
from controller.timing import DP_POKE_MISSES, PROBE_INTERVAL, PROBE_TIMEOUT, REFUSED_RECHECK
from distcache.cluster import Cluster, Role, Switch
from distcache.rpc.protos import controller_pb2, message_dict
from p4rt.probes import ProbeCounts
from softswitch.dataplane import PROGRAM
from tests.common.softswitch_helpers import cluster_on_port, free_tcp_port


def test_state_round_trips_through_its_file(tmp_path: Path) -> None:
    path = tmp_path / "controller.state.json"
    st = ControllerState(
        failed={"sp1": Failure(admin=True, since=12.5, reason="failed by the operator", stopped=True)},
        mechanism="partition",
        epoch=7,
        failovers=3,
        recoveries=2,
        last_detection_s=0.4,
        last_failover_s=0.2,
    )
    st.save(path)
    assert ControllerState.load(path) == st
    assert [p.name for p in tmp_path.iterdir()] == ["controller.state.json"]  # the temporary file was renamed
    assert ControllerState.load(tmp_path / "absent.json") == ControllerState()


def test_unreadable_state_says_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text('{"failed": {"sp0": {"admin": true}}')  # cut short, as by a crash of a non-atomic writer
    with pytest.raises(ValueError, match="move it away"):
        ControllerState.load(path)
    path.write_text(json.dumps({"epoch": 1, "surprise": 2}))
    with pytest.raises(ValueError, match="unreadable"):
        ControllerState.load(path)


def ctl(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.ctl", *argv], capture_output=True, text=True, timeout=60)


def test_ctl_without_a_controller_says_how_to_start_one() -> None:
    for cmd in (["status"], ["partitions", "--json"], ["fail", "sp0"]):
        res = ctl("--controller", "127.0.0.1:9", "--timeout", "2", *cmd)
        assert res.returncode == 2 and res.stdout == ""
        msg = " ".join(res.stderr.split())
        assert "controller not reachable at 127.0.0.1:9" in msg and "is it running?" in msg
        assert "python -m controller --cluster" in msg and "make run" in msg


def test_ctl_takes_the_controller_address_from_the_cluster_file(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    Cluster(controller_address="127.0.0.1:7").save(path)
    res = ctl("--cluster", str(path), "--timeout", "2", "status")
    assert res.returncode == 2 and "127.0.0.1:7" in res.stderr
    res = ctl("--cluster", str(tmp_path / "nope.json"), "status")
    assert res.returncode == 1 and res.stderr == f"error: cluster file {tmp_path / 'nope.json'}: no such file\n"


def test_ctl_help_lists_every_command() -> None:
    res = ctl("--help")
    assert res.returncode == 0
    for cmd in ("status", "partitions", "hot", "fail", "recover", "mechanism"):
        assert cmd in res.stdout


def test_json_output_keeps_every_field_and_numbers() -> None:
    msg = controller_pb2.HotReply()
    sh = msg.switches.add(switch="sp0")
    sh.keys.add(key=b"\x01\xff", text="k", hits=2**40, total_hits=0)
    d = message_dict(msg)
    assert d == {
        "switches": [
            {
                "switch": "sp0",
                "keys": [{"key": "01ff", "text": "k", "hits": 2**40, "total_hits": 0, "state": "", "slot": 0}],
            }
        ]
    }
    st = controller_pb2.SwitchStatus(name="sp0", drops={"TRUNCATED": 3})
    d = message_dict(st)
    assert d["drops"] == {"TRUNCATED": 3} and d["stats"] == {} and d["alive"] is False


def _offline_controller(tmp_path: Path, cluster: Cluster) -> Controller:
    """A controller for ``cluster`` that has connected to nothing (no thread started)."""
    p4info = tmp_path / "p4info.txt"
    p4info.write_text(text_format.MessageToString(PROGRAM.p4info()))
    return Controller(cluster, p4info, lambda h: f"unix:{tmp_path / h.name}.sock", b"", tmp_path / "state.json")


def test_no_leaf_is_ever_in_the_shims_down_set(tmp_path: Path) -> None:
    """A failed storage leaf may still answer reads from its cache (failed but running, paused and resumed,
    an eBPF program outliving its process): writes must go on invalidating it, so the shims never skip it;
    client leaves hold no copy.  (Before: every failed non-spine switch was down, and a write of a key only
    the leaf held was acknowledged with no INVALIDATE: tests/e2e/test_e2e_failover.py reads it back.)"""
    cluster = Cluster()
    ctl = _offline_controller(tmp_path, cluster)
    try:
        for sw in cluster.switches():
            if sw.role != Role.SPINE:
                ctl.state.failed[sw.name] = Failure(admin=True, since=0.0)
        assert ctl.shim_down() == []
    finally:
        ctl.close()


def test_a_spine_being_brought_back_is_down_in_no_push(tmp_path: Path) -> None:
    """controller/failover.py recover(): from when the shims are told a spine is up until it is in service
    (its flush and warm-up run between, off the lock), every down-set any thread pushes keeps it up; a copy
    warmed meanwhile must be invalidated by every write (model: bug-rejoin-down).  A failed spine no client
    leaf routes to is down otherwise, and again once its recovery gives up."""
    cluster = Cluster()
    ctl = _offline_controller(tmp_path, cluster)
    try:
        sp0 = cluster.spine(0)
        ctl.state.failed[sp0.name] = Failure(admin=True, since=0.0)
        for leaf in cluster.switches():
            if leaf.role == Role.CLIENT_LEAF:
                ctl.sessions.took(leaf.name, ctl.partition.live())  # routes without sp0 taken
        assert ctl.shim_down() == [sp0.switch_id]
        ctl.shims.rejoining.add(sp0.name)
        assert ctl.shim_down() == []
        ctl.shims.rejoining.discard(sp0.name)
        assert ctl.shim_down() == [sp0.switch_id]
    finally:
        ctl.close()


def test_a_second_failure_is_declared_while_a_recovery_is_still_going(tmp_path: Path) -> None:
    """The reconciler alone declares switches dead; an automatic recovery waits for its switch and agent and
    warms its cache (seconds, paced), so it runs on a thread of its own.  Before, it ran on the reconciler:
    no crash elsewhere was declared (nor failed over: its writes answered ERROR) until the recovery ended."""
    cluster = Cluster(spines=2)
    ctl = _offline_controller(tmp_path, cluster)
    try:
        sp1, sl0 = cluster.spine(1), next(s for s in cluster.switches() if s.role == Role.STORAGE_LEAF)
        ctl.state.failed[sp1.name] = Failure(admin=False, since=0.0, reason="P4Runtime unreachable")
        ctl.health[sp1.name].alive = ctl.health[sp1.name].agent_alive = True  # it answers again: recover it
        ctl.reconciler.reconcile()  # the recovery starts; it waits in vain for sp1's agent (nothing listens)
        deadline = time.monotonic() + 0.3
        while sp1.name not in ctl.failover.recovering and time.monotonic() < deadline:
            time.sleep(0.005)
        assert sp1.name in ctl.failover.recovering, "the reconciler waited for sp1's recovery to end"
        now = time.monotonic()
        ctl.health[sl0.name].detected = (now - 1.0, now)  # meanwhile sl0 crashes
        ctl.reconciler.reconcile()
        assert sl0.name in ctl.state.failed
        assert sp1.name in ctl.failover.recovering  # declared while sp1's recovery still ran
    finally:
        ctl.close()


def test_a_failovers_fence_never_waits_behind_a_warm_up(tmp_path: Path) -> None:
    """A warm-up after a failover inserts hundreds of keys a few at a time; the next failover's fence (and its
    configuration, and the health poll) must not queue behind them.  Here every insert of a warm-up hangs until
    the end; the fence of every client leaf is written meanwhile (before, both shared one 16-worker pool)."""
    cluster = Cluster(spines=2, client_racks=2)
    ctl = _offline_controller(tmp_path, cluster)
    release, fenced = threading.Event(), []

    class Leaf:  # a client leaf's P4Runtime session that takes the fence's write
        stream_closed = threading.Event()

        def __init__(self, name: str) -> None:
            self.name = name

        def set_default(self, *_: object, **__: object) -> None:
            fenced.append(self.name)

        def close(self) -> None:
            pass

    leaves = [s for s in cluster.switches() if s.role == Role.CLIENT_LEAF]
    for leaf in leaves:
        ctl.sessions.conns[leaf.name] = Leaf(leaf.name)  # type: ignore[assignment]
    warm = threading.Thread(target=ctl.failover._warm_at_once, args=(lambda _k: release.wait(10), [bytes(16)] * 64))
    try:
        warm.start()
        fence = threading.Thread(target=lambda: ctl.configurer.fence(ctl.cluster, ctl.state.failed))
        fence.start()
        fence.join(5)
        assert not fence.is_alive(), "the fence waited behind the warm-up's inserts"
        assert sorted(fenced) == sorted(leaf.name for leaf in leaves)
        assert warm.is_alive()
    finally:
        release.set()
        warm.join(10)
        ctl.close()


def _switch_on_a_free_port(tmp_path: Path) -> tuple[Controller, Switch, int]:
    """An offline controller of a cluster whose sp0 has the P4Runtime port ``free`` (nothing listens there)."""
    free = free_tcp_port()
    cluster = cluster_on_port(free, 1)
    return _offline_controller(tmp_path, cluster), cluster.spine(0), free


def test_a_switch_whose_port_refuses_is_probed_again_at_once_and_a_silent_one_at_the_usual_pace(
    tmp_path: Path,
) -> None:
    """A probe refused at once (nothing listens: the switch's process is gone) is followed REFUSED_RECHECK later,
    so a crash is declared ~0.2 s sooner; a probe that times out (a hung or slow peer) keeps PROBE_INTERVAL, and so
    does a switch already found dead."""
    ctl, sw, free = _switch_on_a_free_port(tmp_path)
    try:
        ctl.readers[sw.name] = ctl._reader(sw)
        assert ctl.monitor.probe(sw) == REFUSED_RECHECK and ctl.health[sw.name].misses == 1
        assert ctl.monitor.probe(sw) == PROBE_INTERVAL  # the second miss: declared dead, back to the usual pace
        h = ctl.health[sw.name]
        assert not h.alive and h.detected is not None
        with socket.socket() as silent:  # accepts connections, never answers
            silent.bind(("127.0.0.1", free))
            silent.listen()
            h.alive, h.misses, h.detected = True, 0, None
            ctl.readers[sw.name] = ctl._reader(sw)
            assert ctl.monitor.probe(sw) == PROBE_INTERVAL and h.misses == 1
    finally:
        ctl.readers.pop(sw.name).close()
        ctl.close()


def test_a_spine_silent_at_every_client_leaf_has_its_p4runtime_server_probed_at_once(tmp_path: Path) -> None:
    """DP_POKE_MISSES unanswered data-plane probes at every client leaf wake the spine's probe thread, which
    probes its P4Runtime server then rather than at the next PROBE_INTERVAL (a crash is declared ~0.1 s
    sooner); once per silence, and not for a spine already failed."""
    cluster = Cluster(spines=2, client_racks=2)
    ctl = _offline_controller(tmp_path, cluster)
    sp0, sp1 = cluster.spine(0), cluster.spine(1)
    leaves = [sw.name for sw in cluster.switches() if sw.role == Role.CLIENT_LEAF]
    try:

        def counts(sent: int, answered0: int) -> None:
            for leaf in leaves:
                ctl.monitor.probes.update(
                    leaf, {sp0.switch_id: ProbeCounts(sent, answered0), sp1.switch_id: ProbeCounts(sent, sent)}
                )

        counts(10, 10)
        counts(10 + DP_POKE_MISSES - 1, 10)
        ctl.monitor.dp_check()
        assert not any(e.is_set() for e in ctl.monitor.poke.values())
        counts(10 + DP_POKE_MISSES, 10)
        ctl.monitor.dp_check()
        assert [name for name, e in ctl.monitor.poke.items() if e.is_set()] == [sp0.name]
        ctl.monitor.poke[sp0.name].clear()
        counts(20, 10)
        ctl.monitor.dp_check()
        assert not ctl.monitor.poke[sp0.name].is_set()  # the same silence: poked once
        counts(21, 11)  # heard again, then silent again: poked again
        ctl.monitor.dp_check()
        counts(21 + DP_POKE_MISSES, 11)
        ctl.monitor.dp_check()
        assert ctl.monitor.poke[sp0.name].is_set()
        ctl.monitor.poke[sp0.name].clear()
        ctl.state.failed[sp0.name] = Failure(admin=False, since=0.0)
        counts(30, 30)
        counts(30 + DP_POKE_MISSES, 30)
        ctl.monitor.dp_check()
        assert not ctl.monitor.poke[sp0.name].is_set()  # failed already: nothing to find out
    finally:
        ctl.close()


def test_a_poked_probe_thread_probes_at_once(tmp_path: Path) -> None:
    ctl, sw, free = _switch_on_a_free_port(tmp_path)
    ctl.readers[sw.name] = ctl._reader(sw)
    with socket.socket() as silent:  # accepts connections, never answers: each probe takes PROBE_TIMEOUT
        silent.bind(("127.0.0.1", free))
        silent.listen()
        t = threading.Thread(target=ctl.monitor.probe_loop, args=(sw,), daemon=True)
        t.start()
        try:
            ctl.monitor.poke[sw.name].set()
            deadline = time.monotonic() + PROBE_INTERVAL
            while ctl.health[sw.name].misses == 0 and time.monotonic() < deadline + PROBE_TIMEOUT:
                time.sleep(0.01)
            # a probe started at the poke ends (times out) by PROBE_TIMEOUT; one at the interval only later
            assert ctl.health[sw.name].misses == 1 and time.monotonic() < deadline + PROBE_TIMEOUT - 0.05
        finally:
            ctl.close()
            t.join(PROBE_TIMEOUT + 1)


def test_a_switch_load_is_never_negative_after_its_counters_restart(tmp_path: Path) -> None:
    """A restarted switch counts from zero again: the drop between two polls is no negative load (before:
    `distcache-ctl status` showed one, e.g. -95 reads/s)."""
    cluster = Cluster()
    ctl = _offline_controller(tmp_path, cluster)
    try:
        h = ctl.health["sp0"]
        h.samples = [(10.0, 100), (12.0, 300)]
        assert ctl.monitor.load("sp0") == 100.0
        h.samples = [(12.0, 300), (13.0, 5)]  # restarted between the polls
        assert ctl.monitor.load("sp0") == 0.0
    finally:
        ctl.close()


def test_a_client_leaf_that_does_not_answer_is_not_waited_for_under_the_lock(tmp_path: Path) -> None:
    """A paused client leaf (SIGSTOP; its port accepts connections and answers nothing) is left to the
    reconciler's retries: a failover's configuration does not wait out a new session's 15 s for it with the
    lock held, during which no other failure was declared (the fault matrix's leaf_pause found it)."""
    free = free_tcp_port()
    cluster = cluster_on_port(free, 128, spines=2)  # cl0's P4Runtime port
    ctl = _offline_controller(tmp_path, cluster)
    cl0 = next(s for s in cluster.switches() if s.role == Role.CLIENT_LEAF)
    assert cl0.grpc_port == free
    try:
        with socket.socket() as silent:  # accepts connections, never answers
            silent.bind(("127.0.0.1", free))
            silent.listen()
            ctl.readers[cl0.name] = ctl._reader(cl0)
            failed = ctl.failover.configure({Role.CLIENT_LEAF})
        assert list(failed) == [cl0.name] and "does not answer a probe" in failed[cl0.name], failed
        assert cl0.name in ctl.sessions.stale  # the reconciler tries it again every RETRY s
    finally:
        ctl.close()
