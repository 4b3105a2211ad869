"""A real redis-server on a Unix socket (no TCP port), as the tests, the shim benchmark and every storage
host of dcnet run it: one command line, one readiness check."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from harness.processes import ServiceError


def redis_argv(sock: Path, folder: Path, *, durable: bool = False, appendfsync: str = "everysec",
               name: str = "redis", logfile: Path | None = None) -> list[str]:  # fmt: skip
    """redis-server serving on Unix socket ``sock`` (mode 700), its files in ``folder``: no snapshots; with
    ``durable``, an append-only file (``<name>.aof`` in ``folder``, fsync ``appendfsync``) that a restart
    reloads, else nothing on disk."""
    argv = ["redis-server", "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700", "--save", ""]
    if durable:
        argv += ["--appendonly", "yes", "--appendfsync", appendfsync, "--appenddirname", f"{name}.aof"]
    else:
        argv += ["--appendonly", "no"]
    argv += ["--daemonize", "no", "--dir", str(folder)]
    if logfile is not None:
        argv += ["--logfile", str(logfile)]
    return argv


def wait_for_redis(sock: Path, proc: subprocess.Popen, timeout: float = 10.0, what: str = "redis-server") -> None:
    """Return once the redis-server ``proc`` answers PING on ``sock``; ServiceError (one line) if it exits
    first or does not within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServiceError(f"{what} exited with code {proc.returncode} before serving; see its log")
        if sock.exists():
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(1.0)
                    s.connect(str(sock))
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
        time.sleep(0.05)
    raise ServiceError(f"{what} did not answer on {sock} within {timeout:.0f} s")
