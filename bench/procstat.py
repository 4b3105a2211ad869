"""CPU time from /proc, for the benchmarks' CPU columns (one reader for every harness in bench/)."""

from __future__ import annotations

import math
import os
from pathlib import Path


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of a live process, all its threads (/proc/PID/stat; works for processes that
    are not our children); NaN when there is no such process."""
    if not pid:
        return math.nan
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return math.nan
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_ticks() -> list[int]:
    """The machine's cumulative CPU ticks, all cores (/proc/stat's first line: user, nice, system, idle,
    iowait, irq, softirq, steal, ...); divide by os.sysconf("SC_CLK_TCK") for seconds."""
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
