"""`make run`'s demo: its table and its last line are part of the interface."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.mininet,
    pytest.mark.skipif(os.geteuid() != 0, reason="Mininet needs root"),
    pytest.mark.timeout(240),
]


def test_demo_ends_with_truthful_summary(tmp_path) -> None:  # noqa: ANN001
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "dcnet.demo", "--keys", "6", "--cached", "3", "--reads", "2",
                           "--run-dir", str(run_dir)], capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"reads=(\d+) hits=(\d+) misses=(\d+) errors=(\d+)", last)
    assert m, last
    reads, hits, misses, errors = map(int, m.groups())
    assert reads == 12 and errors == 0
    assert hits + misses == reads
    # 3 small keys cached (read twice each); the big key is never cached; 2 other keys come from the server
    assert hits == 6 and misses == 6
    rows = [ln for ln in proc.stdout.splitlines() if "key" in ln and "│" in ln]
    assert sum("cache" in r for r in rows) == hits
    assert sum("server r0s0" in r for r in rows) == misses
    assert (run_dir / "sp0.log").exists() and (run_dir / "shim-r0s0.log").exists()
