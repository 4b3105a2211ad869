"""Deliberate breaks of the coherence guarantees, to show that the checks catch each of them.

No command line or configuration of the system reaches these: a break is armed only by running a service
through this file, which the tests do (and the fault matrix's control run, whose point is to be caught)
by giving a deployment ``breaks`` (``harness.processes.python_argv``)::

    python tests/breaks.py BREAK[,BREAK...] MODULE [ARGS...]

runs ``python -m MODULE ARGS...`` with every named break that lives in MODULE armed (the others are for
another service of the same deployment and are ignored here).  Each break patches the real code at one
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

The same launcher also runs a service under a *condition*: no break, but an environment the service must
survive, which the fault matrix imposes on a restart:

``clock-back`` (shim)
    the wall clock reads an hour earlier than it is (``time.time``, ``time.time_ns``): a clock stepped
    back across a restart.  The shim's coherence numbers must still be newer than its earlier lives'.
"""

from __future__ import annotations

import asyncio
import logging
import runpy
import sys
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("breaks")

ACK_EARLY_S = 0.05


def ack_before_invalidate() -> None:
    from shim.phases import Phases

    real = Phases.invalidate
    pending: set[asyncio.Task] = set()

    async def late(coro: object) -> None:
        await asyncio.sleep(ACK_EARLY_S)
        await coro  # type: ignore[misc]

    async def invalidate(  # noqa: ANN202
        self,  # noqa: ANN001
        key: bytes,
        seq: int,
        paths: list[int],
        tag: tuple[int, int] | None = None,
        name: bytes = b"",
    ):
        if tag is not None or not paths:  # a populate, or nothing to invalidate: as it is
            return await real(self, key, seq, paths, tag, name)
        task = asyncio.ensure_future(late(real(self, key, seq, paths, tag, name)))
        pending.add(task)
        task.add_done_callback(pending.discard)
        return list(paths)  # "acknowledged" before anything was sent

    Phases.invalidate = invalidate  # type: ignore[method-assign]


def skip_one_invalidate() -> None:
    from shim.view import CacheView

    real = CacheView.paths

    def paths(self: CacheView, key: bytes) -> list[int]:
        ends = real(self, key)
        kept = [e for e in ends if e != min(self.spine_ids)]
        return kept or ([self.leaf_id] if ends else [])

    CacheView.paths = paths  # type: ignore[method-assign]


def reuse_seq() -> None:
    from shim.coherence import Coherence

    real = Coherence.next_seq
    first: dict[int, int] = {}

    def next_seq(self: Coherence) -> int:
        return first.setdefault(id(self), real(self))

    Coherence.next_seq = next_seq  # type: ignore[method-assign]


def no_flush_on_recover() -> None:
    from controller.failover import Failover

    def flush(_self: Failover, sw: object) -> None:
        log.warning("%s: NOT flushed before it serves again (tests/breaks.py no-flush-on-recover)", sw.name)  # type: ignore[attr-defined]

    Failover._flush = flush  # type: ignore[method-assign]


CLOCK_BACK_S = 3600.0


def clock_back() -> None:
    import time

    real, real_ns = time.time, time.time_ns
    time.time = lambda: real() - CLOCK_BACK_S  # type: ignore[assignment]
    time.time_ns = lambda: real_ns() - int(CLOCK_BACK_S * 1e9)  # type: ignore[assignment]


CONDITIONS: dict[str, tuple[str, Callable[[], None]]] = {
    "clock-back": ("shim", clock_back),
}

BREAKS: dict[str, tuple[str, Callable[[], None]]] = {
    "ack-before-invalidate": ("shim", ack_before_invalidate),
    "skip-one-invalidate": ("shim", skip_one_invalidate),
    "reuse-seq": ("shim", reuse_seq),
    "no-flush-on-recover": ("controller", no_flush_on_recover),
}


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit(f"usage: python {Path(__file__).name} BREAK[,BREAK...] MODULE [ARGS...]; breaks: {', '.join(BREAKS)}")
    names, module, rest = argv[0].split(","), argv[1], argv[2:]
    armed = {**BREAKS, **CONDITIONS}
    unknown = [n for n in names if n not in armed]
    if unknown:
        sys.exit(f"unknown break(s) {', '.join(unknown)}; choose from {', '.join(armed)}")
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # the repository (not tests/), wherever this runs from
    for name in names:
        where, arm = armed[name]
        if where == module:
            arm()
            print(f"breaks: {name} armed in {module}", file=sys.stderr, flush=True)
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
