"""Bring a whole DistCache deployment up in Mininet, and tear it down cleanly.

A :class:`Deployment` starts, in order: the hosts, the storage hosts each with
one ``redis-server`` and one shim in its namespace (:mod:`dcnet.nodes`), the
switches (softswitch or BMv2 processes attached to the Mininet veths), one agent
per cache switch, then the controller daemon (``python -m controller``), which
configures agents, client leaves and shims, and watches them.  The controller
may stop and start switch processes itself (``distcache-ctl fail/recover``): the
run folder's ``switches.json`` tells it how, and each switch's pid file says
which process runs now.  Everything it starts is stopped on exit — also on
Ctrl-C, SIGTERM or an error — so no process, interface or namespace is left
behind.  Logs (and optional pcaps) of a run land in one run folder.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path
from types import FrameType

import redis
from mininet.link import Link, TCLink
from mininet.log import setLogLevel
from mininet.net import Mininet

from dcnet.errors import DeploymentError, one_line_errors
from dcnet.nodes import ClientHost, FabricHost, StorageHost, redis_socket
from dcnet.operator_view import Operator
from dcnet.p4switch import P4RuntimeSwitch, check_target
from dcnet.sessions import ClientProcess, WorkloadSession
from dcnet.topo import LeafSpineTopo
from distcache.cluster import Cluster, Host, Switch, is_cache_switch
from distcache.hashing import new_key_secret
from distcache.rpc.agent import AgentClient
from distcache.rpc.controller import (
    ControllerClient,
    ControllerRequestError,
    ControllerUnreachableError,
    change_summary,
)
from distcache.rpc.shim import shim_control
from harness import runs
from harness.loopbind import LoopbackCgroup, LoopbindError
from harness.p4c import CompileError, compile_v1model
from harness.ports import ReservedPorts
from harness.processes import (
    Readiness,
    Service,
    SoftirqPriority,
    python_argv,
    read_pid_file,
    stop_process,
    wait_until,
)
from harness.redis import READER_USER, RedisUsers
from harness.switch import BMV2_COMPILER

__all__ = ["REPO", "ClientProcess", "Deployment", "DeploymentError", "WorkloadSession", "new_run_dir"]

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"


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
        if shutil.which(BMV2_COMPILER):  # what is in p4src/ now (harness.p4c), so a run never uses a stale build
            try:
                built = compile_v1model()
            except CompileError as e:
                raise DeploymentError(str(e)) from None
            p4info = run_dir / built.p4info.name
            shutil.copyfile(built.p4info, p4info)  # the run folder keeps what it ran
            return p4info, built.json.read_bytes()
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


class Deployment:
    """One DistCache deployment in Mininet, as a context manager: up on entry, all of it gone on exit.

    The storage hosts run their redis-server and shim (:class:`dcnet.nodes.StorageHost`); the agents and
    the controller run in the root namespace; each is one :class:`harness.processes.Service`, which the
    fault tests kill and start again through the methods below."""

    def __init__(
        self,
        cluster: Cluster,
        target: str = "softswitch",
        run_dir: Path | None = None,
        pcap: bool = False,
        quiet: bool = True,
        switch_args: list[str] | None = None,
        switch_log: str = "events",
        breaks: Sequence[str] = (),
        gateway_options: dict[str, object] | None = None,
    ) -> None:
        """``gateway_options``: more options of every client host's gateway (the fault matrix's timeouts)."""
        check_target(target)
        if not cluster.key_secret:  # every deployment keys its digests by a secret of its own (docs/protocol.md, Keys)
            cluster = replace(cluster, key_secret=new_key_secret())
        self.cluster, self.target, self.pcap, self.switch_log = cluster, target, pcap, switch_log
        self.switch_args = tuple(switch_args or ())  # extra softswitch options (tests: e.g. --egress-loss)
        self.breaks = tuple(breaks)  # tests/breaks.py's deliberate breaks, armed in the shims and the controller
        self.gateway_options = dict(gateway_options or {})
        self.run_dir = run_dir or new_run_dir()
        self._registration: Path | None = None
        self._loopbind: LoopbackCgroup | None = None
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_path = self.run_dir / "cluster.json"
        self.redis_users = RedisUsers.create(self.run_dir)  # every storage Redis's shim and reader users
        self.net: Mininet | None = None
        self.controller: Operator | None = None
        self._controller: Service | None = None
        self._agents: dict[str, Service] = {}
        self._pipeline: tuple[Path, Path] | None = None
        self._generators: list[tuple[str, subprocess.Popen]] = []
        self._clients: list[ClientProcess] = []
        self._old_handlers: dict[int, object] = {}
        self._softirq = SoftirqPriority()  # the kernel's packet delivery while the switches run (harness.processes)
        self._ports = ReservedPorts(cluster.listening_ports())  # no connection takes a listener's port (harness.ports)
        setLogLevel("warning" if quiet else "info")

    # -- addresses of things in the run folder ---------------------------------------------
    def shim_control(self, host: Host) -> str:
        return shim_control(self.run_dir, host.name)

    def redis_socket(self, host: Host) -> Path:
        return redis_socket(self.run_dir, host.name)

    def redis_reader(self, host: Host) -> redis.Redis:
        """A client of ``host``'s Redis logged in as the read-only user (what an operator's redis-cli is)."""
        return redis.Redis(
            unix_socket_path=str(self.redis_socket(host)),
            username=READER_USER,
            password=self.redis_users.reader_password,
        )

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

    @one_line_errors()
    def start(self) -> None:
        # registered while it runs: `make clean` stops what a run whose launcher died recorded, never a live one's
        self._registration = runs.register(self.run_dir)
        self._ports.reserve()
        self.cluster.save(self.cluster_path)
        p4info_path, device_config = pipeline_files(self.target, self.run_dir)
        if self.pcap:
            (self.run_dir / "pcap").mkdir(exist_ok=True)
        if self.target == "bmv2":
            # BMv2's Thrift server listens on every address it can: its processes run in a cgroup that keeps
            # their TCP servers on loopback (harness.loopbind)
            try:
                self._loopbind = LoopbackCgroup(f"dcloopbind-{os.getpid()}")
            except LoopbindError as e:
                raise DeploymentError(f"cannot keep BMv2's Thrift port on loopback: {e}") from None
        switch = partial(
            P4RuntimeSwitch,
            run_dir=str(self.run_dir),
            cgroup=str(self._loopbind.path) if self._loopbind is not None else None,
            target=self.target,
            pcap=self.pcap,
            switch_log=self.switch_log,
            extra_args=self.switch_args,
        )
        self.net = Mininet(
            topo=LeafSpineTopo(cluster=self.cluster),
            switch=switch,
            host=self._host,
            controller=None,
            autoSetMacs=False,
            build=False,
            waitConnected=False,
            link=TCLink if self.cluster.link_mbps else Link,
        )
        self.net.build()  # configures the hosts: storage hosts start their redis-server and shim, clients a gateway
        for h in self.cluster.servers():
            self._storage(h.name).shim.wait_ready()
        for h in self.cluster.clients():
            self.client_host(h.name).gateway.wait_ready()
        self._softirq.raise_()
        self.net.start()  # starts the switch processes
        for sw in self.cluster.switches():
            self.net[sw.name].wait_started()
        config_path = self.run_dir / "device_config.bin"
        config_path.write_bytes(device_config)
        (self.run_dir / "switches.json").write_text(
            json.dumps({sw.name: self.net[sw.name].spec() for sw in self.cluster.switches()}, indent=1)
        )
        self._pipeline = (p4info_path, config_path)
        agents = [sw for sw in self.cluster.switches() if is_cache_switch(sw)]
        for sw in agents:
            self.start_agent(sw, wait=False)
        for sw in agents:
            self._agents[sw.name].wait_ready()
        self._controller = self._python_service(
            "controller",
            "controller",
            {"--switches": self.run_dir / "switches.json"},
            ready=self._controller_answers,
        )
        self.start_controller()
        self.controller = Operator(self.cluster, p4info_path, ControllerClient(self.cluster.controller_address))
        log.info("deployment up in %s", self.run_dir)

    def _host(self, name: str, **params: object) -> FabricHost:
        """Mininet's host constructor: the cluster's storage servers are StorageHosts, its clients ClientHosts."""
        spec = next(h for h in self.cluster.hosts() if h.name == name)
        if spec not in self.cluster.servers():
            return ClientHost(
                name,
                spec=spec,
                run_dir=self.run_dir,
                cluster_path=self.cluster_path,
                gateway_options=self.gateway_options,
                **params,
            )
        return StorageHost(
            name,
            spec=spec,
            run_dir=self.run_dir,
            cluster_path=self.cluster_path,
            appendfsync=self.cluster.redis_appendfsync,
            users=self.redis_users,
            maxmemory=self.cluster.redis_maxmemory,
            policy=self.cluster.redis_maxmemory_policy,
            breaks=self.breaks,
            **params,
        )

    def _python_service(
        self, name: str, module: str, options: dict[str, object], ready: Readiness | None = None
    ) -> Service:
        """An agent or the controller (one command line for both): ``python -m <module>`` with the cluster and
        pipeline files, the shims' folder, and its own state file, log and output in the run folder by ``name``."""
        assert self._pipeline is not None
        p4info_path, config_path = self._pipeline
        state, log_file = self.run_dir / f"{name}.state.json", self.run_dir / f"{name}.log"
        argv = python_argv(
            module,
            {"--cluster": self.cluster_path, **options, "--p4info": p4info_path, "--device-config": config_path,
             "--shim-dir": self.run_dir, "--state-file": state, "--log-file": log_file},
            self.breaks,
        )  # fmt: skip
        return Service(name, argv, out=self.run_dir / f"{name}.out", log=log_file, state_file=state, ready=ready)

    def _controller_answers(self, proc: subprocess.Popen, timeout: float) -> None:
        client = ControllerClient(self.cluster.controller_address)

        def answers() -> bool:
            try:
                client.wait_ready(1.0)
                client.status()
                return True
            except ControllerUnreachableError:
                return False

        try:
            wait_until(answers, proc, timeout, "the controller", "answer", self.run_dir / "controller.log")
        finally:
            client.close()

    @one_line_errors()
    def start_controller(self, timeout: float = 60.0) -> subprocess.Popen:
        """Start the controller daemon (again); returns once its API answers (it has reconciled everything)."""
        assert self._controller is not None
        return self._controller.start(timeout=timeout)

    def kill_controller(self) -> None:
        """Kill the controller daemon at once (SIGKILL): the data plane must not notice."""
        assert self._controller is not None
        self._controller.kill()

    def ctl(self, *argv: str) -> str:
        """Run ``distcache-ctl`` against this deployment as an operator would; its output, or DeploymentError."""
        cmd = [*python_argv("controller.ctl", {"--cluster": self.cluster_path}), *argv]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise DeploymentError(f"distcache-ctl {' '.join(argv)} failed: {res.stderr.strip() or res.stdout.strip()}")
        return res.stdout.strip()

    def operate(self, command: str, switch: str) -> str:
        """Send the request ``distcache-ctl <command> <switch>`` sends (``fail`` or ``recover``) from this
        process, and return the line the command prints; DeploymentError if the controller refuses it.

        For runs that measure the fabric around the change.  Starting the command's own process costs
        ~0.15 CPU-s of Python imports on the two cores the emulated fabric shares, and no scheduling class
        keeps that off the fabric: a ``distcache-ctl --help`` alone, at nice 19 and SCHED_IDLE, took reads
        to 68-101 % of the seconds before, 85 % on average over four (docs/protocol.md, "Measuring an
        operator's `fail`").  A real fabric does not pay for its operator's shell; the request and the
        controller's work are the same."""
        if command not in ("fail", "recover"):
            raise DeploymentError(f"operate: expected fail or recover, got {command!r}")
        if self.controller is None:
            raise DeploymentError("operate: the deployment is not running (start it first)")
        try:
            reply = getattr(self.controller.ctl, command)(switch)
        except (ControllerRequestError, ControllerUnreachableError) as e:
            raise DeploymentError(f"distcache-ctl {command} {switch} failed: {e}") from None
        return change_summary(reply)

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

    # -- storage hosts ----------------------------------------------------------------------
    def client_host(self, name: str) -> ClientHost:
        """Client host ``name`` (its gateway: ``.gateway``, serving on ``.gateway_address``)."""
        assert self.net is not None
        node = self.net[name]
        assert isinstance(node, ClientHost), f"{name} is not a client host"
        return node

    def _storage(self, name: str) -> StorageHost:
        node = self.net[name]  # type: ignore[index]
        assert isinstance(node, StorageHost), f"{name} is not a storage server"
        return node

    @one_line_errors()
    def start_redis(self, h: Host) -> subprocess.Popen:
        """Start the redis-server of storage server ``h`` again (after kill_redis); returns once it answers.
        A restart reloads what its append-only file kept (fsync policy: the cluster's ``redis_appendfsync``)."""
        return self._storage(h.name).redis.start()

    def kill_redis(self, name: str) -> None:
        """Kill the redis-server of storage server ``name`` at once (SIGKILL, like a crash)."""
        self._storage(name).redis.kill()

    @one_line_errors()
    def start_shim(
        self, h: Host, fresh: bool = False, clock_back: bool = False, dedup_memory: int | None = None
    ) -> subprocess.Popen:
        """Start the shim of storage server ``h`` again (after kill_shim); returns once it listens.

        ``fresh`` only when the deployment starts: its switches were just started and cache nothing.
        ``clock_back``: under a wall clock an hour early (the fault matrix's ``shim_clock_back``).
        ``dedup_memory``: its ``--dedup-memory`` in bytes (the fault matrix's ``shim_dedup_full``).
        """
        return self._storage(h.name).start_shim(fresh, clock_back=clock_back, dedup_memory=dedup_memory)

    def kill_shim(self, name: str) -> None:
        """Kill the shim of storage server ``name`` at once (SIGKILL): it forgets which keys are cached."""
        self._storage(name).shim.kill()

    # -- agents -------------------------------------------------------------------------------
    def start_agent(
        self, sw: Switch, p4info_path: Path | None = None, config_path: Path | None = None, wait: bool = True
    ) -> subprocess.Popen:
        """Start (or restart) the agent process of cache switch ``sw``, in the root namespace (without ``wait``,
        return before it is ready: the caller waits for ``self._agents[sw.name]``)."""
        if p4info_path is not None and config_path is not None:
            self._pipeline = (p4info_path, config_path)
        if self._pipeline is None:
            raise DeploymentError("start_agent: the deployment has not written its pipeline files yet")
        record = self._python_service(f"agent-{sw.name}", "agent", {"--switch": sw.name})
        agent = self._agents.setdefault(sw.name, record)
        agent.argv = record.argv  # the pipeline files given last
        return agent.start() if wait else agent.launch()

    def kill_agent(self, name: str) -> None:
        """Kill the agent of cache switch ``name`` at once (SIGKILL: no goodbye to anyone)."""
        self._agents[name].kill()

    @one_line_errors()
    def restart_agent(self, name: str, timeout: float = 30.0) -> None:
        """Start the agent of ``name`` again; returns once the controller has configured it."""
        sw = self.cluster.switch(name)
        proc = self.start_agent(sw)
        client = AgentClient(self.cluster.agent_address(sw))
        try:
            client.wait_ready(timeout)
            wait_until(  # the controller's heartbeat notices the restart
                lambda: client.status().configured,
                proc,
                timeout,
                f"the restarted agent of {name}",
                "get configured by the controller",
                self.run_dir / "controller.log",
            )
        finally:
            client.close()

    # -- clients and workloads ------------------------------------------------------------------
    def _generator(self, host: Host, what: str, argv: list[str], stdin: int) -> subprocess.Popen:
        """A process in ``host``'s namespace that answers in JSON lines on stdout; stderr to ``<what>-<host>.log``."""
        with open(self.run_dir / f"{what}-{host.name}.log", "ab") as err:
            proc = self.net[host.name].popen(  # type: ignore[index]
                argv, stdout=subprocess.PIPE, stderr=err, stdin=stdin, text=True, bufsize=1
            )
        runs.record(self.run_dir, f"{what}-{host.name}", proc.pid)
        self._generators.append((f"{what}-{host.name}", proc))
        return proc

    def bench(self, host: Host, config: dict) -> Iterator[dict]:
        """Run the workload generator in ``host``'s namespace; yield its JSON lines as they come."""
        argv = python_argv("dcnet.bench_runner", {"--cluster": self.cluster_path, "--config": json.dumps(config)})
        proc = self._generator(host, "bench", argv, subprocess.DEVNULL)
        assert proc.stdout is not None
        for line in proc.stdout:
            yield json.loads(line)
        if proc.wait() != 0:
            raise DeploymentError(
                f"the workload on {host.name} exited with code {proc.returncode}; "
                f"see {self.run_dir / f'bench-{host.name}.log'}"
            )

    def workload_session(self, host: Host, timeout: float = 0.5, retries: int = 3) -> WorkloadSession:
        """A workload generator process in ``host``'s namespace that runs one workload per call."""
        options = {"--cluster": self.cluster_path, "--serve": None, "--timeout": timeout, "--retries": retries}
        proc = self._generator(host, "workload", python_argv("dcnet.bench_runner", options), subprocess.PIPE)
        return WorkloadSession(proc, self.run_dir / f"workload-{host.name}.log")

    def client(self, host: Host | None = None) -> ClientProcess:
        """A client process on ``host`` (default: the first client)."""
        host = host or self.cluster.client(0, 0)
        cp = ClientProcess(self.net[host.name], self.cluster_path, self.run_dir / f"client-{host.name}.log")
        self._clients.append(cp)
        return cp

    def host(self, name: str) -> object:
        return self.net[name]

    def pids_by_role(self) -> dict[str, list[int]]:
        """The live processes of this deployment by role, for an account of where the host's CPU goes (make
        emulate): shims, redis-servers, switches (by their pid files: a restarted one counts), agents, the
        controller, and the workload generators and clients in the client hosts."""
        roles: dict[str, list[int]] = {r: [] for r in ("shims", "redis", "switches", "agents", "controller", "clients")}
        if self.net is None:
            return roles

        def add(role: str, proc: subprocess.Popen | None) -> None:
            if proc is not None and proc.poll() is None:
                roles[role].append(proc.pid)

        for h in self.cluster.servers():
            node = self._storage(h.name)
            add("redis", node.redis.proc)
            add("shims", node.shim.proc)
        for svc in self._agents.values():
            add("agents", svc.proc)
        add("controller", self._controller.proc if self._controller is not None else None)
        for _, proc in self._generators:
            add("clients", proc)
        for cp in self._clients:
            add("clients", cp.proc)
        for sw in self.cluster.switches():
            if (record := read_pid_file(self.net[sw.name].pid_file)) is not None:
                roles["switches"].append(record[0])
        return roles

    @property
    def _procs(self) -> list[tuple[str, subprocess.Popen]]:
        """(name, process) of every process this deployment holds now (the teardown test checks each ends)."""
        storage = [self._storage(h.name) for h in self.cluster.servers()] if self.net is not None else []
        services = [*(s for h in storage for s in (h.redis, h.shim)), *self._agents.values(), self._controller]
        return [(s.name, s.proc) for s in services if s is not None and s.proc is not None] + self._generators

    def stop(self) -> None:
        """Stop everything this deployment started; safe to call twice."""
        for cp in self._clients:
            cp.close()
        self._clients.clear()
        if self.controller is not None:
            self.controller.close()
            self.controller = None
        for _, proc in reversed(self._generators):
            stop_process(proc)
        self._generators.clear()
        if self._controller is not None:
            self._controller.stop()  # first: it would take the agents' exits for failures
        with ThreadPoolExecutor(max(1, len(self._agents))) as pool:  # each waits for its exit: all at once
            list(pool.map(Service.stop, self._agents.values()))
        if self.net is not None:
            try:
                self.net.stop()  # the storage hosts stop their shim and redis-server
            finally:
                self.net = None
        self._softirq.restore()
        self._ports.restore()
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._old_handlers.clear()
        if self._loopbind is not None:
            self._loopbind.close()
            self._loopbind = None
        if self._registration is not None:
            runs.unregister(self._registration)
            self._registration = None
