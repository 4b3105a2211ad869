"""Bring a whole DistCache deployment up in Mininet, and tear it down cleanly.

A :class:`Deployment` starts, in order: the switches (softswitch or BMv2
processes attached to the Mininet veths), one ``redis-server`` and one shim in
each storage host's namespace, one agent per cache switch, then the
controller daemon (``python -m controller``), which configures agents, client
leaves and shims, and watches them.  The controller may stop and start switch
processes itself (``distcache-ctl fail/recover``): the run folder's
``switches.json`` tells it how, and each switch's pid file says which process
runs now.  Everything it starts is
stopped on exit — also on Ctrl-C, SIGTERM or an error — so no process,
interface or namespace is left behind.  Logs (and optional pcaps) of a run land
in one run folder.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from types import FrameType

from mininet.link import Link, TCLink
from mininet.log import setLogLevel
from mininet.net import Mininet

from dcnet.p4switch import P4RuntimeSwitch, check_target
from dcnet.topo import LeafSpineTopo
from distcache.api import agent_pb2
from distcache.cluster import Cluster, Host, Mechanism, Switch, is_cache_switch
from distcache.hashing import wire_key
from distcache.partition import cache_switches
from distcache.rpc.agent import AgentClient
from distcache.rpc.controller import ControllerClient, ControllerUnreachableError
from harness.redis import redis_argv, wait_for_redis
from p4rt.client import SwitchConnection, load_p4info

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"


class DeploymentError(RuntimeError):
    """The deployment could not be brought up; the message says which part failed."""


def new_run_dir(base: Path | None = None) -> Path:
    base = base or REPO / "runs"
    d = base / time.strftime("%Y%m%d-%H%M%S")
    i = 0
    while d.exists():
        i += 1
        d = base / f"{time.strftime('%Y%m%d-%H%M%S')}-{i}"
    d.mkdir(parents=True)
    return d


def pipeline_files(target: str, run_dir: Path) -> tuple[Path, bytes]:
    """P4Info path and device config for a target.

    softswitch produces its P4Info from its own pipeline description; BMv2 needs
    what ``make build`` compiled with p4c-bm2-ss.
    """
    if target == "bmv2":
        p4c = shutil.which("p4c-bm2-ss")
        if p4c:  # compile what is in p4src/ now, so a run never uses a stale build
            p4info, json_path = run_dir / "distcache.p4info.txtpb", run_dir / "distcache.json"
            res = subprocess.run(
                [
                    p4c,
                    "--arch",
                    "v1model",
                    "-o",
                    str(json_path),
                    "--p4runtime-files",
                    str(p4info),
                    str(REPO / "p4src" / "distcache.p4"),
                ],
                capture_output=True,
                text=True,
            )
            if res.returncode != 0:
                raise DeploymentError(f"p4c-bm2-ss failed on p4src/distcache.p4:\n{res.stderr}")
            return p4info, json_path.read_bytes()
        p4info, json_path = BUILD / "distcache.p4info.txtpb", BUILD / "distcache.json"
        if not (p4info.exists() and json_path.exists()):
            raise DeploymentError(
                f"TARGET=bmv2 needs {json_path} and {p4info}: run `make build` with p4c-bm2-ss on PATH first"
            )
        return p4info, json_path.read_bytes()
    path = run_dir / "distcache.p4info.txtpb"
    res = subprocess.run([sys.executable, "-m", "softswitch.p4info", str(path)], capture_output=True, text=True)
    if res.returncode != 0:
        raise DeploymentError(f"softswitch could not write its P4Info:\n{res.stderr}")
    return path, b""


class ClientProcess:
    """A client-library process inside a client host's namespace, driven by JSON lines.

    See :mod:`dcnet.client_runner` for the operations it accepts.
    """

    def __init__(self, host: object, cluster_path: Path, log_path: Path) -> None:
        self.name = host.name  # type: ignore[attr-defined]
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in close()
        self.proc = host.popen(
            [sys.executable, "-m", "dcnet.client_runner", "--cluster", str(cluster_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
        )

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


class Operator:
    """The controller's API plus direct reads of agents and switches: what the demo and tests inspect.

    Reads only (counters, tables, agent status) and manual cache insertions; every change of
    partitions or switch state goes through the controller.
    """

    def __init__(self, cluster: Cluster, p4info_path: Path, ctl: ControllerClient) -> None:
        self.cluster, self.ctl = cluster, ctl
        self.p4info = load_p4info(p4info_path)
        self.agents = {
            sw.name: AgentClient(cluster.agent_address(sw)) for sw in cluster.switches() if is_cache_switch(sw)
        }
        self.conns = _Readers(self)

    @property
    def buckets(self) -> list[int]:
        return list(self.ctl.partitions().owner)

    def agent_status(self, with_keys: bool = False) -> dict[str, agent_pb2.AgentStatus]:
        return {name: a.status(with_keys) for name, a in self.agents.items()}

    def cache(self, key: str | bytes) -> dict[str, agent_pb2.CachedKey]:
        """Insert ``key`` by hand into every cache switch that should hold it."""
        wkey = wire_key(key)
        now = replace(self.cluster, mechanism=Mechanism[self.ctl.status().mechanism.upper()])  # the operator's
        return {sw.name: self.agents[sw.name].cache(wkey) for sw in cache_switches(now, self.buckets, wkey)}

    def close(self) -> None:
        for a in self.agents.values():
            a.close()
        for c in self.conns.values():
            c.close()
        self.ctl.close()


class _Readers(dict):
    """Read-only P4Runtime sessions by switch name, opened on first use."""

    def __init__(self, op: Operator) -> None:
        super().__init__()
        self.op = op

    def __missing__(self, name: str) -> SwitchConnection:
        sw = self.op.cluster.switch(name)
        conn = SwitchConnection(f"127.0.0.1:{sw.grpc_port}", sw.device_id, name=name)
        conn.use_p4info(self.op.p4info)
        self[name] = conn
        return conn


class WorkloadSession:
    """One generator process (dcnet.bench_runner --serve): ``run(config)`` is one checked workload."""

    def __init__(self, proc: subprocess.Popen, log_path: Path) -> None:
        self.proc, self.log_path = proc, log_path

    def run(self, config: dict, on_second: Callable[[dict], None] | None = None) -> dict:
        """The workload's report (client_lib.workload.Report as a dict)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(config) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            msg = json.loads(line)
            if msg["type"] == "report":
                return msg
            if msg["type"] == "second" and on_second is not None:
                on_second(msg)
        raise DeploymentError(f"the workload generator exited ({self.proc.wait()}); see {self.log_path}")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        _terminate(self.proc)


class Deployment:
    def __init__(
        self,
        cluster: Cluster,
        target: str = "softswitch",
        run_dir: Path | None = None,
        pcap: bool = False,
        quiet: bool = True,
        shim_args: list[str] | None = None,
        switch_args: list[str] | None = None,
        switch_log: str = "events",
    ) -> None:
        check_target(target)
        self.cluster, self.target, self.pcap, self.switch_log = cluster, target, pcap, switch_log
        self.shim_args = list(shim_args or [])  # extra shim options (tests: e.g. a deliberately broken mode)
        self.switch_args = tuple(switch_args or ())  # extra softswitch options (tests: e.g. --egress-loss)
        self.run_dir = run_dir or new_run_dir()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_path = self.run_dir / "cluster.json"
        self.net: Mininet | None = None
        self.controller: Operator | None = None
        self.controller_proc: subprocess.Popen | None = None
        self._controller_files: tuple[Path, Path] | None = None
        self._procs: list[tuple[str, subprocess.Popen]] = []
        self.agent_procs: dict[str, subprocess.Popen] = {}
        self.shim_procs: dict[str, subprocess.Popen] = {}
        self.redis_procs: dict[str, subprocess.Popen] = {}
        self._agent_files: tuple[Path, Path] | None = None
        self._clients: list[ClientProcess] = []
        self._old_handlers: dict[int, object] = {}
        setLogLevel("warning" if quiet else "info")

    # -- addresses of things in the run folder ---------------------------------------------
    def shim_control(self, host: Host) -> str:
        return f"unix:{self.run_dir / f'shim-{host.name}.sock'}"

    def redis_socket(self, host: Host) -> Path:
        return self.run_dir / f"redis-{host.name}.sock"

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> Deployment:
        self._install_signal_handlers()
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _install_signal_handlers(self) -> None:
        def on_term(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
            raise KeyboardInterrupt(f"signal {signum}")

        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, on_term)

    def start(self) -> None:
        self.cluster.save(self.cluster_path)
        p4info_path, device_config = pipeline_files(self.target, self.run_dir)
        if self.pcap:
            (self.run_dir / "pcap").mkdir(exist_ok=True)
        topo = LeafSpineTopo(cluster=self.cluster)
        switch = partial(
            P4RuntimeSwitch,
            run_dir=str(self.run_dir),
            target=self.target,
            pcap=self.pcap,
            switch_log=self.switch_log,
            extra_args=self.switch_args,
        )
        self.net = Mininet(
            topo=topo,
            switch=switch,
            controller=None,
            autoSetMacs=False,
            build=False,
            waitConnected=False,
            link=TCLink if self.cluster.link_mbps else Link,
        )
        self.net.build()
        for h in self.cluster.hosts():
            self._config_host(h)
        self.net.start()
        for h in self.cluster.servers():
            self._start_storage(h)
        config_path = self.run_dir / "device_config.bin"
        config_path.write_bytes(device_config)
        (self.run_dir / "switches.json").write_text(
            json.dumps({sw.name: self.net[sw.name].spec() for sw in self.cluster.switches()}, indent=1)
        )
        for sw in self.cluster.switches():
            if is_cache_switch(sw):
                self.start_agent(sw, p4info_path, config_path)
        self._controller_files = (p4info_path, config_path)
        self.start_controller()
        self.controller = Operator(self.cluster, p4info_path, ControllerClient(self.cluster.controller_address))
        log.info("deployment up in %s", self.run_dir)

    def start_controller(self, timeout: float = 60.0) -> subprocess.Popen:
        """Start the controller daemon (again); returns once its API answers (it has reconciled everything)."""
        assert self._controller_files is not None
        p4info_path, config_path = self._controller_files
        out = open(self.run_dir / "controller.out", "ab")  # noqa: SIM115 - child keeps its own fd
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controller",
                "--cluster",
                str(self.cluster_path),
                "--p4info",
                str(p4info_path),
                "--device-config",
                str(config_path),
                "--shim-dir",
                str(self.run_dir),
                "--state-file",
                str(self.run_dir / "controller.state.json"),
                "--switches",
                str(self.run_dir / "switches.json"),
                "--log-file",
                str(self.run_dir / "controller.log"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        out.close()
        self._procs.append(("controller", proc))
        self.controller_proc = proc
        client = ControllerClient(self.cluster.controller_address)
        deadline = time.monotonic() + timeout
        try:
            while True:
                if proc.poll() is not None:
                    raise DeploymentError(
                        f"the controller exited with code {proc.returncode}; see {self.run_dir / 'controller.log'}"
                    )
                try:
                    client.wait_ready(1.0)
                    client.status()
                    break
                except ControllerUnreachableError:
                    if time.monotonic() > deadline:
                        raise DeploymentError(
                            f"the controller did not answer within {timeout:.0f}s; see "
                            f"{self.run_dir / 'controller.log'}"
                        ) from None
        finally:
            client.close()
        return proc

    def ctl(self, *argv: str, operator_cpu: bool = False) -> str:
        """Run ``distcache-ctl`` against this deployment as an operator would; its output, or DeploymentError.

        ``operator_cpu``: at the lowest priority (nice 19), as if on the operator's own machine -- a run that
        measures the fabric must not have the command's start-up (~0.15 CPU-s of Python imports) taken from
        the switches and hosts it shares two cores with, as no real fabric pays for its operator's shell."""
        res = subprocess.run(
            [
                *(["nice", "-n", "19"] if operator_cpu else []),
                sys.executable,
                "-m",
                "controller.ctl",
                "--cluster",
                str(self.cluster_path),
                *argv,
            ],
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            raise DeploymentError(f"distcache-ctl {' '.join(argv)} failed: {res.stderr.strip() or res.stdout.strip()}")
        return res.stdout.strip()

    def wait_switch(self, name: str, failed: bool, timeout: float = 30.0) -> None:
        """Wait until the controller reports switch ``name`` failed (``failed``) or back in service and alive."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                st = {s.name: s for s in self.controller.ctl.status().switches}  # type: ignore[union-attr]
            except ControllerUnreachableError:  # restarting: ask again
                time.sleep(0.2)
                continue
            if st[name].failed == failed and (failed or st[name].alive):
                return
            time.sleep(0.1)
        raise DeploymentError(
            f"the controller did not {'detect the failure of' if failed else 'recover'} {name} "
            f"within {timeout:.0f}s; see controller.log in {self.run_dir}"
        )

    def kill_controller(self) -> None:
        """Kill the controller daemon at once (SIGKILL): the data plane must not notice."""
        assert self.controller_proc is not None
        self.controller_proc.kill()
        self.controller_proc.wait(5)

    def _config_host(self, h: Host) -> None:
        node = self.net[h.name]
        intf = node.defaultIntf().name
        node.cmd(f"ethtool -K {intf} tx off rx off >/dev/null 2>&1")
        node.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
        node.cmd("ip link set lo up")
        # one /32 and one route into the fabric; no default route, so nothing leaves the emulation
        node.cmd(f"ip route replace 10.0.0.0/8 via {h.gateway} dev {intf} onlink")
        node.cmd(f"ip neigh replace {h.gateway} lladdr {h.gateway_mac} dev {intf} nud permanent")

    def _popen(self, what: str, node: object, cmd: list[str]) -> subprocess.Popen:
        out = open(self.run_dir / f"{what}.out", "ab")  # noqa: SIM115 - child keeps its own fd
        proc = node.popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # type: ignore[attr-defined]
        out.close()
        self._procs.append((what, proc))
        return proc

    def _start_storage(self, h: Host) -> None:
        self.start_redis(h)
        self.start_shim(h, fresh=True)

    def start_redis(self, h: Host) -> subprocess.Popen:
        """Start (or restart) the redis-server of storage server ``h``, durable by its append-only file
        (fsync policy: the cluster's ``redis_appendfsync``; a restart reloads what the file kept)."""
        node = self.net[h.name]
        sock = self.redis_socket(h)
        sock.unlink(missing_ok=True)
        redis = self._popen(
            f"redis-{h.name}",
            node,
            redis_argv(
                sock,
                self.run_dir,
                durable=True,
                appendfsync=self.cluster.redis_appendfsync,
                name=f"redis-{h.name}",
                logfile=self.run_dir / f"redis-{h.name}.log",
            ),
        )
        wait_for_redis(sock, redis, 10.0, f"redis-server on {h.name}")
        self.redis_procs[h.name] = redis
        return redis

    def kill_redis(self, name: str) -> None:
        """Kill the redis-server of storage server ``name`` at once (SIGKILL, like a crash)."""
        proc = self.redis_procs.pop(name)
        proc.kill()
        proc.wait(5)

    def start_shim(self, h: Host, fresh: bool = False) -> subprocess.Popen:
        """Start (or restart) the shim of storage server ``h`` in its namespace; returns once it listens.

        ``fresh`` only when the deployment starts: its switches were just started and cache nothing.
        """
        node = self.net[h.name]
        sock = self.redis_socket(h)
        control = self.shim_control(h)
        Path(control.removeprefix("unix:")).unlink(missing_ok=True)
        shim = self._popen(
            f"shim-{h.name}",
            node,
            [
                sys.executable,
                "-m",
                "shim",
                "--cluster",
                str(self.cluster_path),
                "--server",
                h.name,
                "--listen",
                h.ip,
                "--redis-url",
                f"unix://{sock}",
                "--control",
                control,
                "--state-file",
                str(self.run_dir / f"shim-{h.name}.state.json"),
                "--log-file",
                str(self.run_dir / f"shim-{h.name}.log"),
                *(["--fresh"] if fresh else []),
                *self.shim_args,
            ],
        )
        _wait_for_path(Path(control.removeprefix("unix:")), shim, 15.0, f"shim on {h.name}")
        self.shim_procs[h.name] = shim
        return shim

    def kill_shim(self, name: str) -> None:
        """Kill the shim of storage server ``name`` at once (SIGKILL): it forgets which keys are cached."""
        proc = self.shim_procs.pop(name)
        proc.kill()
        proc.wait(5)

    def start_agent(
        self, sw: Switch, p4info_path: Path | None = None, config_path: Path | None = None
    ) -> subprocess.Popen:
        """Start (or restart) the agent process of cache switch ``sw``, in the root namespace."""
        if p4info_path is not None and config_path is not None:
            self._agent_files = (p4info_path, config_path)
        if self._agent_files is None:
            raise DeploymentError("start_agent: the deployment has not written its pipeline files yet")
        p4info_path, config_path = self._agent_files
        out = open(self.run_dir / f"agent-{sw.name}.out", "ab")  # noqa: SIM115 - child keeps its own fd
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agent",
                "--cluster",
                str(self.cluster_path),
                "--switch",
                sw.name,
                "--p4info",
                str(p4info_path),
                "--device-config",
                str(config_path),
                "--shim-dir",
                str(self.run_dir),
                "--state-file",
                str(self.run_dir / f"agent-{sw.name}.state.json"),
                "--log-file",
                str(self.run_dir / f"agent-{sw.name}.log"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        out.close()
        self._procs.append((f"agent-{sw.name}", proc))
        self.agent_procs[sw.name] = proc
        return proc

    def kill_agent(self, name: str) -> None:
        """Kill the agent of cache switch ``name`` at once (SIGKILL: no goodbye to anyone)."""
        proc = self.agent_procs.pop(name)
        proc.kill()
        proc.wait(5)

    def restart_agent(self, name: str, timeout: float = 30.0) -> None:
        """Start the agent of ``name`` again; returns once the controller has configured it."""
        sw = self.cluster.switch(name)
        self.start_agent(sw)
        client = AgentClient(self.cluster.agent_address(sw))
        try:
            client.wait_ready(timeout)
            deadline = time.monotonic() + timeout
            while not client.status().configured:  # the controller's heartbeat notices the restart
                if time.monotonic() > deadline:
                    raise DeploymentError(
                        f"the controller did not configure the restarted agent of {name} "
                        f"within {timeout:.0f}s; see controller.log"
                    )
                time.sleep(0.1)
        finally:
            client.close()

    def bench(self, host: Host, config: dict) -> Iterator[dict]:
        """Run the workload generator in ``host``'s namespace; yield its JSON lines as they come."""
        log_path = self.run_dir / f"bench-{host.name}.log"
        with open(log_path, "ab") as err:
            proc = self.net[host.name].popen(
                [
                    sys.executable,
                    "-m",
                    "dcnet.bench_runner",
                    "--cluster",
                    str(self.cluster_path),
                    "--config",
                    json.dumps(config),
                ],
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                text=True,
                bufsize=1,
            )
        self._procs.append((f"bench-{host.name}", proc))
        assert proc.stdout is not None
        for line in proc.stdout:
            yield json.loads(line)
        if proc.wait() != 0:
            raise DeploymentError(f"the workload on {host.name} exited with code {proc.returncode}; see {log_path}")

    def workload_session(self, host: Host, timeout: float = 0.5, retries: int = 3) -> WorkloadSession:
        """A workload generator process in ``host``'s namespace that runs one workload per call."""
        log_path = self.run_dir / f"workload-{host.name}.log"
        with open(log_path, "ab") as err:
            proc = self.net[host.name].popen(
                [
                    sys.executable,
                    "-m",
                    "dcnet.bench_runner",
                    "--cluster",
                    str(self.cluster_path),
                    "--serve",
                    "--timeout",
                    str(timeout),
                    "--retries",
                    str(retries),
                ],
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
        self._procs.append((f"workload-{host.name}", proc))
        return WorkloadSession(proc, log_path)

    def client(self, host: Host | None = None) -> ClientProcess:
        """A client process on ``host`` (default: the first client)."""
        host = host or self.cluster.client(0, 0)
        cp = ClientProcess(self.net[host.name], self.cluster_path, self.run_dir / f"client-{host.name}.log")
        self._clients.append(cp)
        return cp

    def host(self, name: str) -> object:
        return self.net[name]

    def stop(self) -> None:
        """Stop everything this deployment started; safe to call twice."""
        for cp in self._clients:
            cp.close()
        self._clients.clear()
        if self.controller is not None:
            self.controller.close()
            self.controller = None
        for _, proc in reversed(self._procs):
            _terminate(proc)
        self._procs.clear()
        if self.net is not None:
            try:
                self.net.stop()
            finally:
                self.net = None
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._old_handlers.clear()


def _terminate(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def _wait_for_path(path: Path, proc: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DeploymentError(f"{what} exited with code {proc.returncode}; see its log in the run folder")
        if path.exists():
            return
        time.sleep(0.05)
    raise DeploymentError(f"{what} did not create {path} within {timeout:.0f}s")
