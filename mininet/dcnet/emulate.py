"""``make emulate``: the paper's Figures 9(a), 10 and 11 on the running system, beside the simulator.

Why: the simulator (``simulator/``) reproduces the figures at paper scale, but
it is a model.  Here the real system — P4 switches, agents, controller, shims,
Redis — runs the same experiments at a scale two cores can emulate, rate
limited as the paper's testbed was (each storage server serves at most
``server_rate`` requests/s, its shim's token bucket, which also pays for the
coherence protocol; each cache switch answers at most ``switch_rate`` reads/s
from its cache, a P4 meter), and the simulator, given the same cluster file,
predicts every point.

**Saturation throughput is measured, not assumed.**  For each point the
workload generator (one open-loop process in the client host) first warms
the caches, then offers a rate that grows by half each step until a step
breaks a bound, then bisects between the last good and the first bad rate.
A step passes while errors (timeouts: the servers' queues overflowed; and
backlog: requests not sent because too many were in flight) stay under 1 %
of the requests, no storage server was asked for more than its rate (the
work its shim admitted in the step, requests and coherence, over rate ×
step: a server over 100 % has a growing queue, which a short step would
otherwise hide in its queue and burst), reads coloured red by a cache
switch's meter stay under 1 % of the reads (with the previous bound, the
simulator's definition of saturation: no server and no cache switch over its
rate),
and the p99 latency stays under 750 ms (the servers' queues hold 0.4 s of
requests; beyond that the emulation host itself is out of CPU).  A point's throughput is the
goodput of its best passing step.  Values are checked on every read, so a
stale read fails the run.

Figures (PNG + CSV in ``docs/figures/emulated/``, the simulator's prediction
dashed on the same axes):

* **9(a)** throughput vs skew (uniform, Zipf 0.9, 0.95, 0.99), read-only;
* **10** throughput vs write ratio at Zipf 0.99;
* **11** throughput over time at a fixed offered load (half of the healthy
  saturation, as the paper and the simulator's Fig. 11) while two spines fail
  and recover through ``distcache-ctl``;
  its points are the mean goodput of each phase (the two seconds after an
  event left out) against min(offered, the simulated saturation with the
  failed spines).

The last stdout line is ``emulated_vs_simulated_max_error=<percent> points=<n>``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from rich.console import Console
from rich.text import Text

from dcnet.cpu_account import CpuAccount
from dcnet.cpu_account import summary as cpu_summary
from dcnet.deploy import REPO, Deployment, DeploymentError, WorkloadSession, new_run_dir
from dcnet.emulate_report import (
    MAX_ERRORS,
    MAX_METERED,
    MAX_P99_MS,
    MAX_SERVER_LOAD,
    Point,
    Step,
    plot_sweep,
    render,
    summary,
    write_csv,
)
from dcnet.p4switch import SWITCH_LOG_HELP, SWITCH_LOGS, TARGETS, TargetMissingError
from distcache import p4names
from distcache.cluster import Cluster, Role
from distcache.cmdline import ArgumentParser, input_file, load_cluster
from distcache.rpc.shim import ShimLink
from harness.processes import SwitchProcesses
from simulator.figures import LABELS, LINE
from simulator.model import MECHANISMS, Model, SimConfig
from simulator.workload import DEFAULT_HEAD

console = Console(stderr=True)
TOPOLOGY = REPO / "topologies" / "emulate-4spine-4x4.json"
# the kernel target's switches take no CPU of their own: its emulation runs the same cluster at 5x the rates
TOPOLOGY_FOR = {"ebpf": REPO / "topologies" / "emulate-fast-4spine-4x4.json"}
OUT = REPO / "docs" / "figures" / "emulated"
OUT_FOR = {"ebpf": REPO / "docs" / "figures" / "emulated-ebpf"}

GROWTH = 1.5  # each ramp step offers this much more
BISECTIONS = 2
SKEWS = (0.0, 0.9, 0.95, 0.99)
WRITE_RATIOS = (0.05, 0.1, 0.2)


class Emulation:
    """One deployment, one generator session; a saturation search per point."""

    def __init__(self, dep: Deployment, cluster: Cluster, keys: int, step_seconds: float, warm_seconds: float) -> None:
        self.dep, self.cluster, self.keys = dep, cluster, keys
        self.step_seconds, self.warm_seconds = step_seconds, warm_seconds
        self.client = cluster.client(0, 0)
        self.cache_switches = [sw.name for sw in cluster.switches() if sw.role != Role.CLIENT_LEAF]
        # the keys are written once, gently (the servers are rate limited) and with retries
        loader = dep.workload_session(self.client, timeout=0.5, retries=8)
        try:
            console.log(f"loading {keys} keys")
            rep = loader.run({"keys": keys, "value_size": 32, "concurrency": 8, "ops": 0, "load_keys": keys})
            console.log(f"loaded in {rep['load_seconds']:.0f} s")
        finally:
            loader.close()
        # the measured workloads: no retry, a lost request is an error
        self.session: WorkloadSession = dep.workload_session(self.client, timeout=1.0, retries=0)
        self.cpu = CpuAccount(dep.pids_by_role)
        # reads the staleness oracle found stale / wrong over the whole emulation (the session judges each
        # workload against every one before it): any is a failure, whatever the load
        self.stale, self.wrong, self.findings = 0, 0, list[str]()

    # -- workloads --------------------------------------------------------------------------
    def workload(
        self,
        rate: float,
        zipf: float,
        write_ratio: float,
        seconds: float,
        on_second: Callable[[dict], None] | None = None,
    ) -> dict:
        cfg = {
            "keys": self.keys,
            "zipf": zipf,
            "read_ratio": 1.0 - write_ratio,
            "value_size": 32,
            "rate": rate,
            "concurrency": max(64, int(rate)),
            "duration": seconds,
            "load": False,
        }
        rep = self.session.run(cfg, on_second)
        self.stale += rep["stale"]
        self.wrong += rep["wrong"]
        self.findings += rep["findings"][: max(0, 5 - len(self.findings))]
        return rep

    def metered(self) -> int:
        total = 0
        failed = self.failed_now()  # one status call, not one per switch
        for name in self.cache_switches:
            if name in failed:
                continue
            cells = self.dep.controller.conns[name].read_counter(p4names.DC_STATS)
            total += cells.get(int(p4names.Stat.HIT_METERED), (0, 0))[0]
        return total

    def failed_now(self) -> set[str]:
        return {s.name for s in self.dep.controller.ctl.status().switches if s.failed}

    def spent(self) -> dict[str, float]:
        """Per storage server: the request-equivalents its shim admitted under its rate so far."""
        return {
            h.name: ShimLink(self.dep.shim_control(h), timeout=5.0).stats()["rate_spent"]
            for h in self.cluster.servers()
        }

    def step(self, rate: float, zipf: float, write_ratio: float) -> Step:
        before, spent = self.metered(), self.spent()
        self.cpu.start()
        rep = self.workload(rate, zipf, write_ratio, self.step_seconds)
        cpu = self.cpu.stop()
        metered = self.metered() - before
        spent_after = self.spent()
        load = max(spent_after[h] - spent[h] for h in spent) / (self.cluster.server_rate * self.step_seconds)
        requests = rep["ops"] + rep["errors"].get("backlog", 0)
        failed = rep["failed_reads"] + rep["failed_writes"]
        # over the scheduled window: every op was issued in it (replies still in flight at its end count)
        return Step(
            rate=rate,
            goodput=(rep["ops"] - failed) / self.step_seconds,
            errors=rep["error_count"] / max(1, requests),
            metered=metered / max(1, rep["reads"]),
            p99_ms=(rep["latency_us"]["all"]["p99"] or 0.0) / 1000,
            hit_ratio=rep["hit_ratio"],
            server_load=load,
            cpu=cpu,
            error_kinds=dict(rep["errors"]),
        )

    def saturate(self, zipf: float, write_ratio: float, start: float) -> tuple[float, list[Step]]:
        """Ramp from ``start`` until a step fails, then bisect; the best passing step's goodput."""
        self.workload(start, zipf, write_ratio, self.warm_seconds)  # the detectors find this workload's hot keys
        steps: list[Step] = []
        rate, good, bad = start, None, None
        for _ in range(14):
            s = self.step(rate, zipf, write_ratio)
            steps.append(s)
            self._log(s)
            if s.ok:
                good = rate
                rate *= GROWTH
            else:
                bad = rate
                break
        if good is None:  # even the first step failed: search below it
            good = 0.0
        for _ in range(BISECTIONS if bad is not None else 0):
            mid = (good + bad) / 2 if good else bad / GROWTH
            s = self.step(mid, zipf, write_ratio)
            steps.append(s)
            self._log(s)
            if s.ok:
                good = mid
            else:
                bad = mid
        passing = [s.goodput for s in steps if s.ok]
        return (max(passing) if passing else 0.0), steps

    @staticmethod
    def _log(s: Step) -> None:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(s.error_kinds.items()))
        console.log(
            f"  offered {s.rate:5.0f}/s -> {s.goodput:5.0f}/s  errors {s.errors:5.1%}  busiest server "
            f"{s.server_load:4.0%}  metered {s.metered:5.1%}  p99 {s.p99_ms:5.0f} ms  hits {s.hit_ratio:4.0%}"
            f"  {'ok' if s.ok else 'over: ' + ', '.join(s.broken)}{f' ({kinds})' if kinds else ''}"
            f"\n      host CPU (% of a core): {cpu_summary(s.cpu)}"
        )

    # -- the simulator's prediction -------------------------------------------------------------
    def simulated(
        self, mechanism: str, zipf: float, write_ratio: float = 0.0, failed: Iterable[int] = ()
    ) -> tuple[float, str]:
        c = self.cluster
        cfg = SimConfig(
            cluster=c,
            n_keys=self.keys,
            alpha=zipf,
            cache_per_switch=c.cache_slots,
            server_rate=1.0,
            switch_rate=c.switch_rate / c.server_rate,
            write_ratio=write_ratio,
            head=min(DEFAULT_HEAD, self.keys),
            failed_spines=frozenset(failed),
            key_prefix="key",
        )
        r = Model(cfg).evaluate(mechanism)
        return r.throughput * c.server_rate, r.bottleneck

    def close(self) -> None:
        self.session.close()


# -- the figures -------------------------------------------------------------------------------------


def sweep(
    em: Emulation,
    figure: str,
    mechanisms: list[str],
    xs: Iterable[float],
    params: Callable[[float], tuple[float, float]],
) -> list[Point]:
    points = []
    for mech in mechanisms:
        em.dep.ctl("mechanism", mech)
        start = 50.0
        for x in xs:
            zipf, w = params(x)
            console.rule(f"{figure}: {LABELS[mech]}, {'skew' if figure == 'fig9a' else 'write ratio'} {x}")
            sat, steps = em.saturate(zipf, w, start)
            sim, bottleneck = em.simulated(mech, zipf, w)
            p = Point(figure, mech, x, sat, sim, bottleneck, steps)
            console.log(
                f"[bold]{LABELS[mech]} at {x}: emulated {sat:.0f}/s, simulated {sim:.0f}/s "
                f"({p.error_pct:.1f} %; simulated bottleneck {bottleneck})"
            )
            points.append(p)
            start = max(50.0, sat / GROWTH**2)  # the next point starts two steps below this one
    return points


# sp0 crashes (its process killed: nobody tells the controller; the leaves route around it by themselves) and
# is restarted (the controller brings it back); sp1 is failed and recovered by the operator
EVENTS = ((8.0, "crash", "sp0"), (16.0, "fail", "sp1"), (24.0, "restart", "sp0"), (30.0, "recover", "sp1"))
DOWN = ("crash", "fail")
TIMELINE = 36.0
SETTLE = 2.0  # seconds after an event left out of a phase's mean
OFFERED_SHARE = 0.5  # of the healthy saturation (Zipf 0.99, read-only), as the paper's Fig. 11


def apply_event(em: Emulation, what: str, name: str) -> None:
    """One of EVENTS: a crash or restart of a switch's process, or an operator's fail or recover."""
    if what in ("crash", "restart"):
        procs = SwitchProcesses(em.dep.run_dir / "switches.json")
        (procs.stop if what == "crash" else procs.start)(name)
    else:
        em.dep.operate(what, name)


def event_dips(trace: list[tuple[float, float]]) -> list[tuple[str, float, float]]:
    """(event, median goodput of the 5 s before, lowest of its second and the 3 after) per failure event."""
    out = []
    for when, what, name in EVENTS:
        if what not in DOWN:
            continue
        before = [g for t, g in trace if when - 5 < t <= when]
        during = [g for t, g in trace if when < t <= when + 4]
        if before and during:
            out.append((f"{what} {name}", sorted(before)[len(before) // 2], min(during)))
    return out


def failures(em: Emulation, mechanisms: list[str], healthy: dict[str, float]) -> tuple[list[Point], dict]:
    """Fig. 11: goodput per second at half the healthy saturation while spines fail and recover."""
    points, traces = [], {}
    spine_idx = {em.cluster.spine(i).name: i for i in range(em.cluster.spines)}
    for mech in mechanisms:
        em.dep.ctl("mechanism", mech)
        offered = OFFERED_SHARE * healthy[mech]
        console.rule(f"fig11: {LABELS[mech]} at {offered:.0f}/s offered")
        em.workload(offered, 0.99, 0.0, em.warm_seconds)
        trace: list[tuple[float, float]] = []
        t0 = time.monotonic()
        pending = list(EVENTS)

        def on_second(s: dict, trace: list = trace, pending: list = pending, t0: float = t0) -> None:
            if s["span"] >= 0.9:  # the run's last, partial second would be a spike of few ops over a short span
                trace.append((s["t"] + 1.0, max(0, s["ops"] - s["errors"]) / s["span"]))
            while pending and time.monotonic() - t0 >= pending[0][0]:
                _, what, name = pending.pop(0)
                console.log(f"  t={time.monotonic() - t0:4.1f}s {what} {name}")
                apply_event(em, what, name)

        em.workload(offered, 0.99, 0.0, TIMELINE, on_second)
        for _, what, name in pending:  # a slow generator may end before the last events: apply them
            apply_event(em, what, name)
        for _, what, name in EVENTS:
            if what == "restart":  # the controller brings a restarted switch back by itself
                em.dep.wait_switch(name, failed=False)
        traces[mech] = (offered, trace)
        bounds = [0.0, *(e[0] for e in EVENTS), TIMELINE]
        failed: set[int] = set()
        for i in range(len(bounds) - 1):
            lo, hi = bounds[i], bounds[i + 1]
            if i:
                _, what, name = EVENTS[i - 1]
                (failed.add if what in DOWN else failed.discard)(spine_idx[name])
            secs = [g for t, g in trace if lo + SETTLE < t <= hi]
            if not secs:
                continue
            sim, bottleneck = em.simulated(mech, 0.99, 0.0, failed)
            p = Point("fig11", mech, lo, sum(secs) / len(secs), min(offered, sim), bottleneck)
            points.append(p)
            console.log(
                f"  phase from {lo:.0f}s ({len(failed)} failed): {p.emulated:.0f}/s, "
                f"predicted {p.simulated:.0f}/s ({p.error_pct:.1f} %)"
            )
        for label, before, low in event_dips(trace):
            console.log(
                f"  around '{label}': {before:.0f}/s before -> {low:.0f}/s lowest of its 4 seconds "
                f"({low / before if before else 0:.0%})"
            )
    return points, traces


# -- output ------------------------------------------------------------------------------------------


def plot_failures(out: Path, traces: dict, points: list[Point], server_rate: float) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    bounds = [0.0, *(e[0] for e in EVENTS), TIMELINE]
    for mech, (_offered, trace) in traces.items():
        (line,) = ax.plot(
            [t for t, _ in trace], [g / server_rate for _, g in trace], LINE[mech], label=f"{LABELS[mech]} (emulated)"
        )
        for p in (p for p in points if p.mechanism == mech):
            hi = bounds[bounds.index(p.x) + 1]
            ax.plot([p.x, hi], [p.simulated / server_rate] * 2, ":", color=line.get_color(), lw=1.2)
    for when, what, name in EVENTS:
        ax.axvline(when, color="grey", lw=0.5, ls=":")
        ax.text(when, 0, f" {what} {name}", rotation=90, fontsize=6, va="bottom")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("goodput (x one server)")
    ax.set_title("Fig. 11 emulated: two spines fail and recover (dotted: simulated)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "fig11_failures.png", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m dcnet.emulate", description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="softswitch", choices=TARGETS)
    ap.add_argument("--switch-log", choices=SWITCH_LOGS, default="events", help=SWITCH_LOG_HELP)
    ap.add_argument(
        "--topo",
        type=input_file,
        help=f"cluster file (default {TOPOLOGY.relative_to(REPO)}; for ebpf {TOPOLOGY_FOR['ebpf'].relative_to(REPO)})",
    )
    ap.add_argument("--keys", type=int, default=5000, help="key space (all loaded; default 5000)")
    ap.add_argument("--step-seconds", type=float, default=3.0, help="seconds per ramp step (default 3)")
    ap.add_argument("--warm-seconds", type=float, default=4.0, help="cache warm-up per point (default 4)")
    ap.add_argument("--mechanisms", default=",".join(MECHANISMS), help="comma-separated (default: all five)")
    ap.add_argument("--figures", default="9a,10,11", help="comma-separated subset of 9a,10,11")
    ap.add_argument(
        "--out",
        type=Path,
        help=f"PNG + CSV go here (default {OUT.relative_to(REPO)}; for ebpf {OUT_FOR['ebpf'].relative_to(REPO)})",
    )
    ap.add_argument("--quick", action="store_true", help="a smoke run: Zipf 0.99 only, one write ratio")
    args = ap.parse_args(argv)
    args.topo = args.topo or TOPOLOGY_FOR.get(args.target, TOPOLOGY)
    args.out = args.out or OUT_FOR.get(args.target, OUT)
    if os.geteuid() != 0:
        ap.error("Mininet needs root: run as root (sudo make emulate)")
    mechanisms = [m.strip() for m in args.mechanisms.split(",") if m.strip()]
    figures = {f.strip() for f in args.figures.split(",")}
    if bad := [m for m in mechanisms if m not in MECHANISMS]:
        ap.error(f"unknown mechanism(s) {bad}; use {', '.join(MECHANISMS)}")
    if bad := sorted(figures - {"9a", "10", "11"}):
        ap.error(f"unknown figure(s) {bad}; use 9a, 10, 11")
    cluster = load_cluster(ap, args.topo)
    if not (cluster.server_rate > 0 and cluster.switch_rate > 0):
        ap.error(f"{args.topo}: an emulation needs server_rate and switch_rate (the rate limits the simulator models)")
    skews = (0.99,) if args.quick else SKEWS
    writes = WRITE_RATIOS[:1] if args.quick else WRITE_RATIOS
    args.out.mkdir(parents=True, exist_ok=True)
    run_dir = new_run_dir()
    started = time.monotonic()
    points: list[Point] = []
    try:
        with Deployment(cluster, target=args.target, run_dir=run_dir, switch_log=args.switch_log) as dep:
            em = Emulation(dep, cluster, args.keys, args.step_seconds, args.warm_seconds)
            try:
                fig9 = (
                    sweep(em, "fig9a", mechanisms, skews, lambda z: (z, 0.0))
                    if "9a" in figures or "11" in figures
                    else []
                )
                if "9a" in figures:
                    points += fig9
                    write_csv(args.out, "fig9a_skew", fig9)
                    plot_sweep(
                        args.out,
                        "fig9a_skew",
                        "Fig. 9(a) emulated: throughput vs skew (dotted: simulated)",
                        "workload skew (Zipf θ)",
                        fig9,
                        cluster.server_rate,
                    )
                if "10" in figures:
                    fig10 = sweep(em, "fig10", mechanisms, writes, lambda w: (0.99, w))
                    points += fig10
                    write_csv(args.out, "fig10_writes", fig10)
                    plot_sweep(
                        args.out,
                        "fig10_writes",
                        "Fig. 10 emulated: throughput vs write ratio, Zipf 0.99 (dotted: simulated)",
                        "write ratio",
                        fig10,
                        cluster.server_rate,
                    )
                if "11" in figures:
                    healthy = {p.mechanism: p.emulated for p in fig9 if p.x == 0.99}
                    fig11, traces = failures(em, mechanisms, healthy)
                    points += fig11
                    write_csv(args.out, "fig11_failures", fig11)
                    plot_failures(args.out, traces, fig11, cluster.server_rate)
            finally:
                em.close()
    except (DeploymentError, TargetMissingError) as e:
        console.print(f"[red]emulation failed:[/] {e}")
        return 1
    (args.out / "points.json").write_text(
        json.dumps(
            {
                "topology": json.loads(cluster.to_json()),
                "keys": args.keys,
                "target": args.target,
                "bounds": {
                    "max_errors": MAX_ERRORS,
                    "max_metered": MAX_METERED,
                    "max_p99_ms": MAX_P99_MS,
                    "max_server_load": MAX_SERVER_LOAD,
                },
                "points": [asdict(p) | {"error_pct": p.error_pct} for p in points],
            },
            indent=1,
        )
        + "\n"
    )
    render(points)
    console.log(f"emulation took {time.monotonic() - started:.0f} s; figures in {args.out}; run folder {run_dir}")
    for finding in em.findings:
        console.print(Text(finding), soft_wrap=True)  # keys and values are data, not markup
    print(summary(points, em.stale, em.wrong))
    return 1 if em.stale or em.wrong else 0


if __name__ == "__main__":
    sys.exit(main())
