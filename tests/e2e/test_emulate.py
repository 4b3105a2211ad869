"""``make emulate`` end to end, shortened: one mechanism, one point, short steps.

Why: the full emulation takes most of half an hour; this catches a broken
phase (deployment, key loading, the open-loop ramp, counter reads, the
simulator's prediction, CSV/PNG output, the summary line) in about a minute.
The figures' agreement with the simulator is reported by the full run, not
asserted here (the machine is shared).
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_emulate_quick_run_writes_figures_and_summary(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dcnet.emulate",
            "--quick",
            "--mechanisms",
            "distcache",
            "--figures",
            "9a",
            "--keys",
            "1000",
            "--step-seconds",
            "1.5",
            "--warm-seconds",
            "2",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=560,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    m = re.fullmatch(
        r"emulated_vs_simulated_max_error=(\d+\.\d) points=(\d+) within_15pct=([01]) host_limited=([01])"
        r" stale=0 wrong=0",
        last,
    )
    assert m and int(m.group(2)) == 1, last
    assert int(m.group(3)) == (float(m.group(1)) <= 15.0), last
    rows = list(csv.DictReader((tmp_path / "fig9a_skew.csv").read_text().splitlines()))
    assert [r["mechanism"] for r in rows] == ["distcache"]
    emulated, simulated = float(rows[0]["emulated_ops"]), float(rows[0]["simulated_ops"])
    assert emulated > 0 and simulated > 0
    assert float(m.group(1)) == pytest.approx(100 * abs(emulated - simulated) / simulated, abs=0.2)
    assert (tmp_path / "fig9a_skew.png").stat().st_size > 10_000
    points = json.loads((tmp_path / "points.json").read_text())["points"]
    assert points[0]["steps"] and any(s["rate"] > s["goodput"] * 0.5 for s in points[0]["steps"])
    # every step accounts the host's CPU by role: the shims and the client took some, idle is a share of all cores
    for step in points[0]["steps"]:
        assert step["cpu"]["shims"] > 0 and step["cpu"]["clients"] > 0 and 0 <= step["cpu"]["idle"] <= 100, step
