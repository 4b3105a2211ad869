"""`make run`'s demo: its progress and its last line are part of the interface."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.timeout(240),
]


def test_demo_caches_hot_keys_fails_spines_and_ends_with_truthful_summary(tmp_path) -> None:  # noqa: ANN001
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "dcnet.demo", "--duration", "20", "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    m = re.fullmatch(
        r"reads=(\d+) hits=(\d+) misses=(\d+) errors=(\d+) stale=(\d+) wrong=(\d+) auto_cached=(\d+) failovers=(\d+)",
        last,
    )
    assert m, last
    reads, hits, misses, errors, stale, wrong, auto, failovers = map(int, m.groups())
    assert errors == stale == wrong == 0 and reads > 1000
    # every client host read and wrote: each left its history, merged into the one judged
    histories = sorted(p.name for p in run_dir.glob("history-*.jsonl"))
    assert histories == ["history-c0h0.jsonl", "history-c1h0.jsonl", "history-load.jsonl"], histories
    for h in histories[:2]:
        assert (run_dir / h).read_text().count('"op": "get"') > 200, h
    # the demo failed one spine through distcache-ctl and crashed another; the controller handled both
    assert failovers == 2
    ctl_log = (run_dir / "controller.log").read_text()
    assert "sp1 declared dead" in ctl_log and "sp1 answers again; recovering it" in ctl_log
    assert ctl_log.count("cache flushed before it serves again") == 2
    # a recovered spine is warmed with its buckets' hot keys after its flush, before they move back to it
    flushed = ctl_log.index("sp0: cache flushed before it serves again")
    assert re.search(
        r"sp0: [1-9]\d* of \d+ hot keys of its new buckets cached before its buckets move", ctl_log[flushed:]
    )
    assert "distcache-ctl fail sp0" in proc.stderr and "back in service" in proc.stderr
    # sent as the command sends them, printed as it prints them (the controller's epoch after each)
    assert re.search(r"fail sp0: sp0: process stopped; \d+ buckets moved.*?\(\d+\.\d\d s, epoch 1\)", proc.stderr, re.S)
    assert re.search(r"recover sp0: sp0: back in service.*?\(\d+\.\d\d s, epoch 2\)", proc.stderr, re.S)
    assert hits + misses <= reads
    assert auto >= 10, "the agents cached nothing from hot-key reports"
    assert hits / reads >= 0.35, f"hit ratio {hits / reads:.2f}"
    # the agents' logs say what they inserted, from reports
    logs = "".join((run_dir / f"agent-{sw}.log").read_text() for sw in ("sp0", "sp1", "sl0", "sl1"))
    assert logs.count("from a report") >= auto
    # the hit ratio climbs: the caches start empty and fill during the first seconds
    lines = proc.stderr.splitlines()
    at = [i for i, ln in enumerate(lines) if re.match(r"^\s*\d+\s+[\d,]+\s+[01]\.\d\d\s", ln)]
    rows = [lines[i].split() for i in at]
    ratios = [float(r[2]) for r in rows]
    assert len(ratios) >= 15 and ratios[0] + 0.1 < max(ratios[-5:]), ratios
    # the rows' header, with a column per cache switch, comes before the first row
    header = next(ln for ln in lines[: at[0]][::-1] if ln.split()[:2] == ["sec", "ops/s"])
    assert all(f"{sw} keys" in header for sw in ("sp0", "sp1", "sl0", "sl1")), header
    assert header.split()[-1] == "auto-cached" and all(len(r) == 9 for r in rows), (header, rows[:3])  # unwrapped
