"""Measuring one path: the rate search, the measured window (delivered and offered pkt/s from the kernel's
interface counters, CPU of the switch, the sender, the kernel and other processes), and the check that the
switch's own dc_stats agree with what came out."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.progress import TaskID

from bench.procstat import cpu_seconds, machine_cpu
from bench.switch.config import (
    IN_PORT,
    MAX_RATE,
    OFFER_FACTOR,
    PORTS,
    SATURATED,
    SERVER_PORT,
    SPINE_PORTS,
    STEP_SECONDS,
    STEP_WINDOW,
    WARMUP,
    SetupError,
)
from bench.switch.frames import Frames
from bench.switch.namespace import netdev
from bench.switch.probe import check_path, probe

if TYPE_CHECKING:
    from bench.switch.bed import Bed


@dataclass
class PathResult:
    pps: float  # delivered / window
    offered_pps: float  # rx_packets of the switch's ingress interface / window
    sent_pps: float  # the sender's own count / its running time
    send_errors: int
    delivery: float  # pps / offered_pps
    out_port: int  # where the probe frame came out
    switch_cpu_percent: float  # 100 = one core busy for the whole window
    sender_cpu_percent: float
    softirq_cpu_percent: float  # the kernel delivering frames over the veths: softirq time + ksoftirqd threads
    others_cpu_percent: float  # processes this harness did not start (a shared machine makes figures low)
    steal_cpu_percent: float  # time the hypervisor gave to other guests (a shared host makes figures low)
    delivered_total: int  # frames out of the expected ports over the whole run (warm-up and drain included)
    counter_deltas: dict[str, int]  # dc_stats cells that moved
    search: list[tuple[float, float, float]]  # rate search: (asked pps, offered pps, delivered pps) per step
    window_seconds: float
    sender_limited: bool  # offered < 1.2 x delivered: the sender, not the switch, may be the limit


def offer(
    bed: Bed,
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
    assert bed.sender_conn is not None and bed.sender is not None and bed.proc is not None
    bed.sender_conn.send((frame, rate, seconds))
    t0 = time.monotonic()
    _sleep_until(bed, t0 + window_at, bar, t0)
    d0, w0 = netdev(), time.monotonic()
    c0 = (cpu_seconds(bed.proc.pid), cpu_seconds(bed.sender.pid), cpu_seconds(os.getpid()), machine_cpu())
    helper = during() if during else None
    _sleep_until(bed, w0 + window, bar, t0)
    d1, w1 = netdev(), time.monotonic()
    c1 = (cpu_seconds(bed.proc.pid), cpu_seconds(bed.sender.pid), cpu_seconds(os.getpid()), machine_cpu())
    if helper is not None:
        helper.send_signal(signal.SIGINT)
    if not bed.sender_conn.poll(seconds + 30):
        raise SetupError("the sender did not report")
    sent, errors, ran = bed.sender_conn.recv()
    dt = w1 - w0
    rx = lambda d, i: d[i][0]  # noqa: E731
    m = {
        "window": dt,
        "offered": (rx(d1, f"bsw{IN_PORT}") - rx(d0, f"bsw{IN_PORT}")) / dt,
        "switch_cpu": 100 * (c1[0] - c0[0]) / dt,
        "sender_cpu": 100 * (c1[1] - c0[1]) / dt,
        "softirq_cpu": 100 * (c1[3][1] - c0[3][1]) / dt,
        "steal_cpu": 100 * (c1[3][2] - c0[3][2]) / dt,
        # user + system time of every process but the switch, the sender and the harness: the machine is shared
        "others_cpu": max(0.0, 100 * ((c1[3][0] - c0[3][0]) - sum(c1[i] - c0[i] for i in range(3))) / dt),
        "sent": sent / ran,
        "errors": errors,
    }
    for p in PORTS:
        m[f"out{p}"] = (rx(d1, f"bpt{p}") - rx(d0, f"bpt{p}")) / dt
    return m, helper


def _sleep_until(bed: Bed, t: float, bar: TaskID | None, t0: float) -> None:
    while (left := t - time.monotonic()) > 0:
        if bar is not None:
            bed.progress.update(bar, completed=time.monotonic() - t0)
        time.sleep(min(0.05, left))
    assert bed.proc is not None
    if bed.proc.poll() is not None:
        raise SetupError(
            f"{bed.target} exited with code {bed.proc.returncode} under load (`make clean` and "
            "dcnet.cleanup stop every softswitch and simple_switch_grpc on the machine)\n" + bed.logs()
        )


def drain() -> dict[str, tuple[int, int]]:
    """Wait until nothing comes out any more (the switch works through its queue); the counters then."""
    last, stable, end = netdev(), 0, time.monotonic() + 10
    while stable < 3 and time.monotonic() < end:
        time.sleep(0.1)
        now = netdev()
        stable = stable + 1 if all(now[f"bpt{p}"] == last[f"bpt{p}"] for p in PORTS) else 0
        last = now
    return last


def run_path(
    bed: Bed,
    path: str,
    frames: Frames,
    seconds: float,
    start_rate: float,
    during: Callable[[], subprocess.Popen | None] | None = None,
) -> tuple[PathResult, float]:
    """Probe, search the rate, measure and verify one path; (result, the rate the switch saturated at)."""
    frame = frames.paths[path]
    out_port = check_path(path, frames, probe(frame))
    out_ports = SPINE_PORTS if path == "hit" else (SERVER_PORT,)
    delivered = lambda m: sum(m[f"out{p}"] for p in out_ports)  # noqa: E731
    saturated = lambda m: delivered(m) < SATURATED * m["offered"]  # noqa: E731
    search: list[tuple[float, float, float]] = []
    bar = bed.progress.add_task(f"{bed.target} {path}: rate search", total=None)
    rate, capacity = start_rate, 0.0
    while True:
        m, _ = offer(bed, frame, rate, STEP_SECONDS, STEP_SECONDS - STEP_WINDOW, STEP_WINDOW)
        search.append((round(rate), round(m["offered"]), round(delivered(m))))
        capacity = max(capacity, delivered(m))
        if saturated(m):
            break  # the switch is the limit
        if m["offered"] < 0.7 * rate or rate >= MAX_RATE:
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
    verify(bed.target, path, total, stray, deltas)
    pps = delivered(m)
    res = PathResult(
        pps=pps,
        offered_pps=m["offered"],
        sent_pps=m["sent"],
        send_errors=int(m["errors"]),
        delivery=pps / m["offered"] if m["offered"] else 0.0,
        out_port=out_port,
        switch_cpu_percent=m["switch_cpu"],
        sender_cpu_percent=m["sender_cpu"],
        softirq_cpu_percent=m["softirq_cpu"],
        others_cpu_percent=m["others_cpu"],
        steal_cpu_percent=m["steal_cpu"],
        delivered_total=total,
        counter_deltas=deltas,
        search=search,
        window_seconds=m["window"],
        sender_limited=m["offered"] < 1.2 * pps,
    )
    return res, max(capacity, pps)


def shared(r: dict) -> bool:
    """Whether other processes or other guests of the host took more than a quarter of a core in the window."""
    return r["others_cpu_percent"] > 25 or r["steal_cpu_percent"] > 25


def verify(target: str, path: str, total: int, stray: int, deltas: dict[str, int]) -> None:
    """The switch's own counters must agree with the frames that came out; raises SetupError.

    The path's counter (READ_HIT for hits, READ_MISS for misses) must have counted every frame that came out
    and may exceed them only by what the switch dropped after its ingress pipeline under overload (BMv2's
    queue between ingress and egress, a failed send): at most a fifth.  The other counter must stay put, and
    plain UDP moves neither.
    """
    slack = max(5, total // 100)
    problems = []
    if total <= 0:
        problems.append("no frame came out")
    if stray > slack:
        problems.append(f"{stray} frames left other ports")
    counted = {"hit": "READ_HIT", "miss": "READ_MISS"}.get(path)
    for name in ("READ_HIT", "READ_MISS"):
        moved = deltas.get(name, 0)
        if name == counted and not (total - slack <= moved and total >= 0.8 * moved):
            problems.append(f"{name} moved by {moved} for {total} frames out")
        elif name != counted and moved > (slack if counted else 0):
            problems.append(f"{name} moved by {moved}")
    if problems:
        raise SetupError(
            f"{target} {path}: the path was not taken as expected: {'; '.join(problems)} (dc_stats moved: {deltas})"
        )
