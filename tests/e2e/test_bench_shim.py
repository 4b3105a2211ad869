"""``make bench-shim``'s switch phase: hit/miss latency through a Mininet deployment (as root).

The loopback phases are tested in tests/unit/test_bench_shim_loopback.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUMMARY_KEYS = ("shim_get_vs_redis", "shim_put_vs_redis", "uncached_put_p50_us", "cached_put_p50_us")

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None,
        reason="needs redis-server and redis-benchmark (Debian: redis-server, redis-tools)",
    ),
]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_switch_phase_times_hits_and_misses() -> None:
    """Reads through the fabric: some answered by a switch, some by the shim, each kind timed apart."""
    from rich.progress import Progress

    from bench.shim import switch_latency

    with Progress(disable=True) as progress:
        lat = switch_latency(3.0, progress)
    for kind in ("hit", "miss"):
        assert lat[kind].ops > 0 and 0 < lat[kind].p50_us <= lat[kind].p99_us, (kind, lat)
