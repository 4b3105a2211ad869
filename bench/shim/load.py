"""One timed load phase: every generator at once (Python) or tools/dcload (compiled), throughput over the
measured window, latency under load, and the CPU each process took (and what others took: a shared machine)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import Progress, TaskID

from bench.shim.bed import Env
from bench.shim.config import HOST, REPLY_TIMEOUT, WARMUP
from bench.shim.generators import LoadSpec
from bench.shim.latency import percentile
from distcache.wire import DC_PORT, HEADER_FIELDS
from harness.procstat import cpu_seconds, machine_busy


@dataclass
class LoadResult:
    """One timed phase: throughput over the measured window, latency under load, CPU use of each process."""

    ops_per_s: float
    p50_us: float
    p99_us: float
    errors: dict[str, int] = field(default_factory=dict)
    cpu_percent: dict[str, float] = field(default_factory=dict)  # 100 = one core busy for the whole window
    cpu_us_per_op: dict[str, float] = field(default_factory=dict)  # CPU a request costs each process: comparable


def measure_window(
    watch: dict[str, int],
    progress: Progress,
    bar: TaskID,
    t0: float,
    seconds: float,
    during: Callable[[], subprocess.Popen] | None = None,
) -> tuple[dict[str, float], float, subprocess.Popen | None]:
    """CPU % of each watched pid, and of everything else, from now until ``t0 + WARMUP + seconds``.

    ``during`` starts a helper as the window opens (py-spy); its CPU is watched too and it is returned.
    """
    cpu0 = {name: cpu_seconds(pid) for name, pid in watch.items()}
    busy0, w0 = machine_busy(), time.monotonic()
    helper = during() if during is not None else None
    if helper is not None:
        watch["py-spy"], cpu0["py-spy"] = helper.pid, 0.0
    while (elapsed := time.monotonic() - t0) < WARMUP + seconds:
        progress.update(bar, completed=elapsed)
        time.sleep(0.05)
    window = time.monotonic() - w0
    cpu = {name: 100 * (cpu_seconds(pid) - cpu0[name]) / window for name, pid in watch.items()}
    return cpu, 100 * (machine_busy() - busy0) / window - sum(cpu.values()), helper


def run_load(
    env: Env,
    progress: Progress,
    label: str,
    port: int,
    op: str,
    concurrency: int,
    seconds: float,
    watch: dict[str, int],
    keys: tuple[str, ...] = (),
    during: Callable[[], subprocess.Popen] | None = None,
) -> LoadResult:
    """Run one phase on every generator at once and gather it; ``watch`` names the pids whose CPU to report.

    ``during`` is called when the measured window opens and returns a helper it started (py-spy), whose CPU
    is reported too (it shares the cores) and which gets SIGINT when the window closes (py-spy then writes
    what it sampled, so the profile covers the window exactly).
    """
    n = len(env.generators)
    split = [concurrency // n + (i < concurrency % n) for i in range(n)]
    start_at = time.time() + 0.3
    for (_, conn), tasks in zip(env.generators, split, strict=True):
        conn.send(LoadSpec(port, op, max(1, tasks), seconds, start_at, keys))
    watch = {**watch, **{f"gen{i}": p.pid for i, (p, _) in enumerate(env.generators) if p.pid}}
    bar = progress.add_task(label, total=seconds + WARMUP)
    time.sleep(max(0.0, start_at - time.time()))
    t0 = time.monotonic()
    while (elapsed := time.monotonic() - t0) < WARMUP:
        progress.update(bar, completed=elapsed)
        time.sleep(0.05)
    cpu, others, helper = measure_window(watch, progress, bar, t0, seconds, during)
    if helper is not None:
        helper.send_signal(signal.SIGINT)
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    for proc, conn in env.generators:
        if not conn.poll(REPLY_TIMEOUT + 10):
            raise RuntimeError(f"load generator {proc.name} did not report (exit code {proc.exitcode})")
        res = conn.recv()
        latencies += res["latencies"]
        errors.update(res["errors"])
    progress.update(bar, completed=seconds + WARMUP)
    latencies.sort()
    gens = [k for k in cpu if k.startswith("gen")]
    cpu = {k: v for k, v in cpu.items() if k not in gens} | {
        "generators": sum(cpu[k] for k in gens),
        "others": max(0.0, others),
    }
    rate = len(latencies) / seconds
    per_op = {k: round(v * 1e4 / rate, 1) for k, v in cpu.items() if k not in ("others", "py-spy") and rate}
    return LoadResult(
        rate,
        1e6 * percentile(latencies, 0.5),
        1e6 * percentile(latencies, 0.99),
        dict(errors),
        {k: round(v, 1) for k, v in cpu.items()},
        per_op,
    )


DCLOAD = Path(__file__).resolve().parents[2] / "build" / "dcload"  # tools/dcload, built by make deps
SEQ_OFFSET = sum(w for name, w in HEADER_FIELDS[: [n for n, _ in HEADER_FIELDS].index("seq")]) // 8


def compiled_load(
    progress: Progress,
    label: str,
    requests: list[bytes],
    concurrency: int,
    seconds: float,
    watch: dict[str, int],
    tmp: Path,
) -> LoadResult:
    """One phase driven by dcload (Go): the same requests, encoded here, at a fraction of the CPU per request."""
    reqs = tmp / f"dcload-{len(requests)}-{requests[0][1]}.hex"
    reqs.write_text("".join(r.hex() + "\n" for r in requests))
    bar = progress.add_task(label, total=seconds + WARMUP)
    proc = subprocess.Popen(
        [
            str(DCLOAD),
            "-target",
            f"{HOST}:{DC_PORT}",
            "-requests",
            str(reqs),
            "-seq-offset",
            str(SEQ_OFFSET),
            "-concurrency",
            str(concurrency),
            "-duration",
            f"{seconds}s",
            "-warmup",
            f"{WARMUP}s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    t0 = time.monotonic()
    time.sleep(WARMUP)
    cpu, others, _ = measure_window({**watch, "generators": proc.pid}, progress, bar, t0, seconds)
    out, errs = proc.communicate(timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"dcload failed: {errs.strip()}")
    res = json.loads(out)
    progress.update(bar, completed=seconds + WARMUP)
    rate = res["ops"] / seconds
    per_op = {k: round(v * 1e4 / rate, 1) for k, v in cpu.items() if rate}
    return LoadResult(
        rate,
        res["p50_us"],
        res["p99_us"],
        {"timeout": res["timeouts"]} if res["timeouts"] else {},
        {**{k: round(v, 1) for k, v in cpu.items()}, "others": round(max(0.0, others), 1)},
        per_op,
    )
