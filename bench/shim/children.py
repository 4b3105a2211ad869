"""Every process the shim benchmark starts (redis-server, the shim, py-spy, spawned helpers), in one list that
is stopped in reverse order at the end, also after Ctrl-C; children die with the harness (harness.processes)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from bench.shim.config import CTX
from harness.processes import tied_argv


def quiet_child() -> None:
    """Children leave Ctrl-C to the harness, which stops them in order (no tracebacks from every process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Processes:
    """Every process the harness starts, stopped in reverse order by :meth:`close` (also after Ctrl-C)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, subprocess.Popen | BaseProcess]] = []

    def popen(self, name: str, argv: Sequence[str], **kw: object) -> subprocess.Popen:
        proc = subprocess.Popen(tied_argv(list(argv)), start_new_session=True, **kw)
        self.items.append((name, proc))
        return proc

    def spawn(self, name: str, target: Callable[..., None], *args: object) -> tuple[BaseProcess, Connection]:
        here, there = CTX.Pipe()
        proc = CTX.Process(target=target, args=(there, *args), name=name, daemon=True)
        proc.start()
        there.close()
        self.items.append((name, proc))
        return proc, here

    def stop(self, proc: subprocess.Popen | BaseProcess, grace: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; the shim exits cleanly on SIGTERM (py-spy/cProfile)."""
        if isinstance(proc, subprocess.Popen):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(grace)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        elif proc.is_alive():
            proc.terminate()
            proc.join(grace)
            if proc.is_alive():
                proc.kill()
                proc.join()

    def close(self) -> None:
        while self.items:
            _, proc = self.items.pop()
            with contextlib.suppress(Exception):
                self.stop(proc)
