"""A real Prometheus server (Debian's ``prometheus``) scraping a deployment: ``make up PROMETHEUS=1``, the tests.

The scrape configuration is generated from the cluster file: one job, ``distcache``, whose one target is
the controller's exporter (``metrics_address``), which serves every switch's, shim's and its own series.
Prometheus runs in the root namespace, listens on loopback only, and keeps its data in the run folder.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from distcache.cluster import Cluster
from harness.processes import stop_process, tied_argv

DEFAULT_LISTEN = "127.0.0.1:9090"


class PrometheusError(RuntimeError):
    """Prometheus is missing, did not start, or answered a query with an error."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def scrape_config(cluster: Cluster, interval: float) -> str:
    """prometheus.yml for ``cluster`` (YAML is a superset of JSON: written as JSON, nothing to quote)."""
    if not cluster.metrics_address:
        raise PrometheusError("the cluster serves no metrics (metrics_address is empty); set it, e.g. 127.0.0.1:9464")
    every = f"{max(1, round(interval * 1000))}ms"
    return json.dumps(
        {
            "global": {"scrape_interval": every, "evaluation_interval": every},
            "scrape_configs": [
                {
                    "job_name": "distcache",
                    "scrape_timeout": every,
                    "static_configs": [{"targets": [cluster.metrics_address]}],
                }
            ],
        },
        indent=1,
    )


class Prometheus:
    """One Prometheus server for one deployment; a context manager (stopped on exit)."""

    def __init__(self, cluster: Cluster, run_dir: Path, listen: str | None = None, interval: float = 1.0) -> None:
        self.binary = shutil.which("prometheus")
        if self.binary is None:
            raise PrometheusError("prometheus is not installed: `make deps` installs Debian's prometheus package")
        self.cluster, self.run_dir, self.interval = cluster, run_dir, interval
        self.listen = listen or self._default_listen()
        self.url = f"http://{self.listen}"
        self.config = run_dir / "prometheus.yml"
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def _default_listen() -> str:
        """127.0.0.1:9090, Prometheus' own port, unless something listens there; then a free one."""
        host, port = DEFAULT_LISTEN.split(":")
        with socket.socket() as s:
            if s.connect_ex((host, int(port))) != 0:
                return DEFAULT_LISTEN
        return f"{host}:{free_port(host)}"

    def __enter__(self) -> Prometheus:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> None:
        self.config.write_text(scrape_config(self.cluster, self.interval))
        data = self.run_dir / "prometheus-data"
        with open(self.run_dir / "prometheus.log", "ab") as log:
            self.proc = subprocess.Popen(
                tied_argv(
                    [
                        str(self.binary),
                        f"--config.file={self.config}",
                        f"--storage.tsdb.path={data}",
                        f"--web.listen-address={self.listen}",
                        "--storage.tsdb.retention.time=1d",
                    ]
                ),  # it dies with whoever started it (a killed test run leaves no server behind)
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PrometheusError(
                    f"prometheus exited with code {self.proc.returncode}; see {self.run_dir / 'prometheus.log'}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise PrometheusError(f"prometheus did not get ready in {timeout:.0f} s; see {self.run_dir / 'prometheus.log'}")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None

    def api(self, path: str, **params: str) -> dict:
        """GET /api/v1/<path>; its ``data``, or PrometheusError with the server's error."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
        except (urllib.error.URLError, OSError) as e:
            raise PrometheusError(f"prometheus at {self.url} does not answer: {e}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """An instant query: the result vector (each ``{"metric": {...}, "value": [t, "v"]}``)."""
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        data = self.api("query", **params)
        return data["result"] if isinstance(data["result"], list) else [{"metric": {}, "value": data["result"]}]

    def targets_up(self) -> bool:
        """Whether the exporter's last scrape succeeded."""
        active = self.api("targets")["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)
