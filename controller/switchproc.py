"""Stop and start switch processes, for `fail` and `recover` in an emulated deployment.

The deployment (``dcnet.deploy``) writes ``switches.json`` into its run folder:
per switch, the command line of its data-plane process (softswitch or
``simple_switch_grpc``, attached to the veths of the Mininet topology, which
live in the root namespace and survive the process) and the file holding its
pid.  Stopping kills the process group at once (a crash, not a shutdown);
starting runs the same command again, with the same ports, and records the
new pid, so the deployment's teardown stops whichever process runs last.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def stop_group(proc: subprocess.Popen | None, grace: float = 5.0) -> None:
    """SIGTERM the process group ``proc`` leads (started with start_new_session), SIGKILL it if it lingers."""
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie, not yet reaped, has)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


class SwitchProcessError(RuntimeError):
    """A switch process could not be stopped or started; the message says why."""


class SwitchProcesses:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.specs: dict[str, dict] = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise SwitchProcessError(f"cannot read switch process list {path}: {e}") from None
        self._children: dict[str, subprocess.Popen] = {}  # processes started here, reaped when stopped

    def __contains__(self, name: str) -> bool:
        return name in self.specs

    def pid(self, name: str) -> int | None:
        try:
            return int(Path(self.specs[name]["pid_file"]).read_text())
        except (OSError, ValueError, KeyError):
            return None

    def running(self, name: str) -> bool:
        pid = self.pid(name)
        return pid is not None and pid_alive(pid)

    def stop(self, name: str) -> None:
        """Kill switch ``name``'s process group with SIGKILL and wait until it is gone."""
        pid = self.pid(name)
        if pid is None:
            raise SwitchProcessError(f"no pid recorded for {name} in {self.path}")
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        child = self._children.pop(name, None)
        if child is not None:
            child.wait(5)
        deadline = time.monotonic() + 5
        while self.running(name) and time.monotonic() < deadline:
            time.sleep(0.02)

    def start(self, name: str, timeout: float = 30.0) -> int:
        """Start switch ``name`` again with its recorded command; returns once its gRPC port answers."""
        spec = self.specs[name]
        if self.running(name):
            raise SwitchProcessError(f"{name} is already running (pid {self.pid(name)})")
        with open(spec["log"], "ab") as out:
            proc = subprocess.Popen(spec["cmd"], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        Path(spec["pid_file"]).write_text(str(proc.pid))
        self._children[name] = proc
        host, _, port = spec["grpc"].rpartition(":")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SwitchProcessError(f"{name} exited with code {proc.returncode}; see {spec['log']}")
            try:
                with socket.create_connection((host, int(port)), timeout=0.2):
                    return proc.pid
            except OSError:
                time.sleep(0.05)
        raise SwitchProcessError(f"{name} did not open {spec['grpc']} within {timeout:.0f}s; see {spec['log']}")
