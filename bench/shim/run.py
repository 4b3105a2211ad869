"""The shim benchmark's run and command line: every phase in an order that keeps them from competing for the
cores, the figure they make, and the teardown that runs whatever happens."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from bench.pyspy import py_spy
from bench.shim.bed import preload, start
from bench.shim.children import Processes
from bench.shim.config import HOST, LATENCY_OPS, REPLY_TIMEOUT, VALUE, err
from bench.shim.fabric import switch_latency
from bench.shim.latency import sequential, write_latency
from bench.shim.load import DCLOAD, LoadResult, compiled_load, run_load
from bench.shim.profile import CATEGORIES, profiler
from bench.shim.redis_benchmark import redis_benchmark
from bench.shim.report import render, summary_line
from bench.shim.servers import echo_server
from client_lib import Client
from distcache.cluster import Cluster
from distcache.wire import DC_PORT, Message, Op, encode
from harness.profile import summarize_profile


def _sigterm(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # run the same cleanup as Ctrl-C


def bench(args: argparse.Namespace, procs: Processes, tmp: Path) -> dict:
    """Every phase, in an order that keeps phases from competing for the 2 cores: one thing loaded at a time."""
    load_before = os.getloadavg()
    with Progress(
        TextColumn("{task.description:<34}"), BarColumn(), TimeRemainingColumn(), console=err, transient=False
    ) as progress:
        err.log(f"starting redis-server, shim, coherence peer and {args.procs} load generator(s) in {tmp}")
        env = start(procs, tmp, args.procs)
        err.log(f"shim pid {env.shim.pid} on {HOST}:{DC_PORT}, coherence peer on {HOST}:{env.peer_port}")
        keys = preload(env)
        echo_proc, echo_conn = procs.spawn("echo", echo_server)
        if not echo_conn.poll(30):
            raise RuntimeError("the echo server did not start")
        echo_port = echo_conn.recv()
        load: dict[str, LoadResult] = {}
        load["echo"] = run_load(
            env,
            progress,
            "generator ceiling (UDP echo)",
            echo_port,
            "get",
            args.concurrency,
            args.seconds,
            {"echo server": echo_proc.pid or 0},
            keys,
        )
        with Client(Cluster(), resolve=lambda _host: (HOST, echo_port), timeout=REPLY_TIMEOUT, retries=2) as c:
            echo_latency = sequential(lambda: c.get("bench:get:0"), args.latency_ops)
        procs.stop(echo_proc)

        profile_raw, during = None, None
        spy = py_spy() if args.profile else None
        if args.profile and spy is None:
            err.log("[yellow]--profile needs py-spy: .venv/bin/pip install py-spy; running without[/]")
        if spy:
            args.profile.mkdir(parents=True, exist_ok=True)
            profile_raw = args.profile / f"shim-{args.profile_phase}.txt"
            during = profiler(procs, spy, env.shim.pid, args.seconds, profile_raw)
        watch = {"shim": env.shim.pid, "redis": env.redis.pid}
        load["get"] = run_load(
            env,
            progress,
            "shim GET",
            DC_PORT,
            "get",
            args.concurrency,
            args.seconds,
            watch,
            keys,
            during if args.profile_phase == "get" else None,
        )
        load["put"] = run_load(
            env,
            progress,
            "shim PUT (uncached)",
            DC_PORT,
            "put",
            args.concurrency,
            args.seconds,
            watch,
            (),
            during if args.profile_phase == "put" else None,
        )
        if DCLOAD.exists():  # a compiled generator leaves the CPU to the shim: the fairer figures
            digest = Cluster().digest
            gets = [encode(Message(Op.GET, k.encode(), digest(k))) for k in keys]
            put_keys = [f"bench:cput:{i}".encode() for i in range(4096)]
            puts = [encode(Message(Op.PUT, k, digest(k), value=VALUE)) for k in put_keys]
            load["get_compiled"] = compiled_load(
                progress, "shim GET (compiled generator)", gets, args.concurrency, args.seconds, watch, tmp
            )
            load["put_compiled"] = compiled_load(
                progress, "shim PUT (compiled generator)", puts, args.concurrency, args.seconds, watch, tmp
            )
        bar = progress.add_task("write latency (sequential)", total=None)
        latency, shim_stats = write_latency(env, args.latency_ops)
        latency = {"echo_get": echo_latency, **latency}
        progress.update(bar, total=1, completed=1)
        rb = redis_benchmark(env, args.concurrency, args.redis_seconds or min(3.0, args.seconds), progress)
        procs.close()  # the loopback phases are over: leave the cores to the deployment
        via_switch = switch_latency(max(args.seconds, 3.0), progress) if args.switch else None

    best_get = load.get("get_compiled", load["get"])
    best_put = load.get("put_compiled", load["put"])
    fig: dict = {
        "shim_get_vs_redis": round(best_get.ops_per_s / rb.get_rps, 2),
        "shim_put_vs_redis": round(best_put.ops_per_s / rb.set_rps, 2),
        "generator": "compiled (tools/dcload)" if "get_compiled" in load else "python",
        "uncached_put_p50_us": round(latency["uncached_put"].p50_us),
        "cached_put_p50_us": round(latency["cached_put"].p50_us),
        "hit_p50_us": round(via_switch["hit"].p50_us) if via_switch else None,
        "miss_p50_us": round(via_switch["miss"].p50_us) if via_switch else None,
        "switch_latency": {k: asdict(v) for k, v in via_switch.items()} if via_switch else None,
        "shim_get_vs_ceiling": round(load["get"].ops_per_s / load["echo"].ops_per_s, 2),
        "echo_get_ops_per_s": round(load["echo"].ops_per_s),
        "shim_get_ops_per_s": round(load["get"].ops_per_s),
        "shim_put_ops_per_s": round(load["put"].ops_per_s),
        "redis_get_rps": rb.get_rps,
        "redis_set_rps": rb.set_rps,
        "load": {k: asdict(v) for k, v in load.items()},
        "redis_benchmark": asdict(rb),
        "latency": {k: asdict(v) for k, v in latency.items()},
        "shim_stats": shim_stats,
        "config": {
            "concurrency": args.concurrency,
            "procs": args.procs,
            "seconds": args.seconds,
            "latency_ops": args.latency_ops,
            "value_bytes": len(VALUE),
            "cpus": os.cpu_count(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "profile_phase": args.profile_phase,
        },
    }
    if profile_raw is not None:
        for name, proc in procs.items:  # py-spy stops itself after the window; wait for its file
            if name == "py-spy" and isinstance(proc, subprocess.Popen):
                proc.wait(30)
        if profile_raw.exists():
            fig["profile"] = summarize_profile(profile_raw, categories=CATEGORIES) | {"raw": str(profile_raw)}
        else:
            err.log("[yellow]py-spy wrote no profile (ptrace not permitted?)[/]")
    return fig


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.shim``: the exit status (0 done, 1 failed, 130 interrupted)."""
    ap = argparse.ArgumentParser(
        prog="python -m bench.shim", description=(sys.modules["bench.shim"].__doc__ or "").splitlines()[0]
    )
    ap.add_argument("--seconds", type=float, default=5.0, help="measured seconds per load phase (default 5)")
    ap.add_argument("--procs", type=int, default=2, help="load-generator processes (default 2)")
    ap.add_argument(
        "--concurrency",
        type=int,
        default=16,
        help="requests in flight in total, split across the generators (default 16)",
    )
    ap.add_argument(
        "--redis-seconds",
        type=float,
        default=None,
        help="how long each redis-benchmark test should take (default: min(3, --seconds))",
    )
    ap.add_argument("--latency-ops", type=int, default=LATENCY_OPS, help="sequential PUTs per latency figure")
    ap.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="sample the shim with py-spy during the GET phase; raw stacks and summary go to DIR",
    )
    ap.add_argument(
        "--profile-phase",
        choices=["get", "put"],
        default="get",
        help="which load phase --profile samples (default get)",
    )
    ap.add_argument(
        "--no-switch",
        dest="switch",
        action="store_false",
        help="skip the hit/miss latency through a Mininet deployment (it needs root)",
    )
    ap.add_argument("--json", action="store_true", help="print every figure as one JSON object instead of tables")
    args = ap.parse_args(argv)
    if args.switch and os.geteuid() != 0:
        err.log(
            "[yellow]not root: skipping the hit/miss latency through the switches (hit_p50_us=na); "
            "run as root for it, or pass --no-switch[/]"
        )
        args.switch = False
    if args.procs < 1 or args.concurrency < args.procs or args.seconds <= 0 or args.latency_ops < 1:
        ap.error("need --procs >= 1, --concurrency >= --procs, --seconds > 0, --latency-ops >= 1")
    for tool in ("redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            ap.error(f"{tool} not found on PATH (Debian: apt-get install redis-server redis-tools)")
    signal.signal(signal.SIGTERM, _sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started in the background (SIG_IGN)
    procs = Processes()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-shim-") as tmp:
            try:
                fig = bench(args, procs, Path(tmp))
            finally:
                procs.close()
    except KeyboardInterrupt:
        err.print("[red]interrupted: every process stopped[/]")
        return 130
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        err.print(f"[red]bench-shim failed:[/] {e}")
        return 1
    if args.profile and "profile" in fig:
        (args.profile / "summary.json").write_text(json.dumps(fig["profile"], indent=2) + "\n")
    if args.json:
        print(json.dumps(fig | {"summary": summary_line(fig)}))
    else:
        render(fig, Console(width=max(170, Console().width)))
        print(summary_line(fig))
    return 0
