"""The emulation's points, and how they are written out: the saturation search's steps and the bounds a step
must keep, CSV files, the sweep figures, the summary line and the tables printed at the end (:mod:`dcnet.emulate`
runs the search)."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from rich.console import Console
from rich.table import Table

from dcnet.cpu_account import IDLE, STEAL, host_ran_out
from simulator.figures import LABELS, STYLE

AGREE_PCT = 15.0  # a point within this many % of the simulator agrees with it
MAX_ERRORS = 0.01  # of the requests: timeouts (a server's queue overflowed) and backlog
MAX_METERED = 0.01  # of the reads: answered by no cache because a switch was over its rate
MAX_SERVER_LOAD = 1.0  # of a server's rate, in the step
MAX_P99_MS = 750.0  # a guard against the emulation host running out of CPU (queues at the servers stay below)


@dataclass
class Step:
    rate: float  # offered ops/s
    goodput: float  # answered ops/s
    errors: float  # fraction of the requests
    metered: float  # fraction of the reads
    p99_ms: float
    hit_ratio: float
    server_load: float  # the busiest server's admitted work over its rate x step
    cpu: dict[str, float] = field(default_factory=dict)  # % of one core per role, idle % of all (cpu_account)
    error_kinds: dict[str, int] = field(default_factory=dict)  # timeout, backlog, stale_value, ...: counts

    @property
    def broken(self) -> list[str]:
        """The bounds this step broke (empty: it passed)."""
        return [
            name
            for name, over in (
                ("errors", self.errors > MAX_ERRORS),
                ("metered", self.metered > MAX_METERED),
                ("p99", self.p99_ms > MAX_P99_MS),
                ("server load", self.server_load > MAX_SERVER_LOAD),
            )
            if over
        ]

    @property
    def ok(self) -> bool:
        return not self.broken


@dataclass
class Point:
    figure: str
    mechanism: str
    x: float  # skew, write ratio, or phase start time
    emulated: float  # ops/s
    simulated: float  # ops/s
    bottleneck: str = ""  # the simulator's
    steps: list[Step] = field(default_factory=list)

    @property
    def error_pct(self) -> float:
        return 100.0 * abs(self.emulated - self.simulated) / self.simulated if self.simulated else math.inf

    @property
    def stopped_at(self) -> Step | None:
        """The step that stopped this point's ramp: its first failing one (None: no step failed)."""
        return next((s for s in self.steps if not s.ok), None)

    @property
    def host_limited(self) -> bool:
        """Whether the host had no idle CPU left in the step that stopped the ramp (the figure is then the
        host's, not the system's)."""
        return (over := self.stopped_at) is not None and host_ran_out(over.cpu)

    @property
    def limit(self) -> str:
        """What stopped this point's ramp: the bounds its first failing step broke, and "host CPU" when the
        host ran out in that step."""
        if (over := self.stopped_at) is None:
            return "none (never saturated)" if self.steps else ""
        return ", ".join(over.broken) + (" (host CPU)" if self.host_limited else "")


def write_csv(out: Path, name: str, points: list[Point]) -> None:
    with open(out / f"{name}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mechanism", "x", "emulated_ops", "simulated_ops", "error_pct", "simulated_bottleneck", "steps"])
        for p in points:
            w.writerow(
                [
                    p.mechanism,
                    p.x,
                    round(p.emulated, 1),
                    round(p.simulated, 1),
                    round(p.error_pct, 1),
                    p.bottleneck,
                    len(p.steps),
                ]
            )


def plot_sweep(out: Path, name: str, title: str, xlabel: str, points: list[Point], server_rate: float) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for mech in dict.fromkeys(p.mechanism for p in points):
        ps = [p for p in points if p.mechanism == mech]
        xs = list(range(len(ps)))
        (line,) = ax.plot(xs, [p.emulated / server_rate for p in ps], STYLE[mech], label=f"{LABELS[mech]} (emulated)")
        ax.plot(
            xs,
            [p.simulated / server_rate for p in ps],
            ":",
            color=line.get_color(),
            lw=1.2,
            label=f"{LABELS[mech]} (simulated)",
        )
        ax.set_xticks(xs, [("uniform" if p.x == 0 and name == "fig9a_skew" else str(p.x)) for p in ps])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("throughput (x one server)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=120)
    plt.close(fig)


def summary(points: list[Point], stale: int, wrong: int) -> str:
    """The last stdout line: the worst point's error, the points, how many are within 15 % of the simulator,
    how many saturation points' ramps stopped with the host out of CPU (their figure is the host's), and the
    reads the staleness oracle found stale or wrong in every workload of the run."""
    worst = max((p.error_pct for p in points), default=0.0)
    within = sum(p.error_pct <= AGREE_PCT for p in points)
    host = sum(p.host_limited for p in points)
    return (
        f"emulated_vs_simulated_max_error={worst:.1f} points={len(points)} "
        f"within_{AGREE_PCT:g}pct={within} host_limited={host} stale={stale} wrong={wrong}"
    )


def render(points: list[Point]) -> None:
    t = Table(title="emulated vs simulated saturation (ops/s)")
    cols = ("figure", "mechanism", "x", "emulated", "simulated", "error %", "simulated bottleneck", "ramp stopped by")
    for col in cols:
        t.add_column(col, justify="right" if col in ("x", "emulated", "simulated", "error %") else "left")
    for p in points:
        err = f"{p.error_pct:.1f}"
        t.add_row(
            p.figure,
            LABELS[p.mechanism],
            f"{p.x:g}",
            f"{p.emulated:.0f}",
            f"{p.simulated:.0f}",
            err if p.error_pct <= AGREE_PCT else f"[yellow]{err}[/]",
            p.bottleneck,
            p.limit,
        )
    Console(width=140, stderr=True).print(t)
    render_cpu(points)


def render_cpu(points: list[Point]) -> None:
    """Where the host's CPU went in the step that stopped each ramp (the last step where none did)."""
    ramps = [(p, p.stopped_at or p.steps[-1]) for p in points if p.steps]
    if not ramps:
        return
    roles = sorted({r for _, s in ramps for r in s.cpu if r not in (IDLE, STEAL)})
    t = Table(title="host CPU in the step that stopped each ramp (% of one core; idle: % of all cores)")
    for col in ("figure", "mechanism", "x", "offered", *roles, IDLE):
        t.add_column(col, justify="left" if col in ("figure", "mechanism") else "right")
    for p, s in ramps:
        idle = f"{s.cpu.get(IDLE, math.nan):.0f}"
        t.add_row(
            p.figure,
            LABELS[p.mechanism],
            f"{p.x:g}",
            f"{s.rate:.0f}",
            *(f"{s.cpu.get(r, 0.0):.0f}" for r in roles),
            f"[yellow]{idle}[/]" if host_ran_out(s.cpu) else idle,
        )
    Console(width=160, stderr=True).print(t)
