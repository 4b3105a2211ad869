"""``distcache``, whole: client_lib's get, put and delete, and ``bench``, the YCSB-style load of a deployment.

The client library (client_lib) keeps what an application imports; the load generator, which needs numpy and
the simulator's Zipf sampler, lives here, so an application that imports client_lib pays for neither.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from client_lib.cli import Opts, app, err
from client_lib.client import Resolver
from distcache.cluster import Cluster
from distcache.cmdline import fail
from distcache.errors import DistCacheError, RequestTimeoutError
from loadgen.workload import BenchConfig, Report, Second, run_bench

__all__ = ["app"]


# -- bench -------------------------------------------------------------------------------

_SPARK = " ▁▂▃▄▅▆▇█"


def sparkline(xs: list[float]) -> str:
    return "".join(_SPARK[min(8, round(x * 8))] for x in xs)


def _live_table(last: Second | None, total: dict) -> Table:
    t = Table(title="distcache bench", show_header=True)
    for col in ("elapsed s", "ops/s", "hit ratio", "ops", "hits", "errors"):
        t.add_column(col, justify="right")
    if last is None:
        t.add_row("-", "-", "-", "0", "0", "0")
    else:
        t.add_row(
            f"{last.t + last.span:.0f}",
            f"{last.rate:,.0f}",
            f"{last.hit_ratio:.1%}",
            f"{total['ops']:,}",
            f"{total['hits']:,}",
            str(total["errors"]),
        )
    return t


def print_report(rep: Report, out: Console) -> None:
    s = Table(title=f"{rep.ops:,} ops in {rep.seconds:.1f} s: {rep.throughput:,.0f} ops/s", show_header=False)
    s.add_column()
    s.add_column(justify="right")
    s.add_row("reads / writes", f"{rep.reads:,} / {rep.writes:,}")
    s.add_row("hits / misses (absent)", f"{rep.hits:,} / {rep.misses:,} ({rep.absent:,})")
    s.add_row("hit ratio", f"{rep.hit_ratio:.1%}")
    s.add_row("loaded keys", f"{rep.loaded_keys:,} in {rep.load_seconds:.1f} s")
    s.add_row("errors", ", ".join(f"{k}={v}" for k, v in sorted(rep.errors.items())) or "0")
    if rep.stale >= 0:  # judged by the staleness oracle (not against an echo server)
        s.add_row("reads judged by the oracle", f"stale={rep.stale} wrong={rep.wrong}")
    out.print(s)
    for finding in rep.findings:
        out.print(Text(finding))
    lat = Table(title="latency (µs)")
    for col in ("", "count", "mean", "p50", "p99", "p99.9"):
        lat.add_column(col, justify="right")
    for name in ("all", "hit", "miss", "write"):
        d = rep.latency_us[name]
        lat.add_row(
            name,
            f"{d['count']:,}",
            *(("-" if d[k] is None else f"{d[k]:,.0f}") for k in ("mean", "p50", "p99", "p999")),
        )
    out.print(lat)
    hr = [s["hit_ratio"] for s in rep.per_second]
    out.print(
        f"hit ratio per second: [{sparkline(hr)}]  "
        + " ".join(f"{x:.0%}" for x in hr[:30])
        + (" …" if len(hr) > 30 else ""),
        highlight=False,
    )
    out.print(
        "ops/s per second: "
        + " ".join(f"{s['ops'] / s['span']:.0f}" for s in rep.per_second[:30])
        + (" …" if len(rep.per_second) > 30 else ""),
        highlight=False,
    )


@app.command()
def bench(
    ctx: typer.Context,
    keys: Annotated[
        int, typer.Option(help="key space size (keys key0 … key<N-1>, key0 hottest), up to 100 M")
    ] = 100_000,
    zipf: Annotated[float, typer.Option(help="Zipf skew θ: 0 = uniform … 0.99")] = 0.99,
    read_ratio: Annotated[float, typer.Option(help="fraction of reads (the rest are writes)")] = 0.95,
    value_size: Annotated[int, typer.Option(help="value bytes (≤128 can be cached by switches)")] = 64,
    concurrency: Annotated[int, typer.Option(help="requests in flight (with --rate: at most)")] = 32,
    rate: Annotated[
        float | None,
        typer.Option(
            help="open loop: issue this many ops per second whatever the "
            "replies do (ops due while --concurrency are in flight "
            "count as 'backlog' errors)"
        ),
    ] = None,
    duration: Annotated[float, typer.Option(help="seconds to run (unless --ops)")] = 10.0,
    ops: Annotated[int | None, typer.Option(help="run exactly this many operations instead of --duration")] = None,
    load: Annotated[bool, typer.Option(help="write the --load-keys hottest keys once before the run")] = True,
    load_keys: Annotated[int, typer.Option(help="how many of the hottest keys --load writes")] = 10_000,
    seed: Annotated[int, typer.Option(help="seed of the key and op sequence")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON on stdout")] = False,
    echo: Annotated[
        bool,
        typer.Option(help="measure the generator alone against a local echo server (no values checked, no load phase)"),
    ] = False,
) -> None:
    """YCSB-style load: Zipf reads and writes, values checked, latency by hit/miss."""
    opts: Opts = ctx.obj
    cfg = BenchConfig(
        keys=keys,
        zipf=zipf,
        read_ratio=read_ratio,
        value_size=value_size,
        concurrency=concurrency,
        rate=rate,
        duration=None if ops is not None else duration,
        ops=ops,
        load=load and not echo,
        load_keys=load_keys,
        seed=seed,
        verify=not echo,
    )
    try:
        cfg.validate()
    except ValueError as e:
        fail(str(e))
    echo_proc = None
    if echo:
        echo_proc = subprocess.Popen(
            [sys.executable, "-m", "loadgen.echo", "--port", "0"], stdout=subprocess.PIPE, text=True
        )
        assert echo_proc.stdout is not None  # stdout=PIPE
        port = int(echo_proc.stdout.readline().split()[-1])
        cluster: Cluster = Cluster()
        resolve: Resolver | None = lambda _h: ("127.0.0.1", port)  # noqa: E731
    else:
        cluster, resolve = opts.load(), opts.resolver()

    total = {"ops": 0, "hits": 0, "errors": 0}
    live = Live(_live_table(None, total), console=err, refresh_per_second=4, transient=as_json)

    def on_second(s: Second) -> None:
        total["ops"] += s.ops
        total["hits"] += s.hits
        total["errors"] += s.errors
        live.update(_live_table(s, total))

    def on_load(done: int, n: int) -> None:
        live.update(Table(title=f"loading {done:,}/{n:,} keys"))

    try:
        with live:
            rep = run_bench(
                cluster,
                cfg,
                resolve=resolve,
                timeout=opts.timeout,
                retries=opts.retries,
                on_second=on_second,
                on_load=on_load,
            )
    except RequestTimeoutError as e:
        fail(f"{e} (during the load phase); is the deployment running?")
    except DistCacheError as e:
        fail(f"{type(e).__name__}: {e}")
    finally:
        if echo_proc is not None:
            echo_proc.kill()
            echo_proc.wait()
    if as_json:
        d = rep.to_dict()
        d["target"] = "echo" if echo else "deployment"
        print(json.dumps(d, indent=2))
    else:
        print_report(rep, Console())
    if rep.error_count:
        raise typer.Exit(2)
