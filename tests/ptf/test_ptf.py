"""The PTF suite (tests/ptf) from pytest: one run of ``python -m tests.ptf.run`` per target -- softswitch, BMv2
and the PSA build in the kernel (ebpf) where their tools are installed -- each started in the background
(tests/ptf/suites.py) and checked here.

Needs root (a network namespace with veth pairs), hence marked ``mininet`` so
``make test-fast`` leaves it out.
"""

from __future__ import annotations

import os
import re
import shutil

import pytest

from softswitch.ebpf import build
from tests.ptf import suites

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
    pytest.param(
        "ebpf",
        marks=[
            pytest.mark.ebpf,
            pytest.mark.skipif(bool(build.missing_tools()), reason=f"needs {', '.join(build.missing_tools())}"),
        ],
    ),
]

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the PTF harness needs root (network namespace, veths)"),
    pytest.mark.timeout(180),
]


@pytest.mark.parametrize("target", TARGETS)
def test_ptf_suite(target: str) -> None:
    run = suites.result(target, timeout=170)  # started beside the unit tests, or now
    if run is None:
        late = suites.RUNS[target]
        suites.stop_all()  # kills it: its reader thread then has what it printed
        said = "\n".join((late.stdout + late.stderr).strip().splitlines()[-40:]) if late.done.wait(10) else ""
        pytest.fail(f"tests.ptf.run --target {target} did not finish in 170 s; its output until then:\n{said}")
    out = run.stdout + run.stderr
    lines = run.stdout.strip().splitlines()
    tail = "\n".join(out.strip().splitlines()[-40:])
    rc = run.proc.returncode if run.proc is not None else None
    m = SUMMARY.match(lines[-1]) if lines else None
    assert m, f"no summary line from tests.ptf.run (exit {rc}):\n{tail}"
    passed, failed = int(m[1]), int(m[2])
    assert failed == 0 and passed > 0 and rc == 0, f"{lines[-1]} (exit {rc}):\n{tail}"
