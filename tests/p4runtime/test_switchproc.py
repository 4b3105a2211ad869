"""Stopping a switch never kills a process that is not the switch (issue 15, suspected defect: confirmed).

``harness.processes`` stops a switch by killing the process group of the pid in its pid file.
A pid file outlives its process: when the switch has exited (crashed, or killed by hand), the
kernel may hand its pid to any new process, and the next ``distcache-ctl fail`` or teardown would
SIGKILL that stranger's whole process group.  The test reproduces exactly that state: a real
softswitch started by ``SwitchProcesses``, then killed behind its back, and its pid now belonging
to another process (a session leader, as a daemon or a shell would be) — written into the pid
file as the kernel's reuse would make it read.  Stopping the switch must leave the stranger alive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.processes import SwitchProcessError, SwitchProcesses, pid_alive
from tests.common.softswitch_helpers import free_tcp_port

pytestmark = pytest.mark.timeout(90)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def procs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SwitchProcesses]:
    port = free_tcp_port()
    spec = {
        "cmd": [
            sys.executable,
            "-m",
            "softswitch",
            "--device-id",
            "1",
            "--grpc-addr",
            f"127.0.0.1:{port}",
            "--pipeline",
            "tests.common.softswitch_helpers:ForwardPipeline",
        ],
        "pid_file": str(tmp_path / "sp0.pid"),
        "log": str(tmp_path / "sp0.out"),
        "grpc": f"127.0.0.1:{port}",
    }
    (tmp_path / "switches.json").write_text(json.dumps({"sp0": spec}))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    p = SwitchProcesses(tmp_path / "switches.json")
    yield p
    for child in p._children.values():  # whatever this test started, never a pid read from a file
        child.kill()
        child.wait()


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen]:
    """Another process, leading its own process group and session (as a daemon would)."""
    p = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield p
    p.kill()
    p.wait()


def _die(pid: int) -> None:
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def test_stop_leaves_a_process_that_reused_the_pid_alone(procs: SwitchProcesses, stranger: subprocess.Popen) -> None:
    pid = procs.start("sp0")
    pid_file = Path(procs.specs["sp0"]["pid_file"])
    assert procs.running("sp0") and int(pid_file.read_text().split()[0]) == pid
    _die(pid)  # the switch crashed (or was killed by hand); its pid file stays
    procs._children["sp0"].wait(5)  # reaped: its pid is free for the kernel to hand out again
    # the kernel hands the pid to another process: the file now names that process's pid
    pid_file.write_text(pid_file.read_text().replace(str(pid), str(stranger.pid), 1))
    procs.stop("sp0")  # `distcache-ctl fail sp0`, or the deployment's teardown
    time.sleep(0.2)
    assert stranger.poll() is None, "stopping the switch killed a process that was not the switch"
    assert not procs.running("sp0")  # not the switch: it is not running, whatever has that pid
    assert procs.start("sp0") > 0  # and it can be started again (nothing "already running")
    assert procs.running("sp0")


def test_stop_kills_the_switch_it_started(procs: SwitchProcesses) -> None:
    from harness.processes import is_ours, read_pid_file

    pid = procs.start("sp0")
    assert is_ours(read_pid_file(procs.specs["sp0"]["pid_file"]), procs.specs["sp0"]["cmd"])
    procs.stop("sp0")
    assert not pid_alive(pid) and not procs.running("sp0")


def test_a_switch_list_of_the_wrong_shape_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "switches.json"
    for bad in ("[1, 2]", '{"sp0": {"cmd": "softswitch"}}', "{"):
        path.write_text(bad)
        with pytest.raises(SwitchProcessError, match=r"switches\.json|cannot read"):
            SwitchProcesses(path)


def test_a_spine_restarts_at_its_real_time_priority_every_thread_of_it(procs: SwitchProcesses) -> None:
    """A spine's silence is what its leaves' liveness measures (harness.processes.SPINE_RT_PRIORITY): the
    process `recover` starts again is SCHED_RR like the first, every thread of it, and the other switches
    are not (nice SWITCH_NICE only)."""
    import os

    from harness.processes import SPINE_RT_PRIORITY, SWITCH_NICE

    if os.geteuid() != 0:
        pytest.skip("real-time priorities need root")
    pid = procs.start("sp0")
    assert os.sched_getscheduler(pid) == os.SCHED_OTHER  # no "realtime" in its spec: a leaf
    assert os.getpriority(os.PRIO_PROCESS, pid) == SWITCH_NICE
    procs.stop("sp0")
    procs.specs["sp0"]["realtime"] = True
    pid = procs.start("sp0")
    threads = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    assert len(threads) > 1  # gRPC's threads included
    assert {os.sched_getscheduler(t) for t in threads} == {os.SCHED_RR}
    assert {os.sched_getparam(t).sched_priority for t in threads} == {SPINE_RT_PRIORITY}


@pytest.mark.parametrize("bad", [{"realtime": "yes"}, {"detach": "softswitch --cleanup"}, {"detach": [1]}])
def test_a_switch_list_with_a_realtime_or_detach_of_the_wrong_type_is_refused(tmp_path: Path, bad: dict) -> None:
    path = tmp_path / "switches.json"
    spec = {"cmd": ["softswitch"], "pid_file": "p", "log": "l", "grpc": "127.0.0.1:1", **bad}
    path.write_text(json.dumps({"sp0": spec}))
    with pytest.raises(SwitchProcessError, match=r"optional realtime: bool, optional detach: \[args\]"):
        SwitchProcesses(path)
