"""Where a shim request's time goes (``--profile DIR``): py-spy on the shim during one load phase, its samples
sorted into categories a reader can act on (wire codec, Redis, UDP, event loop, shim logic)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from bench.pyspy import record_argv
from bench.shim.children import Processes
from bench.shim.config import PROFILE_RATE

CATEGORIES: tuple[tuple[str, Callable[[str, str], bool]], ...] = (
    # (label, predicate on a frame's function name and file as py-spy prints them, e.g. "asyncio/events.py").
    # A sample goes to the first category that any frame of its stack matches: a Redis read that ends in
    # asyncio's stream code is Redis time, an encode called from the read batch is encode time.
    ("wire decode (distcache.wire.decode)", lambda f, p: f == "decode" and p.endswith("distcache/wire.py")),
    (
        "wire encode (distcache.wire.encode + Message.reply)",
        lambda f, p: f in ("encode", "Message.reply") and p.endswith("distcache/wire.py"),
    ),
    ("Redis round trip (redis-py + hiredis, client side)", lambda _f, p: p.startswith("redis/") or "/redis/" in p),
    ("UDP sendto (syscall; loopback delivery included)", lambda f, _p: f.endswith("DatagramTransport.sendto")),
    ("UDP receive + dispatch (recvfrom, on_datagram)", lambda f, _p: f.endswith("DatagramTransport._read_ready")),
    ("epoll wait (idle: nothing ready)", lambda f, _p: f.endswith("Selector.select")),
    ("shim request logic (shim/*)", lambda _f, p: p.startswith("shim/")),
    ("event loop (asyncio scheduling, tasks)", lambda _f, p: p.startswith("asyncio/")),
)


def profiler(procs: Processes, spy: str, pid: int, seconds: float, out: Path) -> Callable[[], subprocess.Popen]:
    """A callable that starts py-spy on the shim for the measured window.

    py-spy pauses the shim for each sample (without that, stacks of a running asyncio loop come out torn),
    which costs the shim a few percent at PROFILE_RATE; ``--threads`` tells the main thread from gRPC's.
    run_load stops it with SIGINT when the window closes; ``-d`` is only a backstop.
    """

    def start() -> subprocess.Popen:
        return procs.popen(
            "py-spy",
            record_argv(spy, pid, out, PROFILE_RATE, seconds),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    return start
