"""Check the coherence model (model/distcache.m) with Rumur, one configuration at a time.

A configuration is the model with some constants changed: bounds, fault budgets, a seeded bug, a
proposed fix switched off.  For each, this writes the Murphi file, has ``rumur`` generate the C
verifier, compiles it with ``cc`` (cached by content under build/model/), runs it and prints:

    model=<name> states=<n> rules_fired=<n> result=ok|violation|cover-missed|error seconds=<s> [invariant=<name>]

A configuration passes when it gives the result it expects: ``ok`` for the protocol (no invariant
broken in any reachable state, and every ``cover`` goal of the configuration reached: each fault it
allows happens in some trace), or a counterexample breaking a named invariant for a seeded bug or
for the protocol as specified without one of the fixes the model found necessary (model/README.md).

    python -m model.run --suite test                     # tests/unit/test_model.py's configurations
    python -m model.run --suite verify --save runs/verify --show-trace     # make verify
    python -m model.run --list
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from model.config import Config
from model.report import report
from model.suites import SUITES
from model.verifier import check


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", action="append", default=[], help=f"one of {', '.join(SUITES)} (repeatable)")
    ap.add_argument("--config", action="append", default=[], help="one configuration by name (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the configurations and exit")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="CONST=VALUE",
        help="override a constant of the chosen configurations (exploring bounds)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="verifier threads for a configuration that must hold (one expecting a counterexample runs on one)",
    )
    ap.add_argument("--timeout", type=float, help="stop each verifier after this many seconds")
    ap.add_argument(
        "--opt",
        help="C optimisation level for the verifiers (default: -O3 for a configuration "
        "that must hold, whose whole state space is searched; -O1, quicker to build, for one that "
        "must give a counterexample)",
    )
    ap.add_argument("--save", type=Path, help="directory for each configuration's output and counterexample")
    ap.add_argument("--show-trace", action="store_true", help="print each counterexample's steps")
    args = ap.parse_args(argv)
    every = {c.name: c for cs in SUITES.values() for c in cs}
    if args.list:
        print("suites: bugs = the bug configurations of test; verify = bugs + findings + protocol")
        for sname, cs in SUITES.items():
            if sname in ("bugs", "verify"):
                continue
            for c in cs:
                print(f"{sname:9} {c.name:24} expect={c.expect:14} {c.doc}")
        return 0
    chosen: list[Config] = []
    for sname in args.suite:
        if sname not in SUITES:
            print(f"model/run.py: no suite {sname!r} (one of {', '.join(SUITES)})", file=sys.stderr)
            return 2
        chosen += SUITES[sname]
    for cname in args.config:
        if cname not in every:
            print(f"model/run.py: no configuration {cname!r} (see --list)", file=sys.stderr)
            return 2
        chosen.append(every[cname])
    if not chosen:
        chosen = SUITES["test"]
    if args.set:
        bad = [a for a in args.set if "=" not in a]
        if bad:
            print(f"model/run.py: --set wants CONST=VALUE, got {bad[0]!r}", file=sys.stderr)
            return 2
        over = dict(a.split("=", 1) for a in args.set)
        chosen = [replace(c, name=c.name + "+", consts={**c.consts, **over}) for c in chosen]
    failed = 0
    for cfg in chosen:
        # A configuration that expects a counterexample runs on one thread: Rumur's breadth-first search then
        # finds the shortest one, the one named, every time (with two threads the first violation found
        # depends on their timing: bug-no-epoch-bump broke StaleAfterAck before OtherKey in one run).
        threads = args.threads if cfg.expect == "ok" else 1
        res = check(cfg, threads, args.timeout, args.opt or ("-O3" if cfg.expect == "ok" else "-O1"))
        failed += not report(cfg, res, args.show_trace, args.save)
    print(f"model: {len(chosen) - failed}/{len(chosen)} configurations as expected")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
