"""``make linearizability``: every mechanism under a randomized fault schedule, histories checked by porcupine.

For each mechanism (NoCache, CachePartition, CacheReplication, DistCache, Hybrid) one
*cell*: a fresh 2-spine, 2-rack Mininet deployment whose caches are tiny (4 slots,
detector threshold 2), so hot keys are inserted and evicted all the time, while
clients read, write and delete a few hot keys and record every operation.
Meanwhile a schedule drawn from the seed (:mod:`dcnet.fault_schedule`) runs, in
two lanes that overlap:

* packets: loss, loss bursts, duplicates and reordering of DistCache packets on
  every switch port, by the tc eBPF injector (:mod:`dcnet.netfaults`; it reaches
  BMv2 and softswitch alike);
* the fabric: spine crashes the controller must detect (and restarts it must
  notice), spines failed and recovered by the operator, controller crashes
  (also in the middle of a failover) and restarts, a spine's data plane that
  dies for 0.1-2 s while its P4Runtime server answers (every DistCache packet
  to and from it dropped by the injector: a short death is only routed around
  by the leaves, a longer one is failed over and recovered by the controller),
  mechanism changes away and back;
* processes: agents killed and restarted with and without their state file,
  shims killed and restarted with and without theirs, ``kill -9`` of
  redis-server, shifts of the hot set (another client makes other keys hot).

Faults are counted by their effect (packets the injector actually dropped,
duplicated or reordered; a spine declared dead and back; a process that
answers again as a new process...).  Each cell's history is checked per key by
``build/lincheck`` (tools/lincheck, porcupine); histories, and porcupine's HTML
of any violation, stay in the run folder.  Then a control run with coherence
broken on purpose must be caught.  It prints ``seed=<n>`` first, one line per
mechanism::

    mechanism=<m> ops=<n> violations=<n> faults=<n> reads_cached=<pct>% <kind>=<n> ...

and the total line ``ops=<n> violations=<n> faults=<n>`` (then the control run's
``control: ops=<n> violations=<n>``).  It exits 0 only if no cell has a
violation or an undecided key, every fault kind took effect at least
``--min-effects`` times in every cell, every cell recorded ``--min-ops``
operations, every caching mechanism served at least ``--min-cached`` of its
reads from a cache, and the control run was caught.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from dcnet.deploy import REPO, Deployment, DeploymentError, new_run_dir
from dcnet.fault_schedule import KINDS, PACKET_KINDS, Fault, Schedule, Tally, draw
from dcnet.netfaults import FaultConfig, FaultInjectorError, PacketFaults
from dcnet.p4switch import TargetMissingError
from distcache.cluster import Cluster, Host, Mechanism, is_cache_switch
from distcache.rpc.shim import ShimLink, ShimUnavailableError
from harness.processes import SwitchProcesses

console = Console(stderr=True, highlight=False)
LINCHECK = REPO / "build" / "lincheck"
MECHANISMS = ("nocache", "partition", "replication", "distcache", "hybrid")
CELL = {"spines": 2, "storage_racks": 2, "client_racks": 1, "clients_per_rack": 2, "cache_slots": 4, "hh_threshold": 2}
# background packet faults on every switch port (DistCache packets: requests, replies and coherence)
PACKETS = FaultConfig(match="distcache", drop=0.01, duplicate=0.01, reorder=0.01, reorder_distance=2)
BURST_EVERY = 4.0  # seconds between loss bursts on a random switch port
BURST_LEN = 6  # DistCache packets each burst drops
# a spine's dead data plane (spine_dp_dead): every DistCache packet to and from it, on both ends of its links
DP_DEAD = FaultConfig(match="distcache", drop=1.0)
DP_DETECT_S = 1.0  # after a death: how long the controller may still take to declare it (probe checks lag)
CLIENT_RATE = 75.0  # requests per second per client at most: a cell's history stays small enough to check
OVERRUN = 2.0  # the clients run on while the fault lanes finish, up to this many times the duration


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

    @property
    def cached_share(self) -> float:
        return self.cached_reads / self.reads if self.reads else 0.0

    @property
    def line(self) -> str:
        return (
            f"mechanism={self.mechanism} ops={self.ops} violations={self.violations} faults={self.tally.total} "
            f"reads_cached={100 * self.cached_share:.0f}% {self.tally.summary()}"
        )


def kinds_for(mechanism: str) -> tuple[str, ...]:
    """The fault kinds that can take effect under ``mechanism``: under NoCache no cache takes keys in, so a
    shift of the hot set changes nothing (it still runs, and the cell still checks what it does)."""
    return tuple(k for k in KINDS if not (mechanism == "nocache" and k == "hot_shift"))


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


def _fabric_links(dep: Deployment) -> list[tuple[object, object]]:
    """(interface, its peer) for every switch interface whose link leads to another switch."""
    switches = set(dep.net.switches)  # type: ignore[union-attr]
    out = []
    for sw in switches:
        for intf in sw.intfList():
            link = intf.link
            if link is None:
                continue
            other = link.intf2 if link.intf1 is intf else link.intf1
            if other.node in switches:
                out.append((intf, other))
    return out


def switch_ports(dep: Deployment, name: str) -> list[str]:
    """Both ends of every link between switch ``name`` and another switch: with the injector on their egress,
    every frame to or from ``name`` over the fabric (all of a spine's links) crosses one of them."""
    return sorted(
        p
        for intf, other in _fabric_links(dep)
        if intf.node.name == name  # type: ignore[attr-defined]
        for p in (intf.name, other.name)
    )


def fabric_ports(dep: Deployment) -> list[str]:
    """Both ends of every switch-to-switch link: their egress carries every frame crossing the fabric, in
    each direction (every coherence path and every request from a client rack crosses it).  Host-facing
    ports are left alone: a copy a switch port sends towards a host would be read back by BMv2 as input."""
    return sorted(intf.name for intf, _ in _fabric_links(dep))  # type: ignore[attr-defined]


class Faults:
    """The actions of a schedule on one deployment, each waiting for its own effect."""

    def __init__(
        self,
        dep: Deployment,
        mechanism: str,
        tally: Tally,
        running: threading.Event,
        packets: PacketFaults | None = None,
        background: FaultConfig | None = None,
    ) -> None:
        """``packets``: the cell's injector (on every fabric port), whose ``background`` configuration a
        data-plane death replaces on the dead spine's links for its length."""
        self.dep, self.mechanism, self.tally, self.running = dep, mechanism, tally, running
        self.cluster = dep.cluster
        self.procs = SwitchProcesses(dep.run_dir / "switches.json")
        self.shifts = 0
        self.packets, self.background = packets, background or FaultConfig(enabled=False)
        self.dp_dropped = 0  # packets the data-plane deaths dropped (the injector counts them as dropped too)

    def apply(self, f: Fault) -> None:
        """Apply one fault; count it only if it took effect while the clients were running."""
        action: Callable[..., str] = getattr(self, f.kind)
        t = time.monotonic()
        try:
            what = action(f.target, f.hold) if f.hold else action(f.target)
        except Exception as e:  # noqa: BLE001 - a fault that could not be applied is reported, never fatal
            self.tally.could_not(f.kind, f"{f.target}: {type(e).__name__}: {e}")
            return
        if self.running.is_set():
            self.tally.took_effect(f.kind, f"{what} ({time.monotonic() - t:.1f} s)")
        else:
            self.tally.could_not(f.kind, f"{f.target}: took effect after the clients stopped")

    # -- fabric ---------------------------------------------------------------------------------
    def spine_crash(self, spine: str) -> str:
        self.procs.stop(spine)
        self.dep.wait_switch(spine, failed=True)
        detected = self.dep.controller.ctl.status().last_detection_s  # type: ignore[union-attr]
        self.procs.start(spine)
        self.dep.wait_switch(spine, failed=False)
        return f"{spine} killed, declared dead after {detected:.2f} s, back by itself"

    def spine_operator(self, spine: str) -> str:
        self._until_done(lambda: self.dep.ctl("fail", spine))
        time.sleep(1.0)
        tries = self._until_done(lambda: self.dep.ctl("recover", spine))
        self.dep.wait_switch(spine, failed=False)
        return f"distcache-ctl fail {spine}, recover {spine}" + (f" (recover tried {tries} times)" if tries > 1 else "")

    def spine_dp_dead(self, spine: str, hold: float = 1.0) -> str:
        """The spine's data plane dies for ``hold`` s while its P4Runtime server and agent answer: every
        DistCache packet to and from it is dropped on both ends of its links (coherence, requests, replies
        and the controller's probes alike).  Leaves route around it within tens of milliseconds; a death
        past the controller's 0.5 s of unanswered probes is failed over, and the controller must recover
        the spine by itself once its probes are answered again.  Takes effect only if the injector dropped
        packets while the spine was dead."""
        if self.packets is None:
            raise DeploymentError("no packet injector in this cell")
        ports = switch_ports(self.dep, spine)
        ctl = self.dep.controller.ctl  # type: ignore[union-attr]
        failovers = ctl.status().failovers
        self.packets.configure(DP_DEAD, ports=ports)
        try:
            # read after the drop began and before it ends: every packet counted between is the death's
            before = self.packets.counters(ports).dropped
            time.sleep(hold)
            dropped = self.packets.counters(ports).dropped - before
        finally:
            self.packets.configure(self.background, ports=ports)
        self.dp_dropped += dropped
        # the controller reads the leaves' probe counters every 50 ms: a death it caught is declared by now
        deadline, declared = time.monotonic() + DP_DETECT_S, False
        while not declared and time.monotonic() < deadline:
            st = ctl.status()
            declared = st.failovers > failovers or {s.name: s for s in st.switches}[spine].failed
            if not declared:
                time.sleep(0.1)
        if declared:
            self.dep.wait_switch(spine, failed=False)
        if dropped <= 0:
            links = f"{spine} was failed over, but its links" if declared else f"{spine}'s links"
            raise DeploymentError(f"{links} carried no DistCache packet in {hold:.2f} s")
        return f"{spine}'s data plane dead for {hold:.2f} s ({dropped} DistCache packets dropped); " + (
            "failed over by the controller and recovered by itself"
            if declared
            else "forwarding again before the controller failed it over"
        )

    @staticmethod
    def _until_done(command: Callable[[], str], timeout: float = 60.0) -> int:
        """Run an operator command until it succeeds, as an operator would (another fault may be under way:
        recover refuses while the switch's agent is restarting, saying so); returns how many tries it took."""
        deadline, tries = time.monotonic() + timeout, 0
        while True:
            tries += 1
            try:
                command()
                return tries
            except DeploymentError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def controller_restart(self, _: str) -> str:
        self.dep.kill_controller()
        time.sleep(0.5)
        self.dep.start_controller()
        return "controller killed (SIGKILL) and started again"

    def controller_mid_failover(self, spine: str) -> str:
        self.procs.stop(spine)
        time.sleep(random.uniform(0.2, 0.6))  # while the controller detects the crash and moves buckets
        self.dep.kill_controller()
        self.dep.start_controller()
        self.dep.wait_switch(spine, failed=True)
        self.procs.start(spine)
        self.dep.wait_switch(spine, failed=False)
        return f"{spine} killed, controller killed during its failover, restarted: {spine} failed over and back"

    def mechanism_change(self, away: str) -> str:
        self._until_done(lambda: self.dep.ctl("mechanism", away))
        time.sleep(1.5)
        self._until_done(lambda: self.dep.ctl("mechanism", self.mechanism))
        return f"mechanism {away} and back to {self.mechanism}"

    # -- processes ------------------------------------------------------------------------------
    def _agent_restart(self, name: str, stateless: bool) -> str:
        self.dep.kill_agent(name)
        if stateless:
            (self.dep.run_dir / f"agent-{name}.state.json").unlink(missing_ok=True)
        time.sleep(0.3)
        self.dep.restart_agent(name)
        st = self.dep.controller.agent_status()[name]  # type: ignore[union-attr]
        # without its state the agent must raise the cache epoch (a switch that came up empty meanwhile is
        # raised too)
        if stateless and st.epoch_raises < 1:
            raise DeploymentError(f"agent of {name} restarted without its state but did not raise the epoch")
        return f"agent of {name} killed, restarted {'without' if stateless else 'with'} its state file" + (
            f" (cache epoch {st.cache_epoch})" if stateless else ""
        )

    def agent_restart(self, name: str) -> str:
        return self._agent_restart(name, stateless=False)

    def agent_restart_stateless(self, name: str) -> str:
        return self._agent_restart(name, stateless=True)

    def _server(self, name: str) -> Host:
        return next(h for h in self.cluster.servers() if h.name == name)

    def _shim_restart(self, name: str, stateless: bool) -> str:
        h = self._server(name)
        self.dep.kill_shim(name)
        if stateless:
            (self.dep.run_dir / f"shim-{name}.state.json").unlink(missing_ok=True)
        self.dep.start_shim(h)
        link = ShimLink(self.dep.shim_control(h))
        deadline = time.monotonic() + 20
        while not self._view_known(link):
            if time.monotonic() > deadline:
                raise DeploymentError(f"the restarted shim {name} did not get the controller's view within 20 s")
            time.sleep(0.05)
        return f"shim {name} killed, restarted {'without' if stateless else 'with'} its state file, view back"

    @staticmethod
    def _view_known(link: ShimLink) -> bool:
        try:
            return bool(link.stats()["view_known"])
        except ShimUnavailableError:  # its control socket is not accepting yet
            return False

    def shim_restart(self, name: str) -> str:
        return self._shim_restart(name, stateless=False)

    def shim_restart_stateless(self, name: str) -> str:
        return self._shim_restart(name, stateless=True)

    def redis_kill(self, name: str) -> str:
        h = self._server(name)
        link = ShimLink(self.dep.shim_control(h))
        before = link.stats()["redis_restarts"]
        self.dep.kill_redis(name)
        self.dep.start_redis(h)
        deadline = time.monotonic() + 10
        while link.stats()["redis_restarts"] == before:
            if time.monotonic() > deadline:
                raise DeploymentError(f"the shim of {name} did not notice its redis-server restart")
            time.sleep(0.05)
        return f"redis-server of {name} killed (-9) and restarted; the shim resynchronized"

    def hot_shift(self, _: str) -> str:
        """Another client makes a few other keys very hot for a while: the caches take them in (evicting the
        history's keys where those are colder).  Took effect if the caches inserted or evicted keys meanwhile."""
        self.shifts += 1
        before = self._churn()
        host = self.cluster.client(0, self.cluster.clients_per_rack - 1)
        cfg = {
            "keys": 6,
            "zipf": 0.0,
            "read_ratio": 1.0,
            "duration": 4.0,
            "load_keys": 6,
            "concurrency": 24,
            "prefix": f"shift{self.shifts}-",
            "seed": self.shifts,
        }
        for _line in self.dep.bench(host, cfg):
            pass
        after = self._churn()
        # an agent restarted meanwhile starts its counters again: count the agents that answered both times
        inserted = sum(max(0, after[n][0] - before[n][0]) for n in after.keys() & before.keys())
        evicted = sum(max(0, after[n][1] - before[n][1]) for n in after.keys() & before.keys())
        if inserted <= 0 and evicted <= 0:
            raise DeploymentError("6 other keys were made hot but no cache inserted or evicted anything")
        return f"6 other keys made hot: {inserted} insertions, {evicted} evictions"

    def _churn(self) -> dict[str, tuple[int, int]]:
        """Keys each answering agent inserted from reports and evicted, so far (an agent another fault is
        restarting is left out)."""
        out = {}
        for name, agent in self.dep.controller.agents.items():  # type: ignore[union-attr]
            try:
                st = agent.status()
            except Exception:  # noqa: BLE001 - not answering right now
                continue
            out[name] = (st.auto_inserted, st.evicted)
        return out


def _lane(faults: Faults, lane: list[Fault], t0: float, stop: threading.Event) -> None:
    for f in lane:
        if stop.wait(max(0.0, t0 + f.at - time.monotonic())):
            return
        faults.apply(f)


def _stop_clients_after(lanes: list[threading.Thread], not_before: float, stop_file: Path) -> None:
    """Tell the history recorder to stop once every lane has run its faults, and not before ``not_before``."""
    for t in lanes:
        t.join()
    time.sleep(max(0.0, not_before - time.monotonic()))
    stop_file.touch()


def _bursts(pf: PacketFaults, ports: list[str], seed: int, stop: threading.Event) -> None:
    rng = random.Random(seed)
    while not stop.wait(BURST_EVERY * rng.uniform(0.5, 1.5)):
        pf.start_burst(BURST_LEN, ports=[rng.choice(ports)])


def run_cell(
    mechanism: str,
    run_dir: Path,
    target: str,
    duration: float,
    clients: int,
    seed: int,
    per_kind: int,
    broken: bool = False,
    keys: int = 16,
) -> Cell:
    """One deployment under ``mechanism``, one recorded history under the seed's schedule, one check."""
    cell = Cell(mechanism)
    cluster = Cluster(**CELL, mechanism=Mechanism[mechanism.upper()])
    shim_args = ["--unsafe-ack-before-invalidate", "0.05"] if broken else []
    with Deployment(cluster, target=target, run_dir=run_dir / mechanism, shim_args=shim_args) as dep:
        history, html = dep.run_dir / "history.jsonl", dep.run_dir / "history.html"
        # short timeouts, many retries: a lost packet costs a client 0.1 s, retried writes are frequent, and a
        # write gives up (an unknown outcome, the checker's costliest case) only after 15 s without an answer: a
        # shim restarted without its state waits for the controller's down-set before a write to a key a dead
        # spine may hold completes, and with the controller restarting too that took 10 s (seed 7401): 23 writes
        # of one key given up after 3 s each were more open ends than the checker could hold in 24 GB
        # the clients run for ``duration`` and on until every lane of the schedule has finished (a fault that
        # waits for its effect can push a lane's last faults past ``duration``): a fault counts only while
        # they run; never beyond OVERRUN x duration
        stop_file = dep.run_dir / "clients.stop"
        stop_file.unlink(missing_ok=True)
        cfg = {
            "keys": keys,
            "clients": clients,
            "duration": duration * OVERRUN,
            "read_ratio": 0.75,
            "prefix": "h",
            "seed": seed,
            "timeout": 0.1,
            "retries": 149,
            "stop_file": str(stop_file),
            "rate": CLIENT_RATE,
        }
        host = dep.host(cluster.client(0, 0).name)
        proc = host.popen(
            [
                sys.executable,
                "-m",
                "dcnet.history_runner",
                "--cluster",
                str(dep.cluster_path),
                "--config",
                json.dumps(cfg),
                "--out",
                str(history),
            ],
            stdout=subprocess.PIPE,
            stderr=open(dep.run_dir / "history.err", "wb"),  # noqa: SIM115 - the child holds it
            text=True,
        )
        running, stop = threading.Event(), threading.Event()
        ports = fabric_ports(dep)
        with PacketFaults(ports) as pf:
            threads: list[threading.Thread] = []
            if not broken:
                pf.configure(PACKETS)
                sched: Schedule = draw(
                    seed,
                    duration,
                    spines=[cluster.spine(i).name for i in range(cluster.spines)],
                    cache_switches=[s.name for s in cluster.switches() if is_cache_switch(s)],
                    servers=[h.name for h in cluster.servers()],
                    mechanism=mechanism,
                    per_kind=per_kind,
                )
                (dep.run_dir / "schedule.json").write_text(
                    json.dumps({"seed": seed, "faults": [vars(f) for f in sched.faults]}, indent=1)
                )
                faults = Faults(dep, mechanism, cell.tally, running, pf, PACKETS)
                t0 = time.monotonic()
                threads = [
                    threading.Thread(target=_lane, args=(faults, sched.lane(lane), t0, stop), daemon=True)
                    for lane in sched.lanes
                ]
                threads.append(threading.Thread(target=_bursts, args=(pf, ports, seed, stop), daemon=True))
            running.set()
            t0 = time.monotonic()
            for t in threads:
                t.start()
            lanes = threads[:-1]  # (the last one is the loss bursts', which runs until stopped)
            threading.Thread(target=_stop_clients_after, args=(lanes, t0 + duration, stop_file), daemon=True).start()
            totals: dict = {}
            assert proc.stdout is not None
            for line in proc.stdout:
                msg = json.loads(line)
                if msg["type"] == "done":
                    totals = msg
                elif int(msg.get("ops", 0)) % 2000 < 400:
                    console.print(
                        f"  {mechanism}: {msg['ops']} ops ({msg['writes']} writes, "
                        f"{msg['unknown']} timed out), {cell.tally.total} faults so far"
                    )
            running.clear()
            stop.set()
            for t in threads:
                t.join(120)
            c = pf.counters()
        if proc.wait() != 0 or not totals:
            raise DeploymentError(f"the history recorder failed; see {dep.run_dir / 'history.err'}")
        if not broken:
            # the background loss is what the injector dropped less what the data-plane deaths dropped
            for kind, n in zip(
                PACKET_KINDS,
                (c.dropped - faults.dp_dropped, c.bursts if c.burst_dropped else 0, c.duplicated, c.reordered),
                strict=True,
            ):
                cell.tally.took_effect(
                    kind,
                    f"{n} DistCache packets" if kind != "loss_burst" else f"{n} bursts, {c.burst_dropped} packets",
                    n,
                )
        (dep.run_dir / "faults.log").write_text(
            "\n".join([*cell.tally.log, "-- not applied --", *cell.tally.failed]) + "\n"
        )
        cell.reads, cell.cached_reads = int(totals.get("reads", 0)), int(totals.get("cached_reads", 0))
        cell.ops, cell.violations, cell.unknown_keys = check(history, html)
        cell.history = history
        if cell.violations:
            cell.html = html
        else:
            html.unlink(missing_ok=True)
    return cell


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dcnet.linearizability", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=("softswitch", "bmv2"), default="softswitch")
    ap.add_argument(
        "--mechanisms",
        default=",".join(MECHANISMS),
        help=f"comma-separated cells to run (default: all: {','.join(MECHANISMS)})",
    )
    ap.add_argument("--seed", type=int, help="schedule seed (default: drawn and printed; give it to replay)")
    ap.add_argument("--duration", type=float, default=80.0, help="seconds of recorded operations per cell")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients")
    ap.add_argument("--per-kind", type=int, default=4, help="scheduled faults of each process kind per cell")
    ap.add_argument("--min-effects", type=int, default=3, help="fail unless every kind took effect this often")
    ap.add_argument("--min-ops", type=int, default=8000, help="fail unless every cell recorded this many operations")
    ap.add_argument(
        "--min-cached",
        type=float,
        default=0.30,
        help="fail unless every caching mechanism served this share of reads from a cache",
    )
    ap.add_argument("--no-control", action="store_true", help="skip the control run (coherence broken on purpose)")
    ap.add_argument("--run-dir", type=Path, help="where histories, HTML and logs go (default runs/<timestamp>)")
    args = ap.parse_args(argv)
    mechanisms = [m.strip() for m in args.mechanisms.split(",") if m.strip()]
    bad = [m for m in mechanisms if m not in MECHANISMS]
    if bad or not mechanisms:
        ap.error(f"--mechanisms: choose from {','.join(MECHANISMS)}, not {','.join(bad) or 'nothing'}")
    for name in ("duration", "clients", "per_kind", "min_effects", "min_ops"):
        if getattr(args, name) < (0 if name in ("per_kind", "min_effects", "min_ops") else 1):
            ap.error(f"--{name.replace('_', '-')} is out of range")
    if os.geteuid() != 0:
        console.print("[red]needs root[/] (Mininet, tc, BPF): run it as root: make linearizability")
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1 << 31)
    print(f"seed={seed}", flush=True)
    run_dir = args.run_dir or new_run_dir()
    console.print(
        f"{len(mechanisms)} cells of {args.duration:.0f} s on {args.target}, {args.clients} clients, "
        f"faults: {', '.join(KINDS)}; run folder {run_dir}"
    )
    cells: list[Cell] = []
    problems: list[str] = []
    try:
        for i, mech in enumerate(mechanisms):
            cell = run_cell(mech, run_dir, args.target, args.duration, args.clients, seed + i, args.per_kind)
            cells.append(cell)
            print(cell.line, flush=True)
            if cell.violations or cell.unknown_keys:
                problems.append(
                    f"{mech}: {cell.violations} violations, {cell.unknown_keys} keys undecided; "
                    f"see {cell.html or cell.history}"
                )
            short = cell.tally.short_of(args.min_effects, kinds_for(mech))
            if short:
                problems.append(
                    f"{mech}: took effect fewer than {args.min_effects} times: {', '.join(short)} "
                    f"(see {run_dir / mech / 'faults.log'})"
                )
            if cell.ops < args.min_ops:
                problems.append(f"{mech}: {cell.ops} operations recorded, fewer than {args.min_ops}")
            if mech != "nocache" and cell.cached_share < args.min_cached:
                problems.append(
                    f"{mech}: {100 * cell.cached_share:.0f}% of reads from a cache, under {100 * args.min_cached:.0f}%"
                )
        print(
            f"ops={sum(c.ops for c in cells)} violations={sum(c.violations for c in cells)} "
            f"faults={sum(c.tally.total for c in cells)}",
            flush=True,
        )
        if not args.no_control:
            control = run_cell(
                "distcache",
                run_dir / "control",
                args.target,
                min(args.duration, 15.0),
                args.clients,
                seed,
                0,
                broken=True,
            )
            print(f"control: ops={control.ops} violations={control.violations}", flush=True)
            if not control.violations:
                problems.append("the control run (writes acknowledged before invalidation) was not caught")
    except (TargetMissingError, DeploymentError, FaultInjectorError) as e:
        console.print(f"[red]error:[/] {e}")
        return 2
    for p in problems:
        console.print(f"[red]{p}[/]")
    if not problems:
        console.print("[green]linearizable under every fault in every mechanism; the broken control run was caught[/]")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
