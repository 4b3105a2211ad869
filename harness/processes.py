"""The processes of a deployment: services started, waited for, stopped and restarted one way; switch
processes stopped and started again for `fail` and `recover` in an emulated deployment.

A :class:`Service` is one long-running process (a storage host's redis-server or shim, an agent, the
controller): its command line, output file, state file and readiness, so dcnet starts and kills each kind
the same way and the fault tests restart any of them with or without its state.

The deployment (``dcnet.deploy``) writes ``switches.json`` into its run folder:
per switch, the command line of its data-plane process (softswitch or
``simple_switch_grpc``, attached to the veths of the Mininet topology, which
live in the root namespace and survive the process) and the file holding its
pid.  Stopping kills the process group at once (a crash, not a shutdown);
starting runs the same command again, with the same ports, and records the
new pid, so the deployment's teardown stops whichever process runs last.
A switch whose data plane outlives its process (the kernel target: its
programs stay on the ports) also records the command that takes that data
plane down (``detach``), run after every kill: stopped means forwarding
nothing, on every target.

A pid file outlives its process: once the switch has exited, the kernel may
give its pid to anything else, and killing that pid's process group would kill
a stranger.  So a pid file records the process's start time too (``PID
START``, start in clock ticks since boot, from ``/proc/PID/stat``), and a
process is signalled only when it is still the one that was started: same
start time, same command line, and the leader of its own process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


def tied_argv(argv: list[str]) -> list[str]:
    """``argv`` run so that it gets SIGTERM when the process starting it dies, even of SIGKILL (util-linux's
    setpriv sets PR_SET_PDEATHSIG, which survives the exec), so a benchmark or test killed mid-run leaves no
    switch, shim or redis behind.  Unlike a ``preexec_fn`` calling prctl it runs no Python between fork and
    exec, which a process with gRPC threads cannot afford (the child hung there, its output ending in
    "epoll_wait error: Bad file descriptor")."""
    return ["setpriv", "--pdeathsig", "TERM", "--", *argv]


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


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot: /proc/PID/stat field 22), None if it is gone.
    With the pid it names one process: a pid handed out again comes with a later start time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])  # fields after "(comm)" start at field 3


#: CPU priority of an emulated switch's process (nice value; hosts' processes keep 0).  A switch stands for
#: hardware that does nothing else: on a 2-core machine running a saturated workload, a switch at the same
#: priority as the load generator, shims and agents waits tens of milliseconds for a CPU now and then (40-80 ms
#: silences of a spine were seen at 0), which no real switch does and which its leaves' liveness would rightly
#: take for a dead spine.
SWITCH_NICE = -10

#: Real-time priority (SCHED_RR) of a softswitch spine's process, and of every switch process of BMv2's fast
#: build, where the host allows it (dcnet.p4switch says which and why).  Nice -10 was not enough for
#: the switches whose silence the leaves measure: with four more switches at -10 on two cores, a spine still
#: waited 25-58 ms for a CPU a few times a minute (a frame's kernel timestamp to its processing), and each
#: wait past 30 ms was a false death at every leaf it served.  Leaves stamp frames with the kernel's receive
#: time, so their own waits cost nothing; a spine's do.  Priority 1, the lowest: above every normal process,
#: below the kernel's own real-time threads, and a spine blocks in poll() whenever it has nothing to do.
SPINE_RT_PRIORITY = 1

#: Nice value of the kernel's softirq threads (ksoftirqd) during a deployment.  Under load the kernel hands
#: packet delivery between veths to them; at their default 0 they waited behind the switches at -10, so
#: a probe and its answer sat 30-40 ms between a leaf and an idle spine.  Restored when the deployment stops.
SOFTIRQ_NICE = -15


def raise_priority(proc: subprocess.Popen, realtime: bool = False) -> None:
    """Give switch process ``proc`` (a session leader: start_new_session) SWITCH_NICE, every thread of it
    (PRIO_PGRP reaches each thread; those it starts later inherit it), and with ``realtime`` (a spine)
    SCHED_RR at SPINE_RT_PRIORITY, every thread it has now (threads inherit the policy of the one that
    starts them).  Called once the switch serves, not when it starts: its start-up (a softswitch's Python
    imports, ~0.5 CPU-s) at nice -10 or a real-time priority took a core from the fabric a restarting switch
    rejoins (a spine's restart in `make run` took reads to 39 % of the seconds before, read p99 309 ms), and
    nothing needs it fast before it serves.  Unprivileged, or where the host grants no real-time time: left
    as it is."""
    with contextlib.suppress(PermissionError, ProcessLookupError):
        os.setpriority(os.PRIO_PGRP, proc.pid, SWITCH_NICE)
    if realtime:
        for tid in _threads(proc.pid):
            with contextlib.suppress(OSError):
                os.sched_setscheduler(tid, os.SCHED_RR, os.sched_param(SPINE_RT_PRIORITY))


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


class SoftirqPriority:
    """SOFTIRQ_NICE for the kernel's ksoftirqd threads from :meth:`raise_` to :meth:`restore` (or while
    entered as a context manager), their old nice values after; as root only, else it changes nothing."""

    def __init__(self) -> None:
        self._old: dict[int, int] = {}

    def raise_(self) -> None:
        for pid in _kernel_threads("ksoftirqd/"):
            with contextlib.suppress(OSError):
                old = os.getpriority(os.PRIO_PROCESS, pid)
                os.setpriority(os.PRIO_PROCESS, pid, SOFTIRQ_NICE)
                self._old.setdefault(pid, old)  # raised twice: the first old value is the one to give back

    def restore(self) -> None:
        """Give back the old nice values (nothing to do when not raised)."""
        for pid, old in self._old.items():
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, pid, old)
        self._old.clear()

    def __enter__(self) -> SoftirqPriority:
        self.raise_()
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


def _kernel_threads(prefix: str) -> list[int]:
    """Pids of the processes whose name (comm) starts with ``prefix``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{entry}/comm").read_text().startswith(prefix):
                    found.append(int(entry))
    return found


def write_pid_file(path: str | Path, pid: int) -> None:
    """Record the process ``pid`` (just started) in ``path`` as ``PID START``."""
    Path(path).write_text(f"{pid} {start_time(pid)}\n")


def read_pid_file(path: str | Path) -> tuple[int, int | None] | None:
    """(pid, start time or None for a file written before start times were recorded), None if unreadable."""
    try:
        fields = Path(path).read_text().split()
        return int(fields[0]), (int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None)
    except (OSError, ValueError, IndexError):
        return None


def is_ours(record: tuple[int, int | None], cmd: list[str]) -> bool:
    """Whether the process a pid file records is still the one started with ``cmd``: it is alive, started
    when recorded, runs ``cmd`` and leads its own process group (what stopping it signals)."""
    if not still_the_same(record):
        return False
    pid = record[0]
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
        return [a.decode(errors="surrogateescape") for a in argv] == list(cmd) and os.getpgid(pid) == pid
    except (OSError, ProcessLookupError):
        return False


def still_the_same(record: tuple[int, int | None]) -> bool:
    """Whether the process a pid file records is still alive and, if its start time was recorded, still
    the process that started then (not another that took the pid since)."""
    pid, started = record
    return pid_alive(pid) and (started is None or start_time(pid) == started)


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


def join_cgroup(cgroup: Path) -> None:
    """Move the calling process into ``cgroup`` (cgroup v2; a ``preexec_fn``: the child joins before it execs)."""
    with open(cgroup / "cgroup.procs", "w") as f:
        f.write("0")


class SwitchProcessError(RuntimeError):
    """A switch process could not be stopped or started; the message says why."""


class SwitchProcesses:
    def __init__(self, path: Path, tied: bool = False) -> None:
        """``tied``: the switches started here die with this process (a test bed); never the controller's,
        whose restart must leave the switches running."""
        self.path, self.tied = path, tied
        try:
            self.specs: dict[str, dict] = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise SwitchProcessError(f"cannot read switch process list {path}: {e}") from None
        shape = {"cmd": list, "pid_file": str, "log": str, "grpc": str}
        if not isinstance(self.specs, dict) or not all(
            isinstance(spec, dict)
            and all(isinstance(spec.get(k), t) for k, t in shape.items())
            and isinstance(spec.get("realtime", False), bool)
            and all(isinstance(a, str) for a in spec["cmd"])
            and isinstance(spec.get("cgroup", ""), str)
            and isinstance(spec.get("detach", []), list)
            and all(isinstance(a, str) for a in spec.get("detach", []))
            for spec in self.specs.values()
        ):
            raise SwitchProcessError(
                f"switch process list {path}: expected an object of switch name -> "
                "{cmd: [args], pid_file, log, grpc, optional realtime: bool, optional detach: [args], "
                "optional cgroup} "
                "(the deployment's switches.json)"
            )
        self._children: dict[str, subprocess.Popen] = {}  # processes started here, reaped when stopped

    def __contains__(self, name: str) -> bool:
        return name in self.specs

    def pid(self, name: str) -> int | None:
        """The pid of switch ``name``'s process if it is still the process its pid file records."""
        record = read_pid_file(self.specs[name]["pid_file"]) if name in self.specs else None
        return record[0] if record is not None and is_ours(record, self.specs[name]["cmd"]) else None

    def running(self, name: str) -> bool:
        """Whether switch ``name``'s process runs.  Not whether its data plane does: see :meth:`data_plane_gone`."""
        return self.pid(name) is not None

    def _detached_mark(self, name: str) -> Path:
        return Path(self.specs[name]["pid_file"] + ".detached")

    def data_plane_gone(self, name: str) -> bool:
        """Whether switch ``name`` forwards nothing any more: its process is gone and, on a target whose data
        plane outlives its process (a spec with a ``detach`` command: ebpf), that data plane was taken down
        since (:meth:`fence`).  A kernel switch killed by anything else keeps forwarding on its old tables."""
        if name not in self.specs or self.running(name):
            return False
        return "detach" not in self.specs[name] or self._detached_mark(name).exists()

    def fence(self, name: str) -> None:
        """Take down the data plane of switch ``name``, whose process is gone: run its spec's ``detach``
        command (nothing to do for a target without one).  SwitchProcessError if the process runs or the
        command fails."""
        detach = self.specs[name].get("detach")
        if detach is None:
            return
        if self.running(name):
            raise SwitchProcessError(f"{name} runs (pid {self.pid(name)}): stop it before taking its data plane down")
        done = subprocess.run(detach, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            reason = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()[-1]
            raise SwitchProcessError(f"{name}: its data plane could not be taken down: {reason}")
        self._detached_mark(name).write_text("")

    def stop(self, name: str) -> None:
        """Kill switch ``name``'s process group with SIGKILL, wait until it is gone, and take down a data
        plane that outlives it (:meth:`fence`): stopped, a switch forwards nothing.

        Only a process that is still the recorded one is signalled (``is_ours``): when the
        switch has exited already, its pid may belong to another process by now."""
        if name not in self.specs or read_pid_file(self.specs[name]["pid_file"]) is None:
            raise SwitchProcessError(f"no pid recorded for {name} in {self.path}")
        pid = self.pid(name)
        child = self._children.pop(name, None)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        if child is not None:
            child.wait(5)
        deadline = time.monotonic() + 5
        while self.running(name) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.fence(name)

    def start(self, name: str, timeout: float = 30.0) -> int:
        """Start switch ``name`` again with its recorded command; returns once its gRPC port answers."""
        spec = self.specs[name]
        if self.running(name):
            raise SwitchProcessError(f"{name} is already running (pid {self.pid(name)})")
        cgroup = spec.get("cgroup")  # the deployment's loopback-bind cgroup (harness.loopbind), if any
        with open(spec["log"], "ab") as out:
            proc = subprocess.Popen(
                tied_argv(spec["cmd"]) if self.tied else spec["cmd"],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=(lambda: join_cgroup(Path(cgroup))) if cgroup else None,
            )
        realtime = spec.get("realtime", False)  # raised once it serves: see raise_priority
        write_pid_file(spec["pid_file"], proc.pid)
        self._detached_mark(name).unlink(missing_ok=True)
        self._children[name] = proc
        try:
            wait_for_port(spec["grpc"], proc, timeout, name, Path(spec["log"]))
        except ServiceError as e:
            raise SwitchProcessError(str(e)) from None
        raise_priority(proc, realtime)
        return proc.pid


class ServiceError(RuntimeError):
    """A service did not come up: it exited first, or did not answer in time; the message is one line."""


def wait_until(
    check: Callable[[], bool], proc: subprocess.Popen, timeout: float, what: str, doing: str, log: Path | None = None
) -> None:
    """Poll ``check`` until it holds; ServiceError if ``proc`` exits first or ``timeout`` s pass.

    Watching the process too turns a service that died at start into an error at once, naming its log,
    rather than a wait that runs out; ``what`` and ``doing`` make the message ("shim on r0s0 did not
    create /x/y.sock within 15 s")."""
    see = f"; see {log}" if log is not None else ""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise ServiceError(f"{what} exited with code {proc.returncode}{see}")
        if check():
            return
        if time.monotonic() > deadline:
            raise ServiceError(f"{what} did not {doing} within {timeout:.0f} s{see}")
        time.sleep(0.05)


def wait_for_path(path: Path, proc: subprocess.Popen, timeout: float, what: str, log: Path | None = None) -> None:
    """Return once ``path`` exists (a service's Unix socket: it listens); ServiceError as wait_until."""
    wait_until(path.exists, proc, timeout, what, f"create {path}", log)


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``host``:``port`` now."""
    try:
        socket.create_connection((host, port), timeout=0.2).close()
    except OSError:
        return False
    return True


def wait_for_port(address: str, proc: subprocess.Popen, timeout: float, what: str, log: Path | None = None) -> None:
    """Return once ``address`` (HOST:PORT: a switch's gRPC server) accepts connections; ServiceError as
    wait_until."""
    host, _, port = address.rpartition(":")
    wait_until(lambda: port_open(host, int(port)), proc, timeout, what, f"open {address}", log)


def stop_process(proc: subprocess.Popen | None, grace: float = 5.0) -> None:
    """SIGTERM ``proc`` (a shutdown: it may flush and close), SIGKILL it if it lingers past ``grace`` s."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


#: runs a service with deliberate breaks of the guarantees armed, for the tests that show the checks catch them
BREAKS_LAUNCHER = Path(__file__).resolve().parents[1] / "tests" / "breaks.py"
#: the storage shim (Go: shim/*.go, built by make build) and the same program with tests/breaks.py's shim breaks
#: compiled in (build tag breaks: its --breaks arms them; the normal build has no such flag)
SHIM_BINARY = Path(__file__).resolve().parents[1] / "build" / "distcache-shim"
SHIM_BREAKS_BINARY = SHIM_BINARY.with_name("distcache-shim-breaks")
#: the Redis-protocol gateway of client hosts (Go: gateway/*.go, built by make build)
GATEWAY_BINARY = SHIM_BINARY.with_name("distcache-gateway")


def python_argv(module: str, options: dict[str, object], breaks: Sequence[str] = ()) -> list[str]:
    """``python -m module --option value ...`` (an option whose value is None is a flag): the command line of a
    service written in Python, run by this interpreter (the virtualenv's, with what it has installed).
    ``breaks``: names of tests/breaks.py, armed where they live in ``module`` (tests only: no command line or
    configuration of the system reaches them)."""
    argv = [sys.executable, "-m", module]
    if breaks:
        argv = [sys.executable, str(BREAKS_LAUNCHER), ",".join(breaks), module]
    for option, value in options.items():
        argv += [option] if value is None else [option, str(value)]
    return argv


def gateway_argv(options: dict[str, object]) -> list[str]:
    """The gateway's command line (an option whose value is None is a flag; a list value: the option repeated)."""
    if not GATEWAY_BINARY.exists():
        raise FileNotFoundError(f"{GATEWAY_BINARY} is not built: run make build")
    argv = [str(GATEWAY_BINARY)]
    for option, value in options.items():
        if value is None:
            argv.append(option)
        elif isinstance(value, list):
            for v in value:
                argv += [option, str(v)]
        else:
            argv += [option, str(value)]
    return argv


def shim_argv(options: dict[str, object], breaks: Sequence[str] = ()) -> list[str]:
    """The shim's command line (an option whose value is None is a flag).  ``breaks``: names of tests/breaks.py,
    the shim's among them armed in the breaks build (tests only); the others are other services'."""
    from tests.breaks import SHIM_BREAKS  # tests only: what the breaks build of the shim arms

    if not SHIM_BINARY.exists():
        raise FileNotFoundError(f"{SHIM_BINARY} is not built: run make build")
    ours = [b for b in breaks if b in SHIM_BREAKS]
    argv = [str(SHIM_BREAKS_BINARY), "--breaks", ",".join(ours)] if ours else [str(SHIM_BINARY)]
    for option, value in options.items():
        argv += [option] if value is None else [option, str(value)]
    return argv


#: A service's own readiness check: (its process, seconds to wait) -> returns once it answers, else ServiceError
Readiness = Callable[[subprocess.Popen, float], None]


@dataclass
class Service:
    """One long-running process of a deployment (a redis-server, a shim, an agent, the controller).

    One record says how each is started (command line; ``popen`` runs it, e.g. a Mininet host's, to start it
    in that host's namespace), where its output goes, which file keeps its state across restarts, and when it
    is up; so every kind starts, stops, crashes (``kill``) and restarts the same way.  Only the process
    started last is held: the fault tests kill one and start the next.
    """

    name: str  #: also the stem of its output file and, in messages, what it is
    argv: list[str]
    out: Path  #: stdout and stderr, appended across restarts
    log: Path | None = None  #: its own log file, named in errors
    state_file: Path | None = None  #: what a restart ``without state`` deletes first
    socket: Path | None = None  #: a Unix socket it creates once it listens: its readiness, deleted before a start
    ready: Readiness | None = None  #: a readiness check of its own instead
    timeout: float = 30.0  #: how long a start waits for it to be ready
    popen: Callable[..., subprocess.Popen] = subprocess.Popen
    proc: subprocess.Popen | None = field(default=None, init=False)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, *extra: str, timeout: float | None = None) -> subprocess.Popen:
        """Start it (``extra`` arguments after its command line); returns once it is ready, else ServiceError."""
        proc = self.launch(*extra)
        self.wait_ready(timeout)
        return proc

    def launch(self, *extra: str) -> subprocess.Popen:
        """Start it and return at once: a deployment launches its services of a kind together, then waits for
        each (wait_ready), instead of paying every one's start-up in turn."""
        if self.running:
            raise ServiceError(f"{self.name} is already running (pid {self.proc.pid})")  # type: ignore[union-attr]
        if self.socket is not None:
            self.socket.unlink(missing_ok=True)  # left by a killed predecessor: would pass for ready at once
        with open(self.out, "ab") as out:  # the child keeps its own descriptor
            proc = self.proc = self.popen(
                [*self.argv, *extra], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        from harness.runs import record  # (harness.runs builds on this module)

        record(self.out.parent, self.name, proc.pid)  # what `make clean` stops if the launcher dies
        return proc

    def wait_ready(self, timeout: float | None = None) -> None:
        """Return once the process launch() started is ready, else ServiceError."""
        assert self.proc is not None, f"{self.name}: wait_ready() before launch()"
        wait = self.timeout if timeout is None else timeout
        if self.ready is not None:
            self.ready(self.proc, wait)
        elif self.socket is not None:
            wait_for_path(self.socket, self.proc, wait, self.name, self.log or self.out)

    def kill(self) -> None:
        """SIGKILL it, as a crash would (nothing flushed, nobody told), and reap it."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(5)

    def stop(self, grace: float = 5.0) -> None:
        """Shut it down (SIGTERM, SIGKILL after ``grace`` s); nothing if it is not running."""
        stop_process(self.proc, grace)

    def restart(self, *extra: str, keep_state: bool = True, timeout: float | None = None) -> subprocess.Popen:
        """Kill it and start it again, with its state file or (``keep_state=False``) without."""
        self.kill()
        if not keep_state and self.state_file is not None:
            self.state_file.unlink(missing_ok=True)
        return self.start(*extra, timeout=timeout)
