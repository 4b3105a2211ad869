"""One cell of the fault matrix (``make linearizability``): a fresh deployment under one mechanism, one
recorded history while the seed's fault schedule runs in its lanes (and packet faults in the background),
one check of the history."""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from dcnet.at_risk import pairs, window
from dcnet.deploy import Deployment, DeploymentError
from dcnet.fault_schedule import PACKET_KINDS, PROCESS_KINDS, Fault, Schedule, draw
from dcnet.matrix_faults import Faults, fabric_ports
from dcnet.matrix_result import Cell, check, judge
from dcnet.netfaults import FaultConfig, PacketFaults
from distcache.cluster import Cluster, Mechanism, Role, is_cache_switch
from harness import runs
from harness.processes import python_argv
from loadgen.oracle import read_history

console = Console(stderr=True, highlight=False)
MECHANISMS = ("nocache", "partition", "replication", "distcache", "hybrid")
# two client racks: every copy is read through each client rack's leaf (its routes, its fence, its liveness)
CELL = {"spines": 2, "storage_racks": 2, "client_racks": 2, "clients_per_rack": 1, "cache_slots": 4, "hh_threshold": 2}
# background packet faults on every switch port (DistCache packets: requests, replies and coherence)
PACKETS = FaultConfig(match="distcache", drop=0.01, duplicate=0.01, reorder=0.01, reorder_distance=2)
BURST_EVERY = 4.0  # seconds between loss bursts on a random switch port
BURST_LEN = 6  # DistCache packets each burst drops
CLIENT_RATE = 75.0  # requests per second per client at most: a cell's history stays small enough to check
# the clients run on while the fault lanes finish, up to this many times the duration: the spine and controller
# lane's 24 faults each wait for their effect (a restarted controller, a spine failed over and back: 5-20 s on a
# slow machine), and at 2x a kernel-target run left a lane's last fault after the clients stopped (2026-11-28)
OVERRUN = 3.0


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


def _recorders(dep: Deployment, cfg: dict, clients: int) -> list[tuple[str, subprocess.Popen, Path]]:
    """A history recorder on every client host, ``clients`` logical clients dealt over them (ids apart, one
    stop file), a third of each host's speaking RESP through its gateway (redis-py: issue 47), the others
    client_lib: (host, process, its history).  The first one's progress is read as it comes; the others'
    go to ``history-<host>.out``."""
    hosts = dep.cluster.clients()[: max(1, clients)]
    out = []
    for i, h in enumerate(hosts):
        mine = clients // len(hosts) + (i < clients % len(hosts))
        path = dep.run_dir / f"history-{h.name}.jsonl"
        gateway = {"gateway": dep.client_host(h.name).gateway_address, "gateway_clients": mine // 3}
        config = json.dumps({**cfg, **gateway, "clients": mine, "client_id_base": 1000 * i})
        argv = python_argv("dcnet.history_runner", {"--cluster": dep.cluster_path, "--config": config, "--out": path})
        stdout = subprocess.PIPE if i == 0 else open(dep.run_dir / f"history-{h.name}.out", "w")  # noqa: SIM115
        proc = dep.host(h.name).popen(  # type: ignore[attr-defined]
            argv,
            stdout=stdout,
            stderr=open(dep.run_dir / f"history-{h.name}.err", "wb"),  # noqa: SIM115 - the child holds it
            text=True,
        )
        runs.record(dep.run_dir, f"history-{h.name}", proc.pid)
        out.append((h.name, proc, path))
    return out


def _merged(dep: Deployment, procs: list[tuple[str, subprocess.Popen, Path]], first: dict, history: Path) -> dict:
    """Every recorder's totals summed, their histories in one file (one timeline: CLOCK_MONOTONIC)."""
    totals: dict[str, int] = {}
    for i, (name, proc, _) in enumerate(procs):
        done, rc = first, proc.wait()
        if i:
            lines = (dep.run_dir / f"history-{name}.out").read_text().splitlines() if rc == 0 else []
            done = json.loads(lines[-1]) if lines else {}
        if rc != 0 or done.get("type") != "done":
            raise DeploymentError(f"the history recorder on {name} failed; see {dep.run_dir / f'history-{name}.err'}")
        for k, v in done.items():
            if isinstance(v, int):
                totals[k] = totals.get(k, 0) + v
    history.write_text("".join(path.read_text() for _, _, path in procs))
    return totals


def run_cell(
    mechanism: str,
    run_dir: Path,
    target: str,
    duration: float,
    clients: int,
    seed: int,
    per_kind: int,
    breaks: Sequence[str] = (),
    keys: int = 16,
    kinds: tuple[str, ...] = PROCESS_KINDS,
    packet_faults: bool = True,
) -> Cell:
    """One deployment under ``mechanism``, one recorded history under the seed's schedule (``per_kind`` faults
    of each of ``kinds``, and the packet faults unless ``packet_faults`` is off), one check.  ``breaks``:
    tests/breaks.py's deliberate breaks, armed in the deployment (a control run, which must be caught)."""
    cell = Cell(mechanism)
    cluster = Cluster(**CELL, mechanism=Mechanism[mechanism.upper()])
    # the gateways retry as the native clients do (cfg's timeout and retries below)
    gateway_options = {"--timeout": "100ms", "--min-timeout": "20ms", "--retries": 149}
    with Deployment(
        cluster, target=target, run_dir=run_dir / mechanism, breaks=breaks, gateway_options=gateway_options
    ) as dep:
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
            # every path of a register's operations (issue 45): some as commands (EXEC: never answered by a cache,
            # writes with phase 2 from what they left), some puts with a TTL (never cached), two long keys, some
            # values too long for a datagram (the stream path: TCP to the shim, never cached), a counter key
            # written by INCRs and HSETs that make keys hashes (a read then answers WRONGTYPE)
            "exec_ratio": 0.2,
            "ttl_ratio": 0.1,
            "long_keys": 2,
            "stream_ratio": 0.05,
            "counter_keys": 1,
            "hash_ratio": 0.05,
            "prefix": "h",
            "seed": seed,
            "timeout": 0.1,
            "retries": 149,
            "stop_file": str(stop_file),
            "rate": CLIENT_RATE,
        }
        procs = _recorders(dep, cfg, clients)
        proc = procs[0][1]
        running, stop = threading.Event(), threading.Event()
        ports = fabric_ports(dep)
        with PacketFaults(ports) as pf:
            threads: list[threading.Thread] = []
            faults = Faults(dep, mechanism, cell.tally, running, pf, PACKETS if packet_faults else None)
            if packet_faults:
                pf.configure(PACKETS)
            if per_kind:
                sched: Schedule = draw(
                    seed,
                    duration,
                    spines=[cluster.spine(i).name for i in range(cluster.spines)],
                    cache_switches=[s.name for s in cluster.switches() if is_cache_switch(s)],
                    servers=[h.name for h in cluster.servers()],
                    leaves=[s.name for s in cluster.switches() if s.role == Role.STORAGE_LEAF]
                    + [s.name for s in cluster.switches() if s.role == Role.CLIENT_LEAF],
                    clients=[h.name for h in cluster.clients()],
                    mechanism=mechanism,
                    per_kind=per_kind,
                    kinds=kinds,
                )
                (dep.run_dir / "schedule.json").write_text(
                    json.dumps({"seed": seed, "faults": [vars(f) for f in sched.faults]}, indent=1)
                )
                t0 = time.monotonic()
                threads = [
                    threading.Thread(target=_lane, args=(faults, sched.lane(lane), t0, stop), daemon=True)
                    for lane in sched.lanes
                ]
            if packet_faults:
                threads.append(threading.Thread(target=_bursts, args=(pf, ports, seed, stop), daemon=True))
            running.set()
            t0 = time.monotonic()
            for t in threads:
                t.start()
            lanes = threads[:-1] if packet_faults else threads  # (the loss bursts' runs until stopped)
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
        totals = _merged(dep, procs, totals, history)
        if packet_faults:
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
        # the share of reads a cache answered, over the reads whose replies say (client_lib's; a gateway's do not)
        cell.reads = int(totals.get("reads", 0)) - int(totals.get("resp_reads", 0))
        cell.cached_reads = int(totals.get("cached_reads", 0))
        cell.ops, cell.violations, cell.unknown_keys = check(history, html)
        records = read_history(history)
        cell.oracle = judge(records)
        cell.at_risk = pairs(records, [window(cluster, *w) for w in faults.windows])
        cell.history = history
        if cell.violations:
            cell.html = html
        else:
            html.unlink(missing_ok=True)
    return cell
