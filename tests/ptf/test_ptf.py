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


@pytest.mark.parametrize("target", TARGETS)
def test_ptf_suite(target: str) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "mininet")] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run(
        [sys.executable, "-m", "tests.ptf.run", "--target", target],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    out = proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    tail = "\n".join(out.strip().splitlines()[-40:])
    m = SUMMARY.match(lines[-1]) if lines else None
    assert m, f"no summary line from tests.ptf.run (exit {proc.returncode}):\n{tail}"
    passed, failed = int(m[1]), int(m[2])
    assert failed == 0 and passed > 0 and proc.returncode == 0, f"{lines[-1]} (exit {proc.returncode}):\n{tail}"
