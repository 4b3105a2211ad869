"""Every process the shim benchmark starts (redis-servers, shims, the coherence peer), in one list that is stopped
in reverse order at the end, also after Ctrl-C; children die with the harness (harness.processes)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Sequence

from harness.processes import tied_argv


class Processes:
    """Every process the harness starts, stopped in reverse order by :meth:`close` (also after Ctrl-C)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, subprocess.Popen]] = []

    def popen(self, name: str, argv: Sequence[str], **kw: object) -> subprocess.Popen:
        proc = subprocess.Popen(tied_argv(list(argv)), start_new_session=True, **kw)  # type: ignore[call-overload]
        self.items.append((name, proc))
        return proc

    def stop(self, proc: subprocess.Popen, grace: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        while self.items:
            _, proc = self.items.pop()
            with contextlib.suppress(Exception):
                self.stop(proc)
