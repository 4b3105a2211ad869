"""The PTF suite runs of a pytest session (one ``python -m tests.ptf.run`` per target), run in the background.

Each run spends most of its time waiting (for frames that must not come, for counters), so runs overlap the unit
tests, which go at nice 19 meanwhile (tests/conftest.py starts the runs when those begin and puts tests/ptf last):
make test pays for them about once.  softswitch and BMv2 run side by side, the kernel target after them: with
all three at once on two cores, a liveness test's timing (a spine silent past its 30 ms dead time) failed on the
first two.  Each run has its own namespace and ports (tests/ptf/run.py), so nothing is shared between runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent / "test_ptf.py"
IN_TURN = (("softswitch", "bmv2"), ("ebpf",))  # the groups, one after another; a group's runs side by side


@dataclass
class Run:
    """One target's run: done once its process exited and its output was read."""

    target: str
    done: threading.Event = field(default_factory=threading.Event)
    proc: subprocess.Popen[str] | None = None
    stdout: str = ""
    stderr: str = ""

    def execute(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO), str(REPO / "mininet")] + [p for p in [env.get("PYTHONPATH")] if p]
        )
        try:
            self.proc = subprocess.Popen(
                # a run started after the unit tests went to nice 19 is put back to 0 (root may lower it)
                ["nice", "-n", str(-os.nice(0)), sys.executable, "-m", "tests.ptf.run", "--target", self.target],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            self.stdout, self.stderr = self.proc.communicate()
        finally:
            self.done.set()


RUNS: dict[str, Run] = {}


def selected_targets(items: list[pytest.Item]) -> list[str]:
    """The targets whose suite this session runs: test_ptf's items that are selected and not skipped."""
    return sorted(
        {
            item.callspec.params["target"]
            for item in items
            if Path(str(item.fspath)).resolve() == HERE
            and hasattr(item, "callspec")
            and not any(m.name == "skip" or (m.name == "skipif" and m.args and m.args[0]) for m in item.iter_markers())
        }
    )


def start(targets: list[str]) -> None:
    """Run the suites of ``targets`` in the background, group after group (IN_TURN; a target in no group
    last); returns at once.  A target already started is not started again."""
    todo = [t for t in targets if t not in RUNS]
    groups = [[t for t in g if t in todo] for g in IN_TURN] + [[t for t in todo if not any(t in g for g in IN_TURN)]]
    for t in todo:
        RUNS[t] = Run(t)

    def in_turn() -> None:
        for group in groups:
            threads = [threading.Thread(target=RUNS[t].execute, daemon=True) for t in group]
            for th in threads:
                th.start()
            for th in threads:
                th.join()

    threading.Thread(target=in_turn, name="ptf-suites", daemon=True).start()


def result(target: str, timeout: float) -> Run | None:
    """``target``'s run once it is done (started now if it never was); None if not done within ``timeout``."""
    if target not in RUNS:
        start([target])
    run = RUNS[target]
    return run if run.done.wait(timeout) else None


def stop_all() -> None:
    """Kill what is still running (an interrupted session)."""
    for run in RUNS.values():
        if run.proc is not None and run.proc.poll() is None:
            run.proc.kill()
    RUNS.clear()
