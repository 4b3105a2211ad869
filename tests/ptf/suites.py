"""The PTF suite runs of a pytest session (one ``python -m tests.ptf.run`` per target), started in the background.

Each run spends most of its time waiting (for frames that must not come, for counters), so the targets run side
by side, and beside the unit tests, which run at nice 19 meanwhile (tests/conftest.py starts the runs when those
begin, and puts tests/ptf last): make test pays for them about once, not once per target.  Each run has its own
namespace and ports (tests/ptf/run.py), so nothing is shared with another run or the tests around it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent / "test_ptf.py"
RUNS: dict[str, subprocess.Popen[str]] = {}


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


def start(target: str) -> subprocess.Popen[str]:
    """The run of ``target``'s suite, started now unless it already was."""
    if target not in RUNS:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO), str(REPO / "mininet")] + [p for p in [env.get("PYTHONPATH")] if p]
        )
        RUNS[target] = subprocess.Popen(
            [sys.executable, "-m", "tests.ptf.run", "--target", target],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    return RUNS[target]


def stop_all() -> None:
    """Kill what is still running (an interrupted session) and reap it."""
    for proc in RUNS.values():
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    RUNS.clear()
