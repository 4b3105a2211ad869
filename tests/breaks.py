"""Deliberate breaks of the coherence guarantees, to show that the checks catch each of them.

No command line or configuration of the system reaches these.  The shim's are compiled into a build of its
own (``build/distcache-shim-breaks``, Go build tag ``breaks``: shim/breaks_on.go), whose ``--breaks`` flag
arms them; the normal build has no such flag.  The controller's is armed by running it through this file,
which the tests do (and the fault matrix's control run, whose point is to be caught) by giving a deployment
``breaks`` (``harness.processes.shim_argv`` and ``python_argv``)::

    python tests/breaks.py BREAK[,BREAK...] MODULE [ARGS...]

runs ``python -m MODULE ARGS...`` with every named break that lives in MODULE armed (the others are for
another service of the same deployment and are ignored here).  Each break changes the real code at one
place, so what runs is the real service less exactly one step of the protocol:

``ack-before-invalidate`` (shim)
    phase 1 is sent 50 ms after it is reported done: a write is acknowledged while copies are still valid.
``skip-one-invalidate`` (shim)
    no write invalidates the lowest-numbered spine (a path that ended there ends at the storage leaf).
``reuse-seq`` (shim)
    every coherence message carries the same sequence number, so a delayed phase 2 of an older write
    matches a newer write's record and re-validates the older value.
``no-flush-on-recover`` (controller)
    a recovered spine is not flushed before it serves again: copies that writes skipped while it was
    down come back.

The shim's build of breaks also runs it under a *condition*: no break, but an environment it must survive,
which the fault matrix imposes on a restart:

``clock-back`` (shim)
    the wall clock reads an hour earlier than it is: a clock stepped back across a restart.  The shim's
    coherence numbers must still be newer than its earlier lives'.
"""

from __future__ import annotations

import logging
import runpy
import sys
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("breaks")


def no_flush_on_recover() -> None:
    from controller.failover import Failover

    def flush(_self: Failover, sw: object) -> None:
        log.warning("%s: NOT flushed before it serves again (tests/breaks.py no-flush-on-recover)", sw.name)  # type: ignore[attr-defined]

    Failover._flush = flush  # type: ignore[method-assign,assignment]


#: the shim's breaks and condition, compiled into build/distcache-shim-breaks (shim/breaks_on.go)
SHIM_BREAKS = ("ack-before-invalidate", "skip-one-invalidate", "reuse-seq", "clock-back")

BREAKS: dict[str, tuple[str, Callable[[], None]]] = {
    "no-flush-on-recover": ("controller", no_flush_on_recover),
}


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit(f"usage: python {Path(__file__).name} BREAK[,BREAK...] MODULE [ARGS...]; breaks: {', '.join(BREAKS)}")
    names, module, rest = argv[0].split(","), argv[1], argv[2:]
    unknown = [n for n in names if n not in BREAKS and n not in SHIM_BREAKS]
    if unknown:
        sys.exit(f"unknown break(s) {', '.join(unknown)}; choose from {', '.join([*BREAKS, *SHIM_BREAKS])}")
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # the repository (not tests/), wherever this runs from
    for name in names:
        where, arm = BREAKS.get(name, ("shim", lambda: None))
        if where == module:
            arm()
            print(f"breaks: {name} armed in {module}", file=sys.stderr, flush=True)
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
