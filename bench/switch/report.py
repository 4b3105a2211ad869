"""What the switch benchmark prints: the summary lines on stdout (interface: ``hit_pps=N miss_pps=N fwd_pps=N``,
``bmv2_hit_pps=N bmv2_miss_pps=N bmv2_fwd_pps=N``, ``ebpf_hit_pps=N ...``, ``limit_pps=N``), the tables and the
ratios on stderr."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from bench.switch.config import BUSY, LIMIT, PATH_NAMES, PATHS, PREFIX, REFUSED, SENDER_CPU
from bench.switch.measure import shared


def figures(fig: dict) -> None:
    """Add the summary's figures to ``fig`` (its ``targets``, as measured): ``<prefix><path>_pps`` per switch,
    ``limit_pps``, softswitch over BMv2 per path (``ratio``) and the kernel target's ``ratios``."""
    for target, prefix in PREFIX.items():
        for path in PATHS:
            if target in fig["targets"]:
                fig[f"{prefix}{path}_pps"] = round(fig["targets"][target]["paths"][path]["pps"])
    if LIMIT in fig["targets"]:
        fig["limit_pps"] = round(fig["targets"][LIMIT]["paths"]["hit"]["pps"])
    if "softswitch" in fig["targets"] and "bmv2" in fig["targets"]:
        fig["ratio"] = {p: round(fig[f"{p}_pps"] / max(1, fig[f"bmv2_{p}_pps"]), 2) for p in PATHS}
    fig["ratios"] = ratios(fig)


def summary_lines(fig: dict) -> list[str]:
    """The stdout lines, one per target measured."""
    lines = []
    for target, prefix in PREFIX.items():
        if target in fig["targets"]:
            lines.append(" ".join(f"{prefix}{p}_pps={fig[f'{prefix}{p}_pps']}" for p in PATHS))
    if LIMIT in fig["targets"]:
        lines.append(f"limit_pps={fig['limit_pps']}")
    return lines


def ratios(fig: dict) -> dict[str, float]:
    """Cache hits of the kernel target over softswitch's and over the veths' ceiling, where both ran."""
    hit = {"softswitch": "hit_pps", "ebpf": "ebpf_hit_pps", LIMIT: "limit_pps"}
    out = {}
    for a, b in (("ebpf", "softswitch"), ("ebpf", LIMIT)):
        if hit[a] in fig and hit[b] in fig:
            out[f"{a}_hit/{b}" + ("_hit" if b != LIMIT else "")] = round(fig[hit[a]] / max(1, fig[hit[b]]), 3)
    return out


def ratio_line(fig: dict) -> str | None:
    """One line of the ratios between targets (stderr), or None with one target."""
    parts = []
    if "ratio" in fig:
        parts.append("softswitch/bmv2 " + " ".join(f"{p} {fig['ratio'][p]:.2f}" for p in PATHS))
    parts += [f"{k}={v:.2f}" for k, v in fig.get("ratios", {}).items()]
    return "ratios: " + "; ".join(parts) if parts else None


def _cpu(r: dict) -> str:
    switch = "-" if r["switch_cpu_percent"] is None else f"{r['switch_cpu_percent']:.0f}"
    return (
        f"{switch} / {r['sender_cpu_percent']:.0f} / {r['softirq_cpu_percent']:.0f} / "
        f"{r['others_cpu_percent']:.0f} / {r['steal_cpu_percent']:.0f}"
    )


def render(fig: dict, out: Console) -> None:
    """The tables: figures per target and path, the checks and rate search, the profile; the ratios."""
    targets = fig["targets"]
    t = Table(
        title=f"packets per second through one switch (storage leaf sl0; {fig['config']['seconds']:g} s "
        "window per path; offered = what reached the switch's input interface, refused = what its full backlog "
        "turned away; limit = a program that only turns reads around, in place of a switch"
        + (f"; BMv2 is {fig['config']['bmv2_binary']})" if "bmv2" in targets else ")")
    )
    for col, right in (
        ("target", False),
        ("path", False),
        ("delivered pkt/s", True),
        ("offered pkt/s", True),
        ("refused pkt/s", True),
        ("limited by", False),
        ("CPU %: switch / sender / kernel / others / steal", True),
        ("cores busy %", True),
    ):
        t.add_column(col, justify="right" if right else "left")
    for target, tr in targets.items():
        for path, r in tr["paths"].items():
            t.add_row(
                target,
                PATH_NAMES[path] if target != LIMIT else "read turned around (the veths' ceiling)",
                f"{r['pps']:,.0f}",
                f"{r['offered_pps']:,.0f}",
                f"{r['refused_pps']:,.0f}",
                r["limited_by"],
                _cpu(r),
                " / ".join(f"{b:.0f}" for b in r["core_busy_percent"]),
            )
        t.add_section()
    out.print(t)
    out.print(
        "CPU %: 100 = one core for the whole window; kernel = softirq time and ksoftirqd threads (frames "
        f"crossing the veths); others = processes this harness did not start; steal = time "
        f"the hypervisor gave other guests ({fig['config']['cpus']} cores; "
        f"load average before the run {' '.join(map(str, fig['config']['loadavg_before']))})"
    )
    out.print(
        f"limited by: the switch when its input refused more than {REFUSED:.0%} of the frames (its backlog was "
        "full), when it delivered less than 1/1.2 of what reached its input, or when the core its receive work ran "
        f"on was {BUSY:.0f} % busy or more; else the sender.  cores busy %: core 0 / core 1 / ..., the sender on "
        f"core {SENDER_CPU}"
    )
    busy = [f"{t} {p}" for t, tr in targets.items() for p, r in tr["paths"].items() if shared(r)]
    if busy:
        out.print(
            f"[yellow]the machine was shared: other processes or other guests of the host (steal) took more "
            f"than a quarter of a core during "
            f"{', '.join(busy)}; those figures are low[/]"
        )
    d = Table(
        title="checks: frames out over the whole run vs the switch's dc_stats (the limit: its own counts); the "
        "rate search's steps (asked / offered / delivered pkt/s)"
    )
    for col in ("target", "path", "out port", "frames out", "counters moved", "rate search"):
        d.add_column(col)
    for target, tr in targets.items():
        for path, r in tr["paths"].items():
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
    if line := ratio_line(fig):
        out.print(line)
