"""``redis-benchmark`` on the same Redis at the same concurrency and value size: the ceiling the shim's
throughput is divided by."""

from __future__ import annotations

import re
import resource
import subprocess
import time
from dataclasses import dataclass

from rich.progress import Progress

from bench.shim.bed import Env
from harness.procstat import cpu_seconds, machine_busy


@dataclass
class RedisBench:
    get_rps: float
    set_rps: float
    requests: int  # per test (GET, SET)
    cpu_percent: dict[str, float]
    cpu_us_per_op: dict[str, float]


def _rps(output: str) -> dict[str, float]:
    """GET/SET requests per second from ``redis-benchmark -q`` (progress lines end in \\r, results in \\n)."""
    found = {}
    for m in re.finditer(r"(?:^|[\r\n])\s*([A-Z]+): ([\d.]+) requests per second", output):
        found[m.group(1)] = float(m.group(2))
    return found


def redis_benchmark(env: Env, concurrency: int, seconds: float, progress: Progress) -> RedisBench:
    """Redis's own ceiling at the same concurrency and value size, sized by a short probe to last ~seconds."""
    base = ["redis-benchmark", "-s", str(env.redis_sock), "-c", str(concurrency), "-q", "-d", "32"]
    bar = progress.add_task("redis-benchmark", total=None)
    probe = _rps(
        subprocess.run(
            [*base, "-t", "get", "-n", "20000"], capture_output=True, text=True, timeout=60, check=True
        ).stdout
    )
    n = max(20000, int(probe.get("GET", 20000) * seconds))
    ru0, cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_seconds(env.redis.pid)
    busy0, t0 = machine_busy(), time.monotonic()
    out = subprocess.run(
        [*base, "-t", "get,set", "-n", str(n)],
        capture_output=True,
        text=True,
        timeout=max(60.0, 20 * seconds),
        check=True,
    ).stdout
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    bench_cpu = (ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime) / wall * 100
    redis_cpu_s = cpu_seconds(env.redis.pid) - cpu0
    redis_cpu = redis_cpu_s / wall * 100
    others = 100 * (machine_busy() - busy0) / wall - bench_cpu - redis_cpu
    progress.update(bar, total=1, completed=1)
    rps = _rps(out)
    if "GET" not in rps or "SET" not in rps:
        raise RuntimeError(f"cannot read redis-benchmark's output:\n{out[-1000:]}")
    return RedisBench(
        rps["GET"],
        rps["SET"],
        n,
        {"redis": round(redis_cpu, 1), "redis-benchmark": round(bench_cpu, 1), "others": round(max(0.0, others), 1)},
        {
            "redis": round(1e6 * redis_cpu_s / (2 * n), 1),
            "redis-benchmark": round(bench_cpu / 100 * wall * 1e6 / (2 * n), 1),
        },
    )
