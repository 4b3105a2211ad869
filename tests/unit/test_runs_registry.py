"""``make clean`` stops only what a dead run recorded (harness.runs), never a live run's processes.

Before: it killed every process whose command line matched ``-m softswitch``, ``-m shim``, ... and ran
Mininet's global cleanup, taking down a run going on beside it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import runs
from harness.processes import pid_alive, start_time


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen]]:
    made: list[subprocess.Popen] = []
    yield made
    for p in made:
        p.kill()
        p.wait()


def _sleeper(made: list[subprocess.Popen]) -> subprocess.Popen:
    p = subprocess.Popen(["sleep", "60"], start_new_session=True)
    made.append(p)
    return p


def _gone(p: subprocess.Popen) -> bool:
    deadline = time.monotonic() + 5
    while p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return p.poll() is not None


def test_a_dead_runs_processes_are_stopped_and_a_live_runs_are_left_alone(
    tmp_path: Path, sleepers: list[subprocess.Popen]
) -> None:
    registry = tmp_path / "registry"
    live_dir, dead_dir = tmp_path / "live", tmp_path / "dead"
    live_dir.mkdir()
    dead_dir.mkdir()
    runs.register(live_dir, registry)  # this process launches it: live
    mine = _sleeper(sleepers)
    runs.record(live_dir, "shim-s0", mine.pid)
    # a run whose launcher was killed: an entry naming a process that is gone
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    started = start_time(launcher.pid)
    launcher.wait()
    (registry / str(launcher.pid)).write_text(f"{launcher.pid} {started}\n{dead_dir}\n")
    orphan, stranger = _sleeper(sleepers), _sleeper(sleepers)
    runs.record(dead_dir, "agent-sp0", orphan.pid)
    (dead_dir / "sp0.pid").write_text(f"{stranger.pid} {start_time(stranger.pid) + 1}\n")  # its pid reused since
    live, stopped = runs.sweep(registry)
    assert [r.run_dir for r in live] == [live_dir.resolve()]
    assert _gone(orphan) and stopped == [f"agent-sp0 (pid {orphan.pid}) of {dead_dir}"]
    assert mine.poll() is None, "a live run's process was stopped"
    assert stranger.poll() is None, "a process that took a recorded pid was stopped"
    assert not (registry / str(launcher.pid)).exists() and (registry / str(os.getpid())).exists()
    assert pid_alive(mine.pid)


def test_a_deployment_service_records_its_process(tmp_path: Path, sleepers: list[subprocess.Popen]) -> None:
    from harness.processes import Service

    svc = Service("redis-s0", ["sleep", "60"], out=tmp_path / "redis-s0.out")
    proc = svc.launch()
    sleepers.append(proc)
    assert runs.recorded(tmp_path) == [("redis-s0", proc.pid)]
