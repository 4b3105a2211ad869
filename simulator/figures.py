"""The paper's Figures 9-11 (and the theory checks), as PNG + CSV, printing what they plot."""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from distcache.cluster import Cluster
from simulator import theory
from simulator.model import MECHANISMS, Model, SimConfig, paper_config

LABELS = {
    "nocache": "NoCache",
    "partition": "CachePartition",
    "replication": "CacheReplication",
    "distcache": "DistCache",
    "hybrid": "Hybrid",
}
STYLE = {"nocache": "x:", "partition": "s--", "replication": "^-.", "distcache": "o-", "hybrid": "d-"}
LINE = {m: s.lstrip("xs^od") for m, s in STYLE.items()}  # the same lines without markers (time series)


def _write(out: Path, name: str, header: Sequence[str], rows: list[Sequence[object]]) -> None:
    with open(out / f"{name}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    print(f"\n{name}")
    print("  ".join(f"{h:>16}" for h in header))
    for r in rows:
        print("  ".join(_fmt(v) for v in r))


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:>16.3f}" if abs(v) < 10 else f"{v:>16.1f}"
    return f"{v!s:>16}"


def _sweep(
    out: Path,
    name: str,
    title: str,
    xlabel: str,
    xs: Sequence[object],
    xticks: Sequence[object],
    config: Callable[[object], SimConfig],
    logx: bool = False,
) -> dict[str, list[float]]:
    series: dict[str, list[float]] = {m: [] for m in MECHANISMS}
    for x in xs:
        model = Model(config(x))
        for m in MECHANISMS:
            series[m].append(model.evaluate(m).throughput)
    _write(
        out,
        name,
        [xlabel, *(LABELS[m] for m in MECHANISMS)],
        [[t, *(series[m][i] for m in MECHANISMS)] for i, t in enumerate(xticks)],
    )
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for m in MECHANISMS:
        ax.plot(range(len(xs)) if not logx else list(xticks), series[m], STYLE[m], label=LABELS[m])
    if logx:
        ax.set_xscale("log", base=2)
    else:
        ax.set_xticks(range(len(xs)), [str(t) for t in xticks])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("throughput (x one server)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=120)
    plt.close(fig)
    return series


def fig9a(out: Path) -> dict[str, list[float]]:
    skews = [0.0, 0.9, 0.95, 0.99]
    return _sweep(
        out,
        "fig9a_skew",
        "Fig. 9(a): throughput vs skew",
        "workload",
        skews,
        ["uniform", "zipf-0.9", "zipf-0.95", "zipf-0.99"],
        lambda a: paper_config(alpha=a),
    )


def fig9b(out: Path) -> dict[str, list[float]]:
    per_switch = [1, 5, 10, 25, 50, 100, 200]
    return _sweep(
        out,
        "fig9b_cache_size",
        "Fig. 9(b): throughput vs cache size (zipf-0.99)",
        "total cache size (objects)",
        per_switch,
        [k * 64 for k in per_switch],
        lambda k: paper_config(cache_per_switch=k),
    )


def fig9c(out: Path) -> dict[str, list[float]]:
    racks = [1, 2, 4, 8, 16, 32, 48]

    def cfg(r: object) -> SimConfig:
        c = Cluster(spines=int(r), storage_racks=int(r), servers_per_rack=32, client_racks=1)
        return replace(paper_config(), cluster=c)

    return _sweep(
        out,
        "fig9c_scale",
        "Fig. 9(c): throughput vs number of servers (zipf-0.99)",
        "storage servers",
        racks,
        [r * 32 for r in racks],
        cfg,
        logx=True,
    )


def fig10(out: Path) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    ratios = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0]
    a = _sweep(
        out,
        "fig10a_writes_zipf09_640",
        "Fig. 10(a): zipf-0.9, cache 640",
        "write ratio",
        ratios,
        ratios,
        lambda w: paper_config(alpha=0.9, cache_per_switch=10, write_ratio=w),
    )
    b = _sweep(
        out,
        "fig10b_writes_zipf099_6400",
        "Fig. 10(b): zipf-0.99, cache 6400",
        "write ratio",
        ratios,
        ratios,
        lambda w: paper_config(alpha=0.99, cache_per_switch=100, write_ratio=w),
    )
    return a, b


def fig11(out: Path) -> None:
    """Fail 4 of 32 spines one by one, remap their partitions, bring them back (offered = half of max)."""
    base = paper_config()
    events = [
        (10, "fail", 0),
        (20, "fail", 1),
        (30, "fail", 2),
        (40, "fail", 3),
        (60, "remap", -1),
        (80, "recover", -1),
    ]
    rows = []
    series: dict[str, list[float]] = {m: [] for m in MECHANISMS}
    full = {m: Model(base).evaluate(m) for m in MECHANISMS}
    offered = {m: 0.5 * full[m].throughput for m in MECHANISMS}
    cache: dict[tuple, float] = {}
    failed: set[int] = set()
    remapped = False
    times = list(range(0, 101, 2))
    for t in times:
        for when, what, spine in events:
            if when == t:
                if what == "fail":
                    failed.add(spine)
                elif what == "remap":
                    remapped = True
                else:
                    failed, remapped = set(), False
        row: list[object] = [t]
        for m in MECHANISMS:
            key = (m, frozenset(failed), remapped)
            if key not in cache:
                if not failed:
                    cache[key] = min(offered[m], full[m].throughput)
                else:
                    cfg = replace(base, failed_spines=frozenset(failed), remapped=remapped)
                    cap = Model(cfg).evaluate(m).throughput
                    # before remapping, queries keep being sent to and through the failed spines and are lost
                    lost = 0.0 if remapped else float(sum(full[m].spine_transit[j] for j in failed))
                    cache[key] = min(offered[m] * (1 - lost), cap)
            series[m].append(cache[key])
            row.append(cache[key])
        rows.append(row)
    _write(out, "fig11_failures", ["time", *(LABELS[m] for m in MECHANISMS)], rows)
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for m in MECHANISMS:
        ax.plot(
            times,
            series[m],
            STYLE[m].replace("o", "").replace("s", "").replace("^", "").replace("d", ""),
            label=LABELS[m],
        )
    for when, what, _ in events:
        ax.axvline(when, color="grey", lw=0.5, ls=":")
        ax.text(when, ax.get_ylim()[1] * 0.02, what, rotation=90, fontsize=6)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("throughput (x one server)")
    ax.set_title("Fig. 11: four spines fail, then remap, then recover")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "fig11_failures.png", dpi=120)
    plt.close(fig)


def theory_checks(out: Path) -> None:
    small = SimConfig(
        cluster=Cluster(spines=8, storage_racks=8, servers_per_rack=8, client_racks=1),
        n_keys=100_000,
        alpha=0.99,
        cache_per_switch=10,
        samples=200_000,
        telemetry_batch=16,
    )
    rows = [[seed, p2c, lp, p2c / lp] for seed, p2c, lp in theory.compare_with_optimum(small, range(1, 6))]
    _write(out, "theory_p2c_vs_optimum", ["seed", "p2c_cache_rate", "lp_optimum", "ratio"], rows)
    rows = []
    for name, cfg in (("small (8x8x8)", small), ("paper (32x32x32)", paper_config())):
        t = theory.without_two_choices(cfg)
        # offered 95% of what the two choices sustain: a fixed policy's hottest cache is over capacity by
        # this fraction, so its queue grows by that much of its capacity every unit of time (no steady state)
        growth = [max(0.0, 0.95 * t["p2c"] / t[k] - 1) for k in ("random", "spine")]
        rows.append([name, t["p2c"], t["random"], t["spine"], *growth])
    _write(
        out,
        "theory_without_two_choices",
        ["instance", "p2c", "fixed_half_split", "always_spine", "half_queue_growth", "spine_queue_growth"],
        rows,
    )
    rows = [
        [b, Model(replace(paper_config(), telemetry_batch=b)).evaluate("distcache").throughput]
        for b in (1, 16, 256, 4096, 65536)
    ]
    _write(out, "theory_telemetry_delay", ["queries_between_load_updates", "distcache"], rows)


def all_figures(out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    a = fig9a(out)
    fig9b(out)
    fig9c(out)
    fig10(out)
    fig11(out)
    theory_checks(out)
    i = 3  # zipf-0.99, read-only, paper scale
    line = (
        f"distcache_vs_replication={a['distcache'][i] / a['replication'][i]:.3f} "
        f"distcache_vs_nocache={a['distcache'][i] / a['nocache'][i]:.1f}"
    )
    print(f"\nall figures in {out} ({time.monotonic() - start:.0f} s)")
    return line
