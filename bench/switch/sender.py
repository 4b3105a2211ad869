"""The sender: ``build/pktsend`` (tools/pktsend/pktsend.c, built by ``make deps``), a compiled process in the
namespace that offers one prebuilt frame on an AF_PACKET socket, a batch of frames per ``sendmmsg``, paced or
as fast as it can; the bed asks it one request at a time over its stdin and reads its answer from its stdout.

Why compiled: the Python sender it replaces wrote one frame per system call and topped out near half a million
frames a second on a slow core, below what the kernel target forwards, so that target's figures were the
sender's.  The frame stays built in Python (bench/switch/frames.py, distcache/wire.py); the sender gets it as
hex with each request.

Where it runs: pinned to core 0 (``SENDER_CPU``) while the namespace steers the receive work of the switch's
input veth to the other cores (bench/switch/namespace.py ``steer_rx``), so a switch that runs in the kernel's
softirq does its work on a core of its own, not inside the sender's system calls, and when it falls behind the
input veth's backlog fills and refuses frames: counted by the kernel (``rx_dropped`` of the input veth) and by
the sender (``errors``), the sign that the switch, not the sender, is the limit.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import dataclass

from bench.switch.config import REPO, SENDER_CPU, SetupError
from harness.processes import tied_argv

PKTSEND = REPO / "build" / "pktsend"


@dataclass
class Sent:
    """A request's answer: frames the kernel took, frames it refused (ENOBUFS), how long the sender ran."""

    sent: int
    errors: int
    seconds: float


class Sender:
    """``build/pktsend`` on one interface (of the namespace the caller is in), pinned to ``SENDER_CPU``."""

    def __init__(self, iface: str) -> None:
        self.iface = iface
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        """Start it; return once its socket is bound (raises SetupError with its words if it could not)."""
        if not os.access(PKTSEND, os.X_OK):
            raise SetupError(f"{PKTSEND.relative_to(REPO)} is missing: run make deps (it compiles tools/pktsend)")
        self.proc = subprocess.Popen(
            tied_argv([str(PKTSEND), self.iface]),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # Ctrl-C goes to the harness, which stops it
        )
        line = self._line()
        self.info = json.loads(line)
        if (os.cpu_count() or 1) > 1:
            os.sched_setaffinity(self.proc.pid, {SENDER_CPU})

    def _line(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            why = self.proc.stderr.read().strip() if self.proc.stderr else ""
            self.proc.wait()
            raise SetupError(f"the sender (pktsend) exited with code {self.proc.returncode}: {why or 'no output'}")
        return line

    def request(self, frame: bytes, rate: float, seconds: float, count: int = 0) -> None:
        """Ask for ``frame`` at ``rate`` frames/s (0: as fast as it can) for ``seconds``, at most ``count``
        frames (0: no limit); returns at once: :meth:`result` waits for the answer."""
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(f"{rate:.0f} {seconds:.6f} {count} {frame.hex()}\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            self._line()  # raises with the sender's own words
            raise

    def result(self) -> Sent:
        """The answer to the last request (blocks until the sender has run it)."""
        return Sent(**json.loads(self._line()))

    def send(self, frame: bytes, rate: float, seconds: float, count: int = 0) -> Sent:
        self.request(frame, rate, seconds, count)
        return self.result()

    def close(self) -> None:
        """End it (its input closed: it exits at once between requests), killed if it lingers."""
        if self.proc is None:
            return
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()
        self.proc = None
