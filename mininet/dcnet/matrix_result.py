"""A fault-matrix cell's result (``make linearizability``): its history checked by tools/lincheck, its line,
and what falls short of the run's thresholds."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from dcnet.deploy import REPO, DeploymentError
from dcnet.fault_schedule import KINDS, PROCESS_KINDS, Tally
from loadgen.oracle import Oracle, Verdict, feed

LINCHECK = REPO / "build" / "lincheck"


@dataclass
class Cell:
    """One mechanism's run: what was recorded, what it showed, what faults took effect."""

    mechanism: str
    ops: int = 0
    violations: int = 0
    unknown_keys: int = 0
    reads: int = 0
    cached_reads: int = 0
    tally: Tally = field(default_factory=Tally)
    history: Path | None = None
    html: Path | None = None
    oracle: Verdict = field(default_factory=Verdict)  # the staleness oracle's verdict on the same history
    at_risk: Counter[str] = field(default_factory=Counter)  # at-risk pairs per fault kind (dcnet.at_risk)

    @property
    def cached_share(self) -> float:
        return self.cached_reads / self.reads if self.reads else 0.0

    @property
    def line(self) -> str:
        return (
            f"mechanism={self.mechanism} ops={self.ops} violations={self.violations} {self.oracle.line} "
            f"faults={self.tally.total} at_risk={self.at_risk.total()} "
            f"reads_cached={100 * self.cached_share:.0f}% {self.tally.summary()}"
        )

    @property
    def at_risk_line(self) -> str:
        """``at_risk mechanism=<m> <kind>=<pairs> ...``: the pairs each kind of process fault put at risk."""
        return f"at_risk mechanism={self.mechanism} " + " ".join(f"{k}={self.at_risk[k]}" for k in PROCESS_KINDS)


def kinds_for(mechanism: str) -> tuple[str, ...]:
    """The fault kinds that can take effect under ``mechanism``: under NoCache no cache takes keys in, so a
    shift of the hot set changes nothing (it still runs, and the cell still checks what it does)."""
    return tuple(k for k in KINDS if not (mechanism == "nocache" and k == "hot_shift"))


def judge(records: list[dict]) -> Verdict:
    """The staleness oracle's verdict on a cell's history (every key absent before it)."""
    oracle = Oracle()
    feed(oracle, records)
    return oracle.verdict()


def check(history: Path, html: Path, timeout: str = "300s") -> tuple[int, int, int]:
    """(ops, violations, keys not decided in time) of a history, by tools/lincheck."""
    if not LINCHECK.exists():
        raise DeploymentError(f"{LINCHECK} is missing: run `make deps` (it builds tools/lincheck with Go)")
    res = subprocess.run(
        [str(LINCHECK), "--history", str(history), "--html", str(html), "--timeout", timeout],
        capture_output=True,
        text=True,
    )
    m = re.search(r"ops=(\d+) violations=(\d+)", res.stdout)
    if res.returncode == 2 or m is None:
        why = (
            res.stderr.strip()
            or res.stdout.strip()
            or (
                f"killed by signal {-res.returncode} (out of memory? fewer operations per key: more --keys or a "
                "shorter --duration)"
                if res.returncode < 0
                else f"exit code {res.returncode}"
            )
        )
        raise DeploymentError(f"lincheck failed on {history}: {why}")
    unknown = re.search(r"unknown=(\d+)", res.stdout)
    return int(m.group(1)), int(m.group(2)), int(unknown.group(1)) if unknown else 0


def shortfalls(
    cell: Cell, run_dir: Path, min_effects: int, min_ops: int, min_cached: float, min_at_risk: int = 0
) -> list[str]:
    """What makes ``cell`` fail the run: a violation or an undecided key, a read the oracle found stale or
    wrong, a fault kind that took effect fewer than ``min_effects`` times, fewer than ``min_ops``
    operations, a caching mechanism that served less than ``min_cached`` of its reads from a cache, faults
    that put fewer than ``min_at_risk`` pairs at risk (NoCache's too: its mechanism changes turn caching on)."""
    mech, problems = cell.mechanism, []
    if cell.violations or cell.unknown_keys:
        problems.append(
            f"{mech}: {cell.violations} violations, {cell.unknown_keys} keys undecided; see {cell.html or cell.history}"
        )
    if cell.oracle.stale or cell.oracle.wrong:
        problems.append(
            f"{mech}: the oracle found {cell.oracle.line}; first: {cell.oracle.findings[0]} (see {cell.history})"
        )
    if cell.at_risk.total() < min_at_risk:
        problems.append(
            f"{mech}: its faults put {cell.at_risk.total()} write-read pairs at risk, fewer than {min_at_risk}: "
            "they proved nothing (no cached key met them)"
        )
    short = cell.tally.short_of(min_effects, kinds_for(mech))
    if short:
        problems.append(
            f"{mech}: took effect fewer than {min_effects} times: {', '.join(short)} "
            f"(see {run_dir / mech / 'faults.log'})"
        )
    if cell.ops < min_ops:
        problems.append(f"{mech}: {cell.ops} operations recorded, fewer than {min_ops}")
    if mech != "nocache" and cell.cached_share < min_cached:
        problems.append(f"{mech}: {100 * cell.cached_share:.0f}% of reads from a cache, under {100 * min_cached:.0f}%")
    return problems


def total_line(cells: list[Cell]) -> str:
    """The run's total line: ``ops=<n> violations=<n> stale=<n> wrong=<n> faults=<n> at_risk=<n>``."""
    return (
        f"ops={sum(c.ops for c in cells)} violations={sum(c.violations for c in cells)} "
        f"stale={sum(c.oracle.stale for c in cells)} wrong={sum(c.oracle.wrong for c in cells)} "
        f"faults={sum(c.tally.total for c in cells)} at_risk={sum(c.at_risk.total() for c in cells)}"
    )
