"""The PTF suite (tests/ptf) from pytest: one run of ``python -m tests.ptf.run`` per target.

Needs root (a network namespace with veth pairs), hence marked ``mininet`` so
``make test-fast`` leaves it out.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed$")

TARGETS = [
    "softswitch",
    pytest.param(
        "bmv2",
        marks=[
            pytest.mark.bmv2,
            pytest.mark.skipif(
                not (shutil.which("simple_switch_grpc") and shutil.which("p4c-bm2-ss")),
                reason="simple_switch_grpc and p4c-bm2-ss are not both on PATH",
            ),
        ],
    ),
]

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the PTF harness needs root (network namespace, veths)"),
    pytest.mark.timeout(180),
]


def _start(target: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "mininet")] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.Popen(
        [sys.executable, "-m", "tests.ptf.run", "--target", target],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def suites(request: pytest.FixtureRequest) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """The suite of every target selected in this session, all started at once: each run spends most of its
    time waiting (for frames that must not come, for counters), so side by side they take little longer than
    one (each target has its own namespace and ports, tests/ptf/run.py)."""
    here = Path(__file__).resolve()
    wanted = sorted(
        {
            item.callspec.params["target"]
            for item in request.session.items
            if Path(str(item.fspath)).resolve() == here
            and hasattr(item, "callspec")
            and not any(m.name == "skip" or (m.name == "skipif" and m.args and m.args[0]) for m in item.iter_markers())
        }
    )
    runs = {t: _start(t) for t in wanted}
    try:
        yield runs
    finally:
        for proc in runs.values():
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


@pytest.mark.parametrize("target", TARGETS)
def test_ptf_suite(target: str, suites: dict[str, subprocess.Popen[str]]) -> None:
    proc = suites.get(target) or _start(target)
    try:
        stdout, stderr = proc.communicate(timeout=170)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"tests.ptf.run --target {target} did not finish in 170 s:\n{(stdout + stderr)[-3000:]}")
    out = stdout + stderr
    lines = stdout.strip().splitlines()
    tail = "\n".join(out.strip().splitlines()[-40:])
    m = SUMMARY.match(lines[-1]) if lines else None
    assert m, f"no summary line from tests.ptf.run (exit {proc.returncode}):\n{tail}"
    passed, failed = int(m[1]), int(m[2])
    assert failed == 0 and passed > 0 and proc.returncode == 0, f"{lines[-1]} (exit {proc.returncode}):\n{tail}"
