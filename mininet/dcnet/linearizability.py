"""``make linearizability``: record histories under faults and check them with porcupine.

Two runs on a 2-spine, 2-rack Mininet deployment whose caches are small
(4 slots, detector threshold 2), so the hot keys are inserted and evicted
all the time while clients read and write them:

1. **faulty run** — packet loss on every switch port (``tc netem``), hot keys
   evicted by hand at random on top of the detector's churn, one spine failed
   and recovered through the controller, and one shim killed and restarted;
2. **control run** — no faults, but the shims break coherence on purpose
   (``--unsafe-ack-before-invalidate``: a write to a cached key is
   acknowledged before its copies are invalidated).  The checker must report
   violations here, or it proves nothing about the first run.

Each history is checked per key by ``build/lincheck`` (tools/lincheck), which
also draws porcupine's visualization; histories and HTML stay in the run
folder.  The command prints, for each run in that order, one line::

    ops=<n> violations=<n>

and exits 0 only if the faulty run has no violation and the control run has
at least one.
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
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from controller.shim_link import ShimLink
from dcnet.deploy import REPO, Deployment, DeploymentError, new_run_dir
from dcnet.p4switch import TargetMissing
from distcache.cluster import Cluster
from distcache.hashing import wire_key

console = Console(stderr=True)
LINCHECK = REPO / "build" / "lincheck"
CLUSTER = Cluster(spines=2, storage_racks=2, client_racks=1, cache_slots=4, hh_threshold=2)


@dataclass
class Result:
    ops: int
    violations: int
    unknown_keys: int
    stats: dict
    history: Path
    html: Path

    @property
    def line(self) -> str:
        return f"ops={self.ops} violations={self.violations}"


def check(history: Path, html: Path, timeout: str = "300s") -> tuple[int, int, int]:
    """(ops, violations, keys not decided in time) of a history, by tools/lincheck."""
    if not LINCHECK.exists():
        raise DeploymentError(f"{LINCHECK} is missing: run `make deps` (it builds tools/lincheck with Go)")
    res = subprocess.run([str(LINCHECK), "--history", str(history), "--html", str(html), "--timeout", timeout],
                         capture_output=True, text=True)
    m = re.search(r"ops=(\d+) violations=(\d+)", res.stdout)
    if res.returncode == 2 or m is None:
        raise DeploymentError(f"lincheck failed on {history}: {res.stderr.strip() or res.stdout.strip()}")
    unknown = re.search(r"unknown=(\d+)", res.stdout)
    return int(m.group(1)), int(m.group(2)), int(unknown.group(1)) if unknown else 0


def netem_available() -> bool:
    """Whether this kernel can run `tc netem` (some VMs' kernels ship without sch_netem)."""
    probe = "dcnetem0"
    if subprocess.run(["ip", "link", "add", probe, "type", "veth", "peer", "name", probe + "p"],
                      capture_output=True).returncode != 0:
        return False
    try:
        return subprocess.run(["tc", "qdisc", "add", "dev", probe, "root", "netem", "loss", "1%"],
                              capture_output=True).returncode == 0
    finally:
        subprocess.run(["ip", "link", "del", probe], capture_output=True)


def set_loss(dep: Deployment, percent: float) -> None:
    """Drop ``percent`` % of the packets leaving every switch port with `tc netem` (0: remove it)."""
    for sw in dep.net.switches:  # type: ignore[union-attr]
        for intf in sw.intfList():
            if intf.name == "lo":
                continue
            if percent:
                sw.cmd(f"tc qdisc replace dev {intf.name} root netem loss {percent}%")
            else:
                sw.cmd(f"tc qdisc del dev {intf.name} root 2>/dev/null")


def run_once(name: str, run_dir: Path, target: str, duration: float, clients: int, faults: bool, broken: bool,
             loss: float = 2.0, seed: int = 1) -> Result:
    """One deployment, one recorded history, one check."""
    shim_args = ["--unsafe-ack-before-invalidate", "0.05"] if broken else []
    events: list[str] = []
    netem = faults and netem_available()
    switch_args: list[str] = []
    if faults and loss and not netem:
        if target == "softswitch":
            switch_args = ["--egress-loss", str(loss)]
            events.append(f"{loss}% loss on every switch port (softswitch --egress-loss: this kernel has no tc netem)")
        else:
            events.append("NO packet loss: this kernel has no tc netem and BMv2 cannot lose packets on purpose "
                          "(TARGET=softswitch emulates the loss with --egress-loss); the other faults run")
    with Deployment(CLUSTER, target=target, run_dir=run_dir / name, shim_args=shim_args,
                    switch_args=switch_args) as dep:
        history, html = dep.run_dir / "history.jsonl", dep.run_dir / "history.html"
        # short timeouts, many retries: a lost packet costs a client 0.1 s, and retried writes are frequent
        cfg = {"keys": 8, "clients": clients, "duration": duration, "read_ratio": 0.7, "prefix": f"{name[:4]}",
               "seed": seed, "timeout": 0.1, "retries": 9}
        host = dep.host(CLUSTER.client(0, 0).name)
        proc = host.popen([sys.executable, "-m", "dcnet.history_runner", "--cluster", str(dep.cluster_path),  # type: ignore[attr-defined]
                           "--config", json.dumps(cfg), "--out", str(history)],
                          stdout=subprocess.PIPE, stderr=open(dep.run_dir / "history.err", "wb"), text=True)
        stop = threading.Event()
        if netem:
            set_loss(dep, loss)
            events.append(f"{loss}% loss on every switch port (tc netem)")
        if faults:
            threading.Thread(target=_churn, args=(dep, cfg, stop, events, seed), daemon=True).start()
            threading.Thread(target=_timeline, args=(dep, duration, stop, events), daemon=True).start()
        totals: dict = {}
        assert proc.stdout is not None
        for line in proc.stdout:
            msg = json.loads(line)
            if msg["type"] == "done":
                totals = msg
            else:
                console.print(f"  {name}: {msg['ops']} ops ({msg['writes']} writes, {msg['unknown']} timed out)",
                              highlight=False)
        stop.set()
        if proc.wait() != 0 or not totals:
            raise DeploymentError(f"the history recorder failed; see {dep.run_dir / 'history.err'}")
        if netem:
            set_loss(dep, 0)
        shims = [ShimLink(dep.shim_control(h)).stats() for h in CLUSTER.servers()]
        totals["retransmits"] = sum(s["coherence"]["retransmits"] for s in shims)
        totals["retried_writes_answered_once"] = sum(sum(s["duplicates"].values()) for s in shims)
        events.append(f"shims: {totals['retransmits']} coherence retransmits, {totals['retried_writes_answered_once']}"
                      " client retries of writes answered without applying them again")
        for e in events:
            console.print(f"  {name}: {e}", highlight=False)
        ops, violations, unknown = check(history, html)
        return Result(ops, violations, unknown, totals, history, html)


def _churn(dep: Deployment, cfg: dict, stop: threading.Event, events: list[str], seed: int) -> None:
    """Evict hot keys by hand, at random, on top of the detectors' own insertions and evictions."""
    rng = random.Random(seed)
    keys = [wire_key(f"{cfg['prefix']}{i}") for i in range(cfg["keys"])]
    n = 0
    while not stop.wait(0.3):
        name = rng.choice(sorted(dep.controller.agents))  # type: ignore[union-attr]
        try:
            n += dep.controller.agents[name].evict(rng.choice(keys))  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001 - a switch may be failed at that moment
            pass
    events.append(f"{n} hot keys evicted by hand")


def _timeline(dep: Deployment, duration: float, stop: threading.Event, events: list[str]) -> None:
    """Fail and recover a spine, then restart a shim, while the clients run."""
    server = CLUSTER.server(0, 0)
    plan = [(0.25, "fail", lambda: dep.ctl("fail", "sp0")),
            (0.50, "recover", lambda: dep.ctl("recover", "sp0")),
            (0.65, "shim restart", lambda: _restart_shim(dep, server))]
    t0 = time.monotonic()
    for at, what, action in plan:
        if stop.wait(max(0.0, t0 + at * duration - time.monotonic())):
            return
        t = time.monotonic()
        out = action()
        events.append(f"{what} at {t - t0:.1f} s ({time.monotonic() - t:.2f} s): {out}")


def _restart_shim(dep: Deployment, server: object) -> str:
    dep.kill_shim(server.name)  # type: ignore[attr-defined]
    dep.start_shim(server)  # type: ignore[arg-type]
    link = ShimLink(dep.shim_control(server))  # type: ignore[arg-type]
    deadline = time.monotonic() + 10
    while not link.stats()["view_known"]:
        if time.monotonic() > deadline:
            raise DeploymentError("the restarted shim did not get the controller's view within 10 s")
        time.sleep(0.05)
    return f"shim {server.name} killed and restarted; view back from the controller"  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dcnet.linearizability", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=("softswitch", "bmv2"), default="softswitch")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of recorded operations per run")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients")
    ap.add_argument("--loss", type=float, default=2.0, help="packet loss in percent on every switch port")
    ap.add_argument("--run-dir", type=Path, help="where histories, HTML and logs go (default runs/<timestamp>)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        console.print("[red]needs root[/] (Mininet): run it as root: make linearizability")
        return 2
    run_dir = args.run_dir or new_run_dir()
    try:
        console.print(f"faulty run: {args.duration:.0f} s, {args.clients} clients, 8 hot keys, {args.loss}% loss, "
                      "a spine failed and recovered, a shim restarted, hot keys churned")
        faulty = run_once("faulty", run_dir, args.target, args.duration, args.clients, faults=True, broken=False,
                          loss=args.loss)
        console.print(f"  history {faulty.history}, visualization {faulty.html}")
        print(faulty.line, flush=True)
        console.print("control run: coherence broken on purpose (writes acknowledged before invalidation)")
        control = run_once("control", run_dir, args.target, min(args.duration, 15.0), args.clients, faults=False,
                           broken=True)
        console.print(f"  history {control.history}, visualization {control.html}")
        print(control.line, flush=True)
    except (TargetMissing, DeploymentError) as e:
        console.print(f"[red]error:[/] {e}")
        return 2
    ok = faulty.violations == 0 and faulty.unknown_keys == 0 and control.violations > 0
    console.print("[green]linearizable under faults; the broken control run was caught[/]" if ok else
                  "[red]unexpected: see the histories and visualizations above[/]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
