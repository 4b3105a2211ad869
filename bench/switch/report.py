"""What the switch benchmark prints: the summary lines on stdout (interface: ``hit_pps=N miss_pps=N fwd_pps=N``
and ``bmv2_hit_pps=N bmv2_miss_pps=N bmv2_fwd_pps=N``), the tables on stderr."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from bench.switch.config import PATH_NAMES, PATHS, PREFIX
from bench.switch.measure import shared


def summary_lines(fig: dict) -> list[str]:
    """The stdout lines, one per target measured."""
    lines = []
    for target, prefix in PREFIX.items():
        if target in fig["targets"]:
            lines.append(" ".join(f"{prefix}{p}_pps={fig[f'{prefix}{p}_pps']}" for p in PATHS))
    return lines


def render(fig: dict, out: Console) -> None:
    """The tables: figures per path and target, the checks and rate search, the profile."""
    targets = fig["targets"]
    t = Table(
        title=f"packets per second through one switch (storage leaf sl0; {fig['config']['seconds']:g} s "
        f"window per path; offered = what reached the switch's ingress interface"
        + (f"; BMv2 is {fig['config']['bmv2_binary']})" if "bmv2" in targets else ")")
    )
    t.add_column("path")
    for target in targets:
        t.add_column(f"{target} pkt/s", justify="right")
        t.add_column(f"{target} offered", justify="right")
        t.add_column(f"{target} CPU %: switch / sender / kernel / others / steal", justify="right")
    if len(targets) == 2:
        t.add_column("softswitch / BMv2", justify="right")
    for path in PATHS:
        row = [PATH_NAMES[path]]
        for target in targets:
            r = targets[target]["paths"][path]
            row += [
                f"{r['pps']:,.0f}",
                f"{r['offered_pps']:,.0f}" + (" (sender-limited)" if r["sender_limited"] else ""),
                f"{r['switch_cpu_percent']:.0f} / {r['sender_cpu_percent']:.0f} / "
                f"{r['softirq_cpu_percent']:.0f} / {r['others_cpu_percent']:.0f} / {r['steal_cpu_percent']:.0f}",
            ]
        if len(targets) == 2:
            row.append(f"{fig['ratio'][path]:.2f}")
        t.add_row(*row)
    out.print(t)
    out.print(
        "CPU %: 100 = one core for the whole window; kernel = softirq time and ksoftirqd threads (frames "
        f"crossing the veths); others = processes this harness did not start; steal = time "
        f"the hypervisor gave other guests ({fig['config']['cpus']} cores; "
        f"load average before the run {' '.join(map(str, fig['config']['loadavg_before']))})"
    )
    busy = [f"{t} {p}" for t, tr in targets.items() for p in PATHS if shared(tr["paths"][p])]
    if busy:
        out.print(
            f"[yellow]the machine was shared: other processes or other guests of the host (steal) took more "
            f"than a quarter of a core during "
            f"{', '.join(busy)}; those figures are low[/]"
        )
    d = Table(
        title="checks: frames out over the whole run vs the switch's dc_stats; the rate search's steps "
        "(asked / offered / delivered pkt/s)"
    )
    for col in ("target", "path", "out port", "frames out", "dc_stats moved", "rate search"):
        d.add_column(col)
    for target, tr in targets.items():
        for path in PATHS:
            r = tr["paths"][path]
            d.add_row(
                target,
                path,
                str(r["out_port"]),
                f"{r['delivered_total']:,}",
                ", ".join(f"{k} {v:,}" for k, v in r["counter_deltas"].items()) or "none",
                "  ".join(f"{a:,}/{o:,}/{dl:,}" for a, o, dl in r["search"]),
            )
    out.print(d)
    prof = fig.get("profile")
    if prof:
        for title, key in (
            ("own time", "own_percent"),
            ("inclusive time", "inclusive_percent"),
            ("own time by file", "own_percent_by_file"),
        ):
            pt = Table(
                title=f"softswitch main thread during cache hits, {title} (py-spy, {prof['samples']} "
                f"samples, % of busy samples; {prof['pps']:,.0f} pkt/s while sampled)"
            )
            pt.add_column("function" if "file" not in key else "file")
            pt.add_column("%", justify="right")
            for k, v in list(prof[key].items())[:15]:
                pt.add_row(k, f"{v:.1f}")
            out.print(pt)
