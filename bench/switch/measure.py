"""Measuring one path: the rate search, the measured window (delivered, offered and refused pkt/s from the
kernel's interface counters, CPU of the switch, the sender, the kernel and other processes), and the check that
the switch's own counters agree with what came out."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rich.progress import Progress, TaskID

from bench.switch.config import (
    BUSY,
    IN_PORT,
    MAX_RATE,
    OFFER_FACTOR,
    PORTS,
    REFUSED,
    SATURATED,
    SENDER_CPU,
    SERVER_PORT,
    SPINE_PORTS,
    STEP_SECONDS,
    STEP_WINDOW,
    WARMUP,
    SetupError,
)
from bench.switch.frames import Frames
from bench.switch.namespace import netdev
from bench.switch.probe import probe
from bench.switch.sender import Sender
from harness.procstat import cpu_seconds, machine_cpu


class Target(Protocol):
    """What is measured: a switch (bench/switch/bed.py ``SwitchBed``) or the turnaround (bench/switch/limit.py)."""

    target: str
    progress: Progress
    sender: Sender
    paths: tuple[str, ...]
    counters: dict[str, str]  # path -> the counter that must count every frame it delivers
    watched: tuple[str, ...]  # counters only the path counting them may move

    @property
    def proc(self) -> subprocess.Popen | None: ...  # the switch process, if it is one

    def check(self, path: str, frames: Frames, out: list[tuple[int, bytes]]) -> int: ...

    def stats(self) -> dict[str, int]: ...

    def logs(self) -> str: ...


@dataclass
class PathResult:
    pps: float  # delivered / window
    offered_pps: float  # rx_packets of the switch's ingress interface / window
    refused_pps: float  # rx_dropped of that interface / window: frames sent that its full backlog refused
    sent_pps: float  # the sender's own count of frames the kernel took / its running time
    send_errors: int  # frames the kernel refused the sender (ENOBUFS), its own count
    delivery: float  # pps / offered_pps
    out_port: int  # where the probe frame came out
    switch_cpu_percent: float | None  # 100 = one core busy for the whole window; None: no process (the limit)
    sender_cpu_percent: float
    softirq_cpu_percent: float  # the kernel delivering frames over the veths: softirq time + ksoftirqd threads
    others_cpu_percent: float  # processes this harness did not start (a shared machine makes figures low)
    steal_cpu_percent: float  # time the hypervisor gave to other guests (a shared host makes figures low)
    delivered_total: int  # frames out of the expected ports over the whole run (warm-up and drain included)
    counter_deltas: dict[str, int]  # dc_stats cells that moved
    search: list[tuple[float, float, float]]  # rate search: (asked pps, offered pps, delivered pps) per step
    window_seconds: float
    core_busy_percent: list[float]  # per core, 100 = busy for the whole window (the sender's core is SENDER_CPU)
    limited_by: str  # see limited_by()
    sender_limited: bool  # limited_by is "the sender"


def limited_by(offered: float, refused: float, delivered: float, switch_core_busy: float | None) -> str:
    """Who limited a path, by the evidence of the window: the switch when its input refused frames (its backlog
    was full: its receiver was behind), when it delivered clearly less than it was offered, or when the core its
    receive work ran on (``switch_core_busy``, %, None on a single core) had no time left; otherwise the sender,
    which then offered about what came out while the switch had time to spare."""
    attempted = offered + refused
    if refused > REFUSED * attempted:
        return "switch: input full"
    if attempted >= 1.2 * delivered:
        return "switch: delivered less"
    if switch_core_busy is not None and switch_core_busy >= BUSY:
        return "switch: its core busy"
    return "the sender"


def core_ticks() -> list[tuple[int, int]]:
    """(busy, total) ticks of each core since boot (/proc/stat's cpuN lines; busy = all but idle and iowait)."""
    out = []
    for line in Path("/proc/stat").read_text().splitlines()[1:]:
        if not line.startswith("cpu"):
            break
        f = [int(x) for x in line.split()[1:]]
        out.append((sum(f[:8]) - f[3] - f[4], sum(f[:8])))
    return out


def offer(
    bed: Target,
    frame: bytes,
    rate: float,
    seconds: float,
    window_at: float,
    window: float,
    during: Callable[[], subprocess.Popen | None] | None = None,
    bar: TaskID | None = None,
) -> tuple[dict[str, float], subprocess.Popen | None]:
    """Offer ``frame`` at ``rate`` for ``seconds``; counters over [window_at, window_at + window].

    ``during`` starts a helper (py-spy) as the window opens; it gets SIGINT as the window closes.
    """
    bed.sender.request(frame, rate, seconds)
    pids = (bed.proc.pid if bed.proc else None, bed.sender.pid, os.getpid())
    cpu = lambda: ([cpu_seconds(p) for p in pids], machine_cpu(), core_ticks())  # noqa: E731
    t0 = time.monotonic()
    _sleep_until(bed, t0 + window_at, bar, t0)
    d0, w0, (p0, k0, c0) = netdev(), time.monotonic(), cpu()
    helper = during() if during else None
    _sleep_until(bed, w0 + window, bar, t0)
    d1, w1, (p1, k1, c1) = netdev(), time.monotonic(), cpu()
    if helper is not None:
        helper.send_signal(signal.SIGINT)
    res = bed.sender.result()
    dt = w1 - w0
    moved = lambda i, k: (d1[i][k] - d0[i][k]) / dt  # noqa: E731
    own = [b - a for a, b in zip(p0, p1, strict=True)]
    m = {
        "window": dt,
        "offered": moved(f"bsw{IN_PORT}", 0),
        "refused": moved(f"bsw{IN_PORT}", 2),
        "switch_cpu": 100 * own[0] / dt,  # NaN without a process
        "sender_cpu": 100 * own[1] / dt,
        "softirq_cpu": 100 * (k1[1] - k0[1]) / dt,
        "steal_cpu": 100 * (k1[2] - k0[2]) / dt,
        # user + system time of every process but the switch, the sender and the harness: the machine is shared
        "others_cpu": max(0.0, 100 * ((k1[0] - k0[0]) - sum(x for x in own if not math.isnan(x))) / dt),
        "sent": res.sent / res.seconds if res.seconds else 0.0,
        "errors": res.errors,
        "cores": [100 * (b[0] - a[0]) / max(1, b[1] - a[1]) for a, b in zip(c0, c1, strict=True)],
    }
    for p in PORTS:
        m[f"out{p}"] = moved(f"bpt{p}", 0)
    return m, helper


def _sleep_until(bed: Target, t: float, bar: TaskID | None, t0: float) -> None:
    while (left := t - time.monotonic()) > 0:
        if bar is not None:
            bed.progress.update(bar, completed=time.monotonic() - t0)
        time.sleep(min(0.05, left))
    if bed.proc is not None and bed.proc.poll() is not None:
        raise SetupError(
            f"{bed.target} exited with code {bed.proc.returncode} under load (`make clean` and "
            "dcnet.cleanup stop every softswitch and simple_switch_grpc on the machine)\n" + bed.logs()
        )


def drain() -> dict[str, tuple[int, int, int]]:
    """Wait until nothing comes out any more (the switch works through its queue); the counters then."""
    last, stable, end = netdev(), 0, time.monotonic() + 10
    while stable < 3 and time.monotonic() < end:
        time.sleep(0.1)
        now = netdev()
        stable = stable + 1 if all(now[f"bpt{p}"] == last[f"bpt{p}"] for p in PORTS) else 0
        last = now
    return last


def run_path(
    bed: Target,
    path: str,
    frames: Frames,
    seconds: float,
    start_rate: float,
    during: Callable[[], subprocess.Popen | None] | None = None,
) -> tuple[PathResult, float]:
    """Probe, search the rate, measure and verify one path; (result, the rate the switch saturated at)."""
    frame = frames.paths[path]
    if bed.sender.proc is None:
        bed.sender.start()
    out_port = bed.check(path, frames, probe(frame))
    out_ports = SPINE_PORTS if path == "hit" else (SERVER_PORT,)
    delivered = lambda m: sum(m[f"out{p}"] for p in out_ports)  # noqa: E731
    # what reached the switch's input, taken or refused by its full backlog: below SATURATED of it out, the
    # switch is the limit
    saturated = lambda m: delivered(m) < SATURATED * (m["offered"] + m["refused"])  # noqa: E731
    search: list[tuple[float, float, float]] = []
    bar = bed.progress.add_task(f"{bed.target} {path}: rate search", total=None)
    rate, capacity = start_rate, 0.0
    while True:
        m, _ = offer(bed, frame, rate, STEP_SECONDS, STEP_SECONDS - STEP_WINDOW, STEP_WINDOW)
        search.append((round(rate), round(m["offered"]), round(delivered(m))))
        capacity = max(capacity, delivered(m))
        if saturated(m):
            break  # the switch is the limit
        if m["offered"] + m["refused"] < 0.7 * rate or rate >= MAX_RATE:
            break  # the sender is: offer all it can
        rate *= 2
    bed.progress.update(
        bar,
        total=1,
        completed=1,
        description=f"{bed.target} {path}: rate search ({capacity:,.0f} pkt/s at saturation)",
    )
    offer_rate = min(MAX_RATE, OFFER_FACTOR * capacity) if saturated(m) else 0.0
    for attempt in range(3):
        # the search's steps are short: if the switch keeps up with the measured run's rate after all,
        # that run measured the sender, not the switch; offer more and run again
        drain()
        s0, d0 = bed.stats(), netdev()
        label = f"{bed.target} {path}: {seconds:g} s at " + (
            f"{offer_rate:,.0f} pkt/s" if offer_rate else "the sender's full rate"
        )
        bar = bed.progress.add_task(label + (f" (try {attempt + 1})" if attempt else ""), total=WARMUP + seconds + 0.3)
        m, helper = offer(bed, frame, offer_rate, WARMUP + seconds + 0.3, WARMUP, seconds, during, bar)
        bed.progress.update(bar, completed=WARMUP + seconds + 0.3)
        d1 = drain()
        s1 = bed.stats()
        if helper is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                helper.wait(30)
        if saturated(m) or not offer_rate or offer_rate >= MAX_RATE or during is not None:
            break
        offer_rate = min(MAX_RATE, 2 * OFFER_FACTOR * delivered(m))
    total = sum(d1[f"bpt{p}"][0] - d0[f"bpt{p}"][0] for p in out_ports)
    stray = sum(d1[f"bpt{p}"][0] - d0[f"bpt{p}"][0] for p in PORTS if p not in out_ports)
    deltas = {k: s1[k] - s0.get(k, 0) for k in s1 if s1[k] != s0.get(k, 0)}
    verify(bed, path, total, stray, deltas)
    pps = delivered(m)
    switch_cores = [b for i, b in enumerate(m["cores"]) if i != SENDER_CPU]
    verdict = limited_by(m["offered"], m["refused"], pps, max(switch_cores) if switch_cores else None)
    res = PathResult(
        pps=pps,
        offered_pps=m["offered"],
        refused_pps=m["refused"],
        sent_pps=m["sent"],
        send_errors=int(m["errors"]),
        delivery=pps / m["offered"] if m["offered"] else 0.0,
        out_port=out_port,
        switch_cpu_percent=None if math.isnan(m["switch_cpu"]) else m["switch_cpu"],
        sender_cpu_percent=m["sender_cpu"],
        softirq_cpu_percent=m["softirq_cpu"],
        others_cpu_percent=m["others_cpu"],
        steal_cpu_percent=m["steal_cpu"],
        delivered_total=total,
        counter_deltas=deltas,
        search=search,
        window_seconds=m["window"],
        core_busy_percent=m["cores"],
        limited_by=verdict,
        sender_limited=verdict == "the sender",
    )
    return res, max(capacity, pps)


def shared(r: dict) -> bool:
    """Whether other processes or other guests of the host took more than a quarter of a core in the window."""
    return r["others_cpu_percent"] > 25 or r["steal_cpu_percent"] > 25


def verify(bed: Target, path: str, total: int, stray: int, deltas: dict[str, int]) -> None:
    """The switch's own counters must agree with the frames that came out; raises SetupError.

    The path's counter (``bed.counters``: READ_HIT for hits, READ_MISS for misses; the turnaround's TURNED)
    must have counted every frame that came out and may exceed them only by what the switch dropped after its
    ingress pipeline under overload (BMv2's queue between ingress and egress, a failed send): at most a fifth.
    The other counters (``bed.watched``) must stay put, and plain UDP moves none.
    """
    slack = max(5, total // 100)
    problems = []
    if total <= 0:
        problems.append("no frame came out")
    if stray > slack:
        problems.append(f"{stray} frames left other ports")
    counted = bed.counters.get(path)
    for name in bed.watched:
        moved = deltas.get(name, 0)
        if name == counted and not (total - slack <= moved and total >= 0.8 * moved):
            problems.append(f"{name} moved by {moved} for {total} frames out")
        elif name != counted and moved > (slack if counted else 0):
            problems.append(f"{name} moved by {moved}")
    if problems:
        raise SetupError(
            f"{bed.target} {path}: the path was not taken as expected: {'; '.join(problems)} (counters moved: {deltas})"
        )
