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
answers again as a new process...), and by what it put at risk: the write-read
pairs a fault could have broken, a write of a key a switch the fault concerns
held valid during it followed by a read of the key routed to that switch
(:mod:`dcnet.at_risk`).  Each cell's history is checked per key by
``build/lincheck`` (tools/lincheck, porcupine) and read by read by the
staleness oracle (:mod:`loadgen.oracle`); histories, and porcupine's HTML
of any violation, stay in the run folder.  Then a control run with coherence
broken on purpose (tests/breaks.py ``ack-before-invalidate``) must be caught by
both.  It prints ``seed=<n>`` first, two lines per mechanism::

    mechanism=<m> ops=<n> violations=<n> stale=<n> wrong=<n> faults=<n> at_risk=<n> reads_cached=<pct>% <kind>=<n> ...
    at_risk mechanism=<m> <kind>=<pairs> ...

and the total line ``ops=<n> violations=<n> stale=<n> wrong=<n> faults=<n> at_risk=<n>`` (then the
control run's ``control: ops=<n> violations=<n> stale=<n> wrong=<n>``).  It exits 0 only if no cell
has a violation, an undecided key or a stale or wrong read, every fault kind took effect at least
``--min-effects`` times in every cell, every cell recorded ``--min-ops``
operations, every caching mechanism served at least ``--min-cached`` of its
reads from a cache, the faults of every cell put at least ``--min-at-risk``
pairs at risk (NoCache's too: its mechanism changes turn caching on for a
while), and the control run was caught.

This module is the command line; one cell is :mod:`dcnet.matrix_cell`, the faults it applies
:mod:`dcnet.matrix_faults`, its result and the thresholds :mod:`dcnet.matrix_result`.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

from rich.console import Console

from dcnet.deploy import DeploymentError, new_run_dir
from dcnet.fault_schedule import KINDS
from dcnet.matrix_cell import MECHANISMS, run_cell
from dcnet.matrix_result import Cell, shortfalls, total_line
from dcnet.netfaults import FaultInjectorError
from dcnet.p4switch import TARGETS, TargetMissingError

console = Console(stderr=True, highlight=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dcnet.linearizability", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=TARGETS, default="softswitch")
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
    ap.add_argument(
        "--min-at-risk",
        type=int,
        default=20,
        help="fail unless the faults of every cell put this many write-read pairs at risk",
    )
    ap.add_argument("--no-control", action="store_true", help="skip the control run (coherence broken on purpose)")
    ap.add_argument("--run-dir", type=Path, help="where histories, HTML and logs go (default runs/<timestamp>)")
    args = ap.parse_args(argv)
    mechanisms = [m.strip() for m in args.mechanisms.split(",") if m.strip()]
    bad = [m for m in mechanisms if m not in MECHANISMS]
    if bad or not mechanisms:
        ap.error(f"--mechanisms: choose from {','.join(MECHANISMS)}, not {','.join(bad) or 'nothing'}")
    for name in ("duration", "clients", "per_kind", "min_effects", "min_ops", "min_at_risk"):
        if getattr(args, name) < (0 if name in ("per_kind", "min_effects", "min_ops", "min_at_risk") else 1):
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
            print(cell.at_risk_line, flush=True)
            problems += shortfalls(cell, run_dir, args.min_effects, args.min_ops, args.min_cached, args.min_at_risk)
        print(total_line(cells), flush=True)
        if not args.no_control:
            control = run_cell(
                "distcache",
                run_dir / "control",
                args.target,
                min(args.duration, 15.0),
                args.clients,
                seed,
                0,
                breaks=("ack-before-invalidate",),
                packet_faults=False,
            )
            print(f"control: ops={control.ops} violations={control.violations} {control.oracle.line}", flush=True)
            what = "the control run (writes acknowledged before invalidation) was not caught by"
            if not control.violations:
                problems.append(f"{what} lincheck")
            if not control.oracle.stale:
                problems.append(f"{what} the oracle")
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
