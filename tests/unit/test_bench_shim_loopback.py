"""``make bench-shim`` runs end to end and reports every figure of every row.

Why: the harness starts redis-servers, shims, a coherence peer and a compiled generator, and reads CPU from /proc
and Redis' own command counts; a short run catches a broken row, a cached-key write that no longer runs
coherence, or requests that never reached Redis, long before anyone reads a full benchmark.  No speed threshold
is asserted (the machine is shared; figures are compared as ratios within one run).  All of it on loopback and
Unix sockets: the shim on 127.0.0.1:8888 (the harness refuses to start if that is taken), no namespace.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server (Debian: redis-server)"),
]


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench.shim", "--seconds", "0.5", "--keys", "2000", "--concurrency", "4", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_every_row_reports_its_figures_and_every_request_reached_redis() -> None:
    proc = bench("--dists", "zipf", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout  # --json: one object, nothing else on stdout
    fig = json.loads(lines[0])
    rows = {(r["persistence"], r["op"], r["side"]): r for r in fig["rows"]}
    assert set(rows) == {
        (p, op, side)
        for p in ("volatile", "durable")
        for op, sides in (("get", ("redis", "shim")), ("put", ("redis", "shim")), ("put-cached", ("shim",)))
        for side in sides
    }
    for key, r in rows.items():
        assert r["ops_per_s"] > 0 and 0 < r["p50_us"] <= r["p99_us"], key
        assert r["errors"] == 0 and r["timeouts"] == 0, key
        assert r["redis_us"] > 0 and r["generator_us"] > 0, key
        assert (r["shim_us"] > 0) == (r["side"] == "shim"), key
        # Redis' own counts: each read looked up its key once, each write changed its key (and, through the
        # shim, its dedup marker); INFO commandstats says by which commands
        assert 0.95 <= r["reached_redis"] <= (2.05 if r["side"] == "shim" and r["op"] != "get" else 1.05), key
        assert r["commands"], key
    for p in ("volatile", "durable"):
        figures = fig["summary"][p]
        assert set(figures) == {"storage_cpu_vs_redis_get", "storage_cpu_vs_redis_put", "shim_get_vs_redis",
                                "shim_put_vs_redis", "shim_get_p50_vs_redis"}  # fmt: skip
        assert all(v > 0 for v in figures.values()), figures


def test_the_last_line_is_the_durable_summary() -> None:
    proc = bench("--dists", "uniform", "--persistence", "volatile,durable")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    number = r"\d+\.\d+"
    line = (
        rf"storage_cpu_vs_redis_get={number} storage_cpu_vs_redis_put={number} shim_get_vs_redis={number} "
        rf"shim_put_vs_redis={number} shim_get_p50_vs_redis={number}"
    )
    assert re.fullmatch(line, lines[-1]), lines[-1]
    assert re.fullmatch("volatile: " + line, lines[-2]), lines[-2]
    assert "put-cached" in proc.stdout and "appendfsync always" in proc.stdout


def test_a_bad_option_is_one_line() -> None:
    proc = bench("--dists", "gaussian")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].endswith(
        "--dists: uniform and/or zipf; --persistence: volatile and/or durable"
    ), proc.stderr
