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
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from distcache.cluster import Cluster
from simulator.model import Model, SimConfig

ROOT = Path(__file__).resolve().parents[1]


def test_simulator_places_named_keys_by_the_real_hashes() -> None:
    """key_prefix: the model's owner server and spine of key<rank> are the cluster's own h1 and h0."""
    from distcache.hashing import h0, wire_key
    from distcache.partition import spine_buckets

    c = Cluster(spines=4, storage_racks=4, servers_per_rack=4)
    m = Model(SimConfig(cluster=c, n_keys=500, head=500, key_prefix="key"))
    owners = spine_buckets([c.spine(i).switch_id for i in range(4)])
    for rank in (0, 1, 7, 499):
        k = wire_key(f"key{rank}")
        server = c.server_for_key(k)
        assert m.server[rank] == server.rack * c.servers_per_rack + server.index
        assert m.spine[rank] == owners[h0(k)] - 1
    assert not (Model(SimConfig(cluster=c, n_keys=500, head=500)).server == m.server).all()  # uniform draws differ


@pytest.mark.mininet
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(os.geteuid() != 0, reason="Mininet needs root")
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
    m = re.fullmatch(r"emulated_vs_simulated_max_error=(\d+\.\d) points=(\d+)", last)
    assert m and int(m.group(2)) == 1, last
    rows = list(csv.DictReader((tmp_path / "fig9a_skew.csv").read_text().splitlines()))
    assert [r["mechanism"] for r in rows] == ["distcache"]
    emulated, simulated = float(rows[0]["emulated_ops"]), float(rows[0]["simulated_ops"])
    assert emulated > 0 and simulated > 0
    assert float(m.group(1)) == pytest.approx(100 * abs(emulated - simulated) / simulated, abs=0.2)
    assert (tmp_path / "fig9a_skew.png").stat().st_size > 10_000
    points = json.loads((tmp_path / "points.json").read_text())["points"]
    assert points[0]["steps"] and any(s["rate"] > s["goodput"] * 0.5 for s in points[0]["steps"])


def test_fig11_reports_the_dip_of_each_failure_event() -> None:
    """Each crash or fail: the median goodput of the 5 s before against the lowest of its second and the 3
    after; restarts and recoveries are not failure events."""
    from dcnet.emulate import EVENTS, event_dips

    crash = next(w for w, what, _ in EVENTS if what == "crash")
    trace = [(float(t), 100.0) for t in range(1, 37)]
    trace = [(t, 40.0 if t == crash + 2 else g) for t, g in trace]  # one bad second in the crash's window
    dips = dict((label, (before, low)) for label, before, low in event_dips(trace))
    assert set(dips) == {f"{what} {name}" for _, what, name in EVENTS if what in ("crash", "fail")}
    assert dips["crash sp0"] == (100.0, 40.0)
    assert dips["fail sp1"] == (100.0, 100.0)
