"""The softswitch command line: what launchers ask it without importing it (--check, --cleanup's arguments).

--cleanup itself is not run here: it removes every kernel switch's CPU port and pins, and the kernel target's
PTF suite runs beside the unit tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def softswitch(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "softswitch", *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


@pytest.mark.parametrize("args", [["--check"], ["--cleanup"], ["--dataplane", "ebpf", "--check", "--cleanup"]])
def test_maintenance_modes_want_the_kernel_data_plane_alone(args: list[str]) -> None:
    done = softswitch(*args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr


def test_check_names_the_missing_build_tools(tmp_path: Path) -> None:
    done = softswitch("--dataplane", "ebpf", "--check", path=str(tmp_path))  # an empty PATH: nothing is found
    assert done.returncode == 1
    assert done.stderr.strip().startswith("softswitch: missing ")
    assert "p4c-ebpf" in done.stderr.split() and "clang" in done.stderr.split()
