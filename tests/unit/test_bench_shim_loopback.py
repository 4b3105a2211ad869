"""``make bench-shim``'s loopback phases run end to end and report every figure.

Why: the harness starts five kinds of processes and parses another tool's output; a short run catches a
broken phase, a parse that stopped matching redis-benchmark, or a cached-key write that no longer runs
coherence (the harness checks the shim's invalidation count) long before anyone reads a full benchmark.
No speed threshold is asserted: the machine is shared and figures are only comparable as ratios on one
machine.  These phases stay on loopback and Unix sockets: the shim on 127.0.0.1:8888 (the harness refuses
to start if that is taken), Redis on a socket in a temp dir, no network namespace.  The switch phase is in
tests/e2e/test_bench_shim.py.
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

from bench.shim import _rps, summary_line

ROOT = Path(__file__).resolve().parents[2]
SUMMARY_KEYS = ("shim_get_vs_redis", "shim_put_vs_redis", "uncached_put_p50_us", "cached_put_p50_us")

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None,
        reason="needs redis-server and redis-benchmark (Debian: redis-server, redis-tools)",
    ),
]


def test_redis_benchmark_output_is_parsed() -> None:
    """The quiet output interleaves \\r-terminated progress lines with the results."""
    out = (
        "SET: rps=74696.0 (overall: 74438.2) avg_msec=0.113 (overall: 0.113)\r"
        "SET: 74349.45 requests per second, p50=0.111 msec\n"
        "GET: rps=71560.0 (overall: 77445.9) avg_msec=0.104 (overall: 0.104)\r"
        "GET: 77220.08 requests per second, p50=0.103 msec\n\n"
    )
    assert _rps(out) == {"SET": 74349.45, "GET": 77220.08}


def test_harness_reports_positive_figures() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.shim",
            "--seconds",
            "1",
            "--procs",
            "1",
            "--concurrency",
            "4",
            "--latency-ops",
            "100",
            "--no-switch",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout  # --json: one object, nothing else on stdout
    fig = json.loads(lines[0])
    for key in SUMMARY_KEYS:
        assert fig[key] > 0, key
    assert fig["summary"] == summary_line(fig)
    assert re.fullmatch(
        r"shim_get_vs_redis=\d+\.\d\d shim_put_vs_redis=\d+\.\d\d "
        r"hit_p50_us=na miss_p50_us=na "  # --no-switch: test_switch_phase_* times those
        r"uncached_put_p50_us=\d+ cached_put_p50_us=\d+",
        fig["summary"],
    ), fig["summary"]
    for phase in ("echo", "get", "put"):
        r = fig["load"][phase]
        assert r["ops_per_s"] > 0 and r["p50_us"] > 0 and r["p99_us"] >= r["p50_us"], phase
    assert fig["redis_get_rps"] > 0 and fig["redis_set_rps"] > 0
    for op in ("echo_get", "get", "uncached_put", "cached_put"):
        assert 0 < fig["latency"][op]["p50_us"] <= fig["latency"][op]["p99_us"], op
    assert fig["shim_stats"]["coherence"]["invalidates"] >= 100  # the cached key's writes ran phase 1
    assert fig["shim_stats"]["malformed"] == {}
