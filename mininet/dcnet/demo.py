"""The main demo (``make run``): hot keys cache themselves, and spines fail and come back.

Brings up a leaf-spine topology (2 spines, 2 storage racks, 1 client rack by
default), loads the keys from the first client host, then runs on every client host a Zipf-0.99,
read-mostly workload with nothing cached by hand.  The cache switches' detectors
report the keys that get hot, their agents insert them and the storage shims
fill the values; the hit ratio climbs second by second as the caches fill.

While the workload runs, the demo drives failures (``--no-failures`` skips
them): ``distcache-ctl fail`` of the first spine (its process is stopped and its
buckets move to the other spines), ``distcache-ctl recover`` of it (both sent from
the demo's process, as the command sends them: Deployment.operate), then a crash
of the last spine that nobody reports (its process is killed; the controller
must detect it) and its restart (the controller brings it back by itself).
For each it prints the read throughput around the event: the lowest of the
event's second and the three after it against the median of the five before,
the read p99 in the event's second, the highest write p99 of those four
seconds, the operations that failed in them, and how fast a client leaf's data plane found the spine dead (reported
by the leaf when the spine is heard again).  At the end it prints the workload's
report, how many spine deaths the leaves' data planes saw (0 in a loaded 60 s run
without failures, on softswitch and on BMv2's fast build: docs/protocol.md) and,
last, one line::

    reads=<n> hits=<n> misses=<n> errors=<n> stale=<n> wrong=<n> auto_cached=<n> failovers=<n>

The workload runs on every client host of the topology at once (:mod:`dcnet.everywhere`), and every
read of every host is judged against every host's writes on one timeline by the staleness oracle
(:mod:`loadgen.oracle`).  ``hits`` are reads answered by a switch cache, ``misses`` reads answered by a
storage server, ``errors`` operations that failed plus the reads the oracle found ``stale`` (a value
superseded by a write acknowledged before the read was sent) or ``wrong`` (a value no write of the run
wrote), ``auto_cached`` keys the agents inserted from
hot-key reports, ``failovers`` spine failures the controller handled.  Then
everything is torn down.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dcnet import redis_session
from dcnet.deploy import Deployment, DeploymentError
from dcnet.everywhere import bench_everywhere
from dcnet.p4switch import SWITCH_LOG_HELP, SWITCH_LOGS, TARGETS, TargetMissingError
from distcache.cluster import Cluster, ClusterError
from distcache.cmdline import ArgumentParser, input_file, load_cluster, output_dir
from harness.processes import SwitchProcesses
from loadgen.workload import BenchConfig
from p4rt.probes import SpineDeath

console = Console(stderr=True)


DEFAULT_TOPO = Path(__file__).resolve().parents[2] / "topologies" / "demo-2spine-2rack.json"


def demo_cluster(cluster: Cluster, slots: int | None, threshold: int | None) -> Cluster:
    """The topology's cluster with --slots / --threshold overriding it when given (validated like the
    file's own fields: ClusterError names the field and its range)."""
    for option, name, value in (("--slots", "cache_slots", slots), ("--threshold", "hh_threshold", threshold)):
        if value is not None:
            try:
                cluster = replace(cluster, **{name: value})
            except ClusterError as e:
                raise ClusterError(f"{option}: {e}") from None
    return cluster


def workload(args: argparse.Namespace) -> dict:
    """The workload the client host runs (BenchConfig fields), checked: ValueError names the option."""
    cfg = {
        "keys": args.keys,
        "zipf": args.zipf,
        "read_ratio": args.read_ratio,
        "value_size": 32,
        "concurrency": args.concurrency,
        "duration": args.duration,
        "load_keys": args.keys,
        "seed": args.seed,
    }
    BenchConfig(**cfg).validate()
    return cfg


def cached_counts(dep: Deployment) -> tuple[dict[str, int], int]:
    """Keys held per cache switch, and keys the agents inserted from reports (all agents)."""
    st = dep.controller.agent_status() if dep.controller else {}
    return {name: s.occupied for name, s in sorted(st.items())}, sum(s.auto_inserted for s in st.values())


@dataclass
class Progress:
    """The per-second rows, printed as vmstat prints its own: a header naming each column and its unit
    before the first row and again every ``every`` rows, each value right-aligned under its name."""

    switches: list[str]
    every: int = 20
    rows: int = 0

    def columns(self) -> list[str]:
        return ["sec", "ops/s", "hit ratio", "read p99 ms", *(f"{s} keys" for s in self.switches), "auto-cached"]

    def lines(self, values: list[str]) -> list[str]:
        """The lines to print for one row of ``values``: the header first where one is due."""
        names = self.columns()
        widths = [max(len(n), len(v)) for n, v in zip(names, values, strict=True)]
        out = ["  ".join(n.rjust(w) for n, w in zip(names, widths, strict=True))] if self.rows % self.every == 0 else []
        self.rows += 1
        return [*out, "  ".join(v.rjust(w) for v, w in zip(values, widths, strict=True))]


@dataclass
class Event:
    at: int  # second of the workload it happens in
    label: str
    action: Callable[[], str]
    spine: str = ""  # the spine whose data plane stops, if the event stops one
    done: bool = False
    took: float = 0.0
    wall: float = 0.0  # when it happened (time.time())


#: seconds of an event's window: its own and the three after it
WINDOW = 4


@dataclass
class Timeline:
    """Failure events at fixed fractions of the run, and the workload's seconds around each."""

    events: list[Event] = field(default_factory=list)
    seconds: dict[int, dict] = field(default_factory=dict)  # second -> the workload's "second" message

    def due(self, t: int) -> list[Event]:
        return [e for e in self.events if not e.done and e.at <= t]

    def reads(self, t: int) -> float:
        s = self.seconds[t]
        return s["reads"] / max(s["span"], 1e-9)

    def dip(self, e: Event) -> tuple[float, float]:
        """(median reads/s of the 5 seconds before, lowest reads/s of the event's second and the 3 after)."""
        before = [self.reads(t) for t in range(e.at - 5, e.at) if t in self.seconds]
        during = [self.reads(t) for t in range(e.at, e.at + WINDOW) if t in self.seconds]
        return (statistics.median(before) if before else 0.0, min(during) if during else 0.0)

    def read_p99_ms(self, e: Event) -> float:
        return self.seconds[e.at]["read_p99_us"] / 1000 if e.at in self.seconds else 0.0

    def write_p99_ms(self, e: Event) -> float:
        """The highest per-second write p99 of the event's window (writes wait for their coherence paths)."""
        return (
            max((self.seconds[t]["write_p99_us"] for t in range(e.at, e.at + WINDOW) if t in self.seconds), default=0.0)
            / 1000
        )

    def failed_ops(self, e: Event) -> int:
        """Operations that failed in the event's window (the workload counts errors per second)."""
        return sum(self.seconds[t]["errors"] for t in range(e.at, e.at + WINDOW) if t in self.seconds)


def of_event(e: Event, d: SpineDeath) -> bool:
    """Whether death ``d`` is event ``e``'s: a death of the spine ``e`` stops, reported after it."""
    return bool(e.spine) and d.spine == e.spine and d.at >= e.wall


def detection(e: Event, deaths: list) -> str:
    """How fast the client leaves' data planes found ``e``'s spine dead: the first death of that spine
    they reported after the event (each leaf reports one when it hears from the spine again)."""
    if not e.spine:
        return ""
    mine = [d for d in deaths if of_event(e, d)]
    if not mine:
        return "; no leaf reported its death (not heard from again yet?)"
    first = min(mine, key=lambda d: d.at)
    return f"; found dead by {first.leaf}'s data plane {first.detect_s * 1e3:.0f} ms after its last packet"


def unexplained(events: list[Event], deaths: list) -> str:
    """The deaths no failure event explains (a healthy spine taken for dead: a false death), each with
    its wall-clock time, detection and silence, so that it can be laid beside the host's own stalls."""
    odd = [d for d in deaths if not any(e.done and of_event(e, d) for e in events)]
    shown = "; ".join(
        f"{d.leaf}: {d.spine} at {time.strftime('%H:%M:%S', time.localtime(d.at))}.{int(d.at % 1 * 1000):03d}"
        f" found dead {d.detect_s * 1e3:.0f} ms after its last packet, silent {d.silent_s * 1e3:.0f} ms"
        for d in sorted(odd, key=lambda d: d.at)[:5]
    )
    return f"; not a failure event's: {shown}" if shown else ""


def failure_timeline(dep: Deployment, cluster: Cluster, duration: float) -> Timeline:
    first, last = cluster.spine(0).name, cluster.spine(cluster.spines - 1).name
    procs = SwitchProcesses(dep.run_dir / "switches.json")

    def crash() -> str:
        procs.stop(last)
        t = time.monotonic()
        dep.wait_switch(last, failed=True)
        st = dep.controller.ctl.status()  # type: ignore[union-attr]
        return (
            f"{last} killed (SIGKILL, nobody told the controller); declared dead after "
            f"{st.last_detection_s:.2f} s, buckets moved in {st.last_failover_s:.2f} s "
            f"(seen by the demo after {time.monotonic() - t:.2f} s)"
        )

    def restart() -> str:
        procs.start(last)
        t = time.monotonic()
        dep.wait_switch(last, failed=False)
        return f"{last} process started again; the controller recovered it by itself in {time.monotonic() - t:.2f} s"

    d = int(duration)
    return Timeline(
        [
            Event(int(d * 0.35), f"distcache-ctl fail {first}", lambda: dep.operate("fail", first), first),
            Event(int(d * 0.55), f"distcache-ctl recover {first}", lambda: dep.operate("recover", first)),
            Event(int(d * 0.70), f"crash {last}", crash, last),
            Event(int(d * 0.85), f"restart {last}", restart),
        ]
    )


def run(args: argparse.Namespace, cluster: Cluster) -> int:
    shape = (
        f"{cluster.spines} spines, {cluster.storage_racks} storage racks x {cluster.servers_per_rack} servers, "
        f"{cluster.client_racks} client racks, {cluster.mechanism.name.lower()}"
    )
    with console.status(f"starting {args.target} topology {args.topo.name} ({shape})..."):
        dep = Deployment(cluster, target=args.target, run_dir=args.run_dir, pcap=args.pcap, switch_log=args.switch_log)
        dep.__enter__()
    try:
        console.print(f"[green]topology up[/] — logs in {dep.run_dir}")
        hosts = cluster.clients()
        console.print(
            f"workload on every client host ({', '.join(h.name for h in hosts)}, one timeline): {args.keys} keys, "
            f"Zipf {args.zipf}, {args.read_ratio:.0%} reads, "
            f"{args.duration:.0f} s, concurrency {args.concurrency} each; caches: {cluster.cache_slots} keys per "
            f"switch, detector threshold {cluster.hh_threshold} reads per "
            f"{(1 << cluster.hh_window_shift) / 1e6:.2f} s window; nothing cached by hand"
        )
        progress = Progress(list(cached_counts(dep)[0]))
        report = None
        timeline = (
            Timeline() if args.no_failures or cluster.spines < 2 else failure_timeline(dep, cluster, args.duration)
        )
        for msg in bench_everywhere(dep, workload(args)):
            if msg["type"] == "load" and msg["done"] == msg["total"]:
                console.print(f"loaded {msg['total']} keys")
            elif msg["type"] == "second":
                timeline.seconds[msg["t"]] = msg
                for e in timeline.due(msg["t"] + 1):
                    t0, e.wall = time.monotonic(), time.time()
                    console.print(f"[yellow]>> {e.label}[/]: {e.action()}", highlight=False, soft_wrap=True)
                    e.done, e.took = True, time.monotonic() - t0
                held, auto = cached_counts(dep)
                row = [
                    f"{msg['t'] + 1}",
                    f"{msg['ops'] / max(msg['span'], 1e-9):,.0f}",
                    f"{msg['hit_ratio']:.2f}",
                    f"{msg['read_p99_us'] / 1000:.1f}",
                    *(f"{held.get(name, 0)}" for name in progress.switches),
                    f"{auto}",
                ]
                for line in progress.lines(row):
                    console.print(line, highlight=False, soft_wrap=True)  # one row per line, however wide
            elif msg["type"] == "report":
                report = msg
        if report is None:
            raise DeploymentError("the workload ended without a report; see client-*.log in the run folder")
        held, auto = cached_counts(dep)
        summary = Table(title="workload report")
        summary.add_column("")
        summary.add_column("value", justify="right")
        lat = report["latency_us"]
        for label, value in (
            ("throughput", f"{report['throughput']:,.0f} ops/s"),
            ("hit ratio (whole run)", f"{report['hit_ratio']:.2f}"),
            ("read latency p50 / p99, hits", f"{lat['hit']['p50']:.0f} / {lat['hit']['p99']:.0f} µs"),
            ("read latency p50 / p99, misses", f"{lat['miss']['p50']:.0f} / {lat['miss']['p99']:.0f} µs"),
            ("keys cached per switch", ", ".join(f"{k} {v}" for k, v in held.items())),
            (
                "insertion latency, report -> valid (p50 / max per switch)",
                ", ".join(
                    f"{k} {s.insert_latency_p50_us / 1000:.1f}/{s.insert_latency_max_us / 1000:.0f} ms"
                    for k, s in sorted(dep.controller.agent_status().items())
                ),
            ),
            ("errors", ", ".join(f"{k} {v}" for k, v in report["errors"].items()) or "none"),
            (
                f"stale / wrong reads, {report['hosts']} client hosts",
                f"stale={report['stale']} wrong={report['wrong']}",
            ),
        ):
            summary.add_row(label, value)
        status = dep.controller.ctl.status()
        for e in timeline.events:
            if e.done:
                before, low = timeline.dip(e)
                summary.add_row(
                    f"reads/s around '{e.label}' (s{e.at + 1})",
                    f"{before:,.0f} before -> {low:,.0f} lowest ({low / before if before else 0:.0%}); "
                    f"read p99 {timeline.read_p99_ms(e):.1f} ms; write p99 up to "
                    f"{timeline.write_p99_ms(e):.0f} ms; failed ops {timeline.failed_ops(e)}"
                    + detection(e, list(status.spine_deaths)),
                )
        seen = {f"{s.name}: {spine}": v for s in status.switches for spine, v in sorted(s.spine_deaths.items()) if v}
        ended = sum(seen.values())
        summary.add_row(
            "spine deaths seen by the leaves' data planes",
            f"{ended}"
            + (f" ({', '.join(f'{k} {v}' for k, v in seen.items())})" if seen else "")
            + unexplained(timeline.events, list(status.spine_deaths)),
        )
        Console().print(summary)
        for finding in report["findings"]:
            console.print(Text(finding), soft_wrap=True)  # keys and values are data, not markup
        steps, by_switch = redis_session.session(dep)
        console.print("[bold]any Redis client[/]: redis-cli through the client host's gateway")
        for step in steps:
            console.print(Text(f"{step.host}$ {step.command}"), soft_wrap=True)
            console.print(Text(step.output[:200] + (" ..." if len(step.output) > 200 else "")), soft_wrap=True)
        console.print(
            f"the hottest key was answered by {'a switch' if by_switch else 'its storage server (not cached now)'}"
        )
        errors = report["error_count"]
        failovers = status.failovers
        print(
            f"reads={report['reads']} hits={report['hits']} misses={report['misses']} errors={errors} "
            f"stale={report['stale']} wrong={report['wrong']} auto_cached={auto} failovers={failovers}",
            flush=True,
        )
        return 0 if errors == 0 else 1
    finally:
        with console.status("tearing down..."):
            dep.stop()


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m dcnet.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=TARGETS, default="softswitch")
    ap.add_argument("--switch-log", choices=SWITCH_LOGS, default="events", help=SWITCH_LOG_HELP)
    ap.add_argument(
        "--topo",
        type=input_file,
        default=DEFAULT_TOPO,
        help=f"cluster description (JSON; default {DEFAULT_TOPO.relative_to(DEFAULT_TOPO.parents[1])})",
    )
    ap.add_argument("--keys", type=int, default=10_000, help="keys in the workload (all loaded first)")
    ap.add_argument("--zipf", type=float, default=0.99, help="skew of the reads (0 = uniform)")
    ap.add_argument("--read-ratio", type=float, default=0.98)
    ap.add_argument("--duration", type=float, default=40.0, help="seconds of workload after loading")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--slots", type=int, help="cache slots per cache switch (default: the topology's)")
    ap.add_argument(
        "--threshold", type=int, help="reads per detector window that make a key hot (default: the topology's)"
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--run-dir", type=output_dir, help="where logs go (default runs/<timestamp>)")
    ap.add_argument("--pcap", action="store_true", help="capture every switch port")
    ap.add_argument("--no-failures", action="store_true", help="run the workload without failing any spine")
    args = ap.parse_args(argv)
    try:  # every bad argument is one line here, before Mininet starts anything
        cluster = demo_cluster(load_cluster(ap, args.topo), args.slots, args.threshold)
        cluster.check_deployable()
        workload(args)
    except ValueError as e:
        ap.error(str(e))
    if os.geteuid() != 0:
        console.print(
            "[red]the demo needs root[/] (Mininet creates network namespaces): run it with sudo, or as root: make run"
        )
        return 2
    try:
        return run(args, cluster)
    except (TargetMissingError, DeploymentError) as e:
        console.print(Text.assemble(("error:", "red"), " ", str(e)), soft_wrap=True)  # data, not markup
        return 2


if __name__ == "__main__":
    sys.exit(main())
