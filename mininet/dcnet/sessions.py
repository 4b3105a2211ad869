"""Processes in a client host that the deployment drives by JSON lines: a client-library process
(:mod:`dcnet.client_runner`) and a workload generator (:mod:`dcnet.bench_runner` ``--serve``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from dcnet.errors import DeploymentError
from harness import runs
from harness.processes import python_argv, stop_process


class ClientProcess:
    """A client-library process inside a client host's namespace, driven by JSON lines.

    See :mod:`dcnet.client_runner` for the operations it accepts.
    """

    def __init__(self, host: object, cluster_path: Path, log_path: Path) -> None:
        self.name = host.name  # type: ignore[attr-defined]
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in close()
        self.proc = host.popen(
            python_argv("dcnet.client_runner", {"--cluster": cluster_path}),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
        )
        runs.record(log_path.parent, f"client-{self.name}", self.proc.pid)

    def call(self, op: str, key: str | None = None, value: str | None = None, **extra: object) -> dict:
        req = {"op": op, "key": key, "value": value, **extra}
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise DeploymentError(f"client process on {self.name} died; see its log")
        return json.loads(line)

    def get_first_path(self, key: str, tries: int = 5) -> dict:
        """A GET answered on its first attempt, the path the routing under test picked.

        A reply to a retry says nothing about that path (attempt 1 goes to the other cache, later
        ones to the server), and on an emulation host starved of CPU a first attempt can take longer
        than the client's timeout.  Reads again, up to ``tries`` times; the last reply if none was.
        """
        for _ in range(tries):
            r = self.call("get", key)
            if r.get("attempts") == 1:
                return r
        return r

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin
                self.proc.stdin.close()
                self.proc.wait(3)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(3)
        self._log.close()


class WorkloadSession:
    """One generator process (dcnet.bench_runner --serve): ``run(config)`` is one checked workload."""

    def __init__(self, proc: subprocess.Popen, log_path: Path) -> None:
        self.proc, self.log_path = proc, log_path

    def run(
        self,
        config: dict,
        on_second: Callable[[dict], None] | None = None,
        on_line: Callable[[dict], None] | None = None,
    ) -> dict:
        """The workload's report (loadgen.workload.Report as a dict); ``on_second`` is called with each
        second's message, ``on_line`` with every message before the report (``load`` ones too)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(config) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            msg = json.loads(line)
            if msg["type"] == "report":
                return msg
            if on_line is not None:
                on_line(msg)
            if msg["type"] == "second" and on_second is not None:
                on_second(msg)
        raise DeploymentError(f"the workload generator exited ({self.proc.wait()}); see {self.log_path}")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        stop_process(self.proc)
