"""CPU time from /proc, for the benchmarks' CPU columns (one reader for every harness in bench/): a process's,
the machine's busy time (others may share it), the kernel's packet work."""

from __future__ import annotations

import contextlib
import functools
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


def machine_busy() -> float:
    """CPU seconds all cores spent busy since boot (/proc/stat): the machine may be shared, and what other
    processes took during a phase is what a reader needs to trust or discount its figures."""
    ticks = cpu_ticks()
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # minus idle and iowait


@functools.cache
def _ksoftirqd() -> tuple[int, ...]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if (d / "comm").read_text().startswith("ksoftirqd/"):
                    pids.append(int(d.name))
    return tuple(pids)


def machine_cpu() -> tuple[float, float, float]:
    """(user + nice + system, kernel packet work, steal) CPU seconds of all cores since boot: kernel packet work
    is /proc/stat's softirq time plus what the ksoftirqd threads took (the kernel defers softirqs to them under
    load; their time is system time of no process of ours); steal is what the hypervisor gave other guests."""
    f = cpu_ticks()
    tck = os.sysconf("SC_CLK_TCK")
    ksoft = sum(s for s in map(cpu_seconds, _ksoftirqd()) if not math.isnan(s))
    return (f[0] + f[1] + f[2]) / tck - ksoft, f[6] / tck + ksoft, f[7] / tck
