"""What the shim benchmark prints: the summary line on stdout (interface: ``shim_get_vs_redis=R
shim_put_vs_redis=R hit_p50_us=N miss_p50_us=N uncached_put_p50_us=N cached_put_p50_us=N``), the tables."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def summary_line(fig: dict) -> str:
    hit, miss = fig.get("hit_p50_us"), fig.get("miss_p50_us")
    return (
        f"shim_get_vs_redis={fig['shim_get_vs_redis']:.2f} shim_put_vs_redis={fig['shim_put_vs_redis']:.2f} "
        f"hit_p50_us={'na' if hit is None else f'{hit:.0f}'} miss_p50_us={'na' if miss is None else f'{miss:.0f}'} "
        f"uncached_put_p50_us={fig['uncached_put_p50_us']:.0f} cached_put_p50_us={fig['cached_put_p50_us']:.0f}"
    )


def render(fig: dict, out: Console) -> None:
    t = Table(
        title=f"shim vs redis-benchmark (concurrency {fig['config']['concurrency']}, "
        f"{fig['config']['procs']} generator process(es), {fig['config']['seconds']} s per phase)"
    )
    left = ("measurement", "CPU % (100 = 1 core)", "CPU µs per request")
    for col in ("measurement", "ops/s", "p50 µs", "p99 µs", "errors", *left[1:]):
        t.add_column(col, justify="left" if col in left else "right")
    fmt_cpu = lambda c: ", ".join(f"{k} {v:.0f}" for k, v in c.items())  # noqa: E731
    names = {
        "echo": "UDP echo server GET (generator ceiling)",
        "get": "shim GET (preloaded keys)",
        "put": "shim PUT (uncached keys)",
        "get_compiled": "shim GET, compiled generator",
        "put_compiled": "shim PUT, compiled generator",
    }
    for key, name in names.items():
        if key not in fig["load"]:
            continue
        r = fig["load"][key]
        errs = ", ".join(f"{k} {v}" for k, v in r["errors"].items()) or "0"
        t.add_row(
            name,
            f"{r['ops_per_s']:,.0f}",
            f"{r['p50_us']:.0f}",
            f"{r['p99_us']:.0f}",
            errs,
            fmt_cpu(r["cpu_percent"]),
            fmt_cpu(r["cpu_us_per_op"]),
        )
    rb = fig["redis_benchmark"]
    t.add_row(
        "redis-benchmark GET",
        f"{rb['get_rps']:,.0f}",
        "",
        "",
        "",
        fmt_cpu(rb["cpu_percent"]),
        fmt_cpu(rb["cpu_us_per_op"]) + " (GET+SET)",
    )
    t.add_row("redis-benchmark SET", f"{rb['set_rps']:,.0f}", "", "", "", "", "")
    out.print(t)
    lt = Table(title=f"sequential latency, one client ({fig['config']['latency_ops']} ops each)")
    for col in ("operation", "p50 µs", "p99 µs"):
        lt.add_column(col, justify="left" if col == "operation" else "right")
    for key, name in (
        ("echo_get", "GET, UDP echo server (round-trip floor)"),
        ("get", "shim GET (preloaded key)"),
        ("uncached_put", "shim PUT, key cached nowhere"),
        ("cached_put", "shim PUT, key cached by spine 1 (two-phase coherence)"),
    ):
        lat = fig["latency"][key]
        lt.add_row(name, f"{lat['p50_us']:.0f}", f"{lat['p99_us']:.0f}")
    for key, name in (
        ("hit", "GET through the fabric, cache hit (answered by a switch)"),
        ("miss", "GET through the fabric, cache miss (shim + Redis)"),
    ):
        if fig["switch_latency"]:
            lat = fig["switch_latency"][key]
            lt.add_row(name, f"{lat['p50_us']:.0f}", f"{lat['p99_us']:.0f}")
    out.print(lt)
    out.print(
        f"CPU 'others': processes not started by this harness (the machine may be shared); "
        f"load average before the run: {' '.join(map(str, fig['config']['loadavg_before']))}"
    )
    out.print(f"the summary's ratios use the {fig['generator']} generator's figures")
    out.print(
        f"shim GET / generator ceiling = {fig['shim_get_vs_ceiling']:.2f}"
        + (
            "  (close to 1: the generators may be what limits the shim figures)"
            if fig["shim_get_vs_ceiling"] > 0.8
            else "  (the generators have headroom: the shim is the limit)"
        )
    )
    if "profile" in fig:
        prof = fig["profile"]
        phase = fig["config"]["profile_phase"].upper()
        pt = Table(
            title=f"shim main thread during the {phase} phase: py-spy, {prof['samples']} samples (% of wall time)"
        )
        pt.add_column(f"where a {phase}'s time goes")
        pt.add_column("%", justify="right")
        for k, v in prof["category_percent"].items():
            pt.add_row(k, f"{v:.1f}")
        out.print(pt)
        for title, key in (("own time", "own_percent"), ("inclusive time", "inclusive_percent")):
            ft = Table(title=f"top functions by {title}")
            ft.add_column("function")
            ft.add_column("%", justify="right")
            for k, v in prof[key].items():
                ft.add_row(k, f"{v:.1f}")
            out.print(ft)
