"""Where the emulation host's CPU goes: the CPU each role of a deployment took over a window.

Why: an emulation step that breaks a bound is read as the system's saturation, but on one machine the host
itself may have run out first (every shim, Redis, switch and client shares its cores).  Each step of
``make emulate`` is accounted by role -- shims, redis-servers, switches, agents, controller, the clients,
the kernel's packet work (softirq, where a kernel target's programs run), the emulation itself, anything
else on the machine -- and by what stayed idle, so a point whose ramp stopped with the host busy is told
apart from one that stopped at a server or a switch.  CPU time comes from /proc (harness.procstat).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

from harness.procstat import cpu_seconds, machine_cpu

KERNEL, EMULATION, OTHER, IDLE, STEAL = "kernel packets", "emulation", "other", "idle", "steal"
HOST_BUSY_IDLE = 10.0  # % of all cores: a step with less idle than this ran out of host CPU


class CpuAccount:
    """``start()`` then ``stop()`` around a window: % of one core per role (``idle`` and ``steal``: % of all
    the machine's cores, the hypervisor's share to other guests)."""

    def __init__(self, pids_by_role: Callable[[], dict[str, list[int]]]) -> None:
        self._pids_by_role = pids_by_role
        self._before: dict[str, dict[int, float]] = {}
        self._machine = (0.0, 0.0, 0.0)
        self._t0 = 0.0

    def start(self) -> None:
        roles = self._pids_by_role() | {EMULATION: [os.getpid()]}
        self._before = {role: {pid: cpu_seconds(pid) for pid in pids} for role, pids in roles.items()}
        self._machine = machine_cpu()
        self._t0 = time.monotonic()

    def stop(self) -> dict[str, float]:
        seconds = max(1e-6, time.monotonic() - self._t0)
        busy, kernel, steal = (b - a for a, b in zip(self._machine, machine_cpu(), strict=True))
        out: dict[str, float] = {}
        for role, before in self._before.items():
            # a process that ended in the window is left out (its time is in "other")
            spent = [cpu_seconds(pid) - t for pid, t in before.items()]
            out[role] = 100.0 * sum(s for s in spent if not math.isnan(s)) / seconds
        out[KERNEL] = 100.0 * kernel / seconds
        out[OTHER] = max(0.0, 100.0 * busy / seconds - sum(out.values()) + out[KERNEL])
        cores = os.cpu_count() or 1
        out[IDLE] = max(0.0, 100.0 * (cores * seconds - busy - kernel - steal) / (cores * seconds))
        out[STEAL] = 100.0 * steal / (cores * seconds)
        return {k: round(v, 1) for k, v in out.items()}


def host_ran_out(cpu: dict[str, float]) -> bool:
    """Whether a window's host had (almost) no idle CPU left: its figures may be the host's, not the system's."""
    return bool(cpu) and cpu.get(IDLE, 100.0) < HOST_BUSY_IDLE


def summary(cpu: dict[str, float], top: int = 4) -> str:
    """The roles that took the most, then idle: ``shims 90% switches 46% ... idle 36%``."""
    roles = sorted(((v, k) for k, v in cpu.items() if k not in (IDLE, STEAL) and v >= 1.0), reverse=True)[:top]
    return " ".join(f"{k} {v:.0f}%" for v, k in roles) + f" | idle {cpu.get(IDLE, math.nan):.0f}%"
