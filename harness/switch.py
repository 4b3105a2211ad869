"""One switch process, softswitch or BMv2's ``simple_switch_grpc``: its command line, started in its own
process group (optionally inside a network namespace), waited for until its P4Runtime port answers, its log
tails for an error message, stopped with its group.

Why one place: the PTF runner and the switch benchmark started the same two command lines, each written out
by hand, and had drifted (log options, how readiness was checked).  Both targets start without a pipeline
(BMv2 ``--no-p4``); it arrives over P4Runtime.  A library: softswitch is started by module name
(``python -m softswitch``), never imported.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from distcache import p4names
from harness.processes import stop_group, tied_argv

REPO = Path(__file__).resolve().parents[1]
TARGETS = ("softswitch", "bmv2", "ebpf")  # ebpf: softswitch's server over the PSA build in the kernel
BMV2_SWITCH, BMV2_COMPILER = "simple_switch_grpc", "p4c-bm2-ss"
P4_V1MODEL = REPO / "p4src" / "v1model" / "distcache.p4"  # the program's v1model top (BMv2's; p4src/include shared)
P4_PSA = REPO / "p4src" / "psa" / "distcache.p4"  # its PSA top (p4c-ebpf)
# the same BMv2 built at -O3 without its logging macros, where a user installed one: ~5.5x the packets
BMV2_FAST_SWITCH = "simple_switch_grpc-fast"
BMV2_PACKET_LOG_LEVELS = ("trace", "debug")  # what only the logging build writes: a line per packet step
GRPC_ADDR = "127.0.0.1:9559"  # a loopback address: BMv2's default 0.0.0.0 would face every network
THRIFT_PORT = 9090  # BMv2's debug CLI
DEVICE_ID = 1
CPU_PORT = p4names.CPU_PORT  # packet-out enters here (the P4 parser's CPU_PORT); 511 is BMv2's drop port


# p4c, BMv2 and p4c-ebpf are p4lang's tools, installed the way p4lang documents; this project never ships them
P4C_INSTALL = "https://github.com/p4lang/p4c#installing-packaged-versions-of-p4c"
BMV2_INSTALL = "https://github.com/p4lang/behavioral-model#installing-bmv2"


def how_to_get(tools: Sequence[str]) -> str:
    """One line: which of ``tools`` (binaries missing from PATH) come from where -- p4c's compilers and BMv2
    from p4lang (their install instructions), clang and llc from Debian (``make deps`` installs them)."""
    p4c = [t for t in tools if t.startswith("p4c")]
    bmv2 = [t for t in tools if t.startswith("simple_switch")]
    other = [t for t in tools if t not in p4c and t not in bmv2]
    parts = []
    if p4c:
        parts.append(f"{', '.join(p4c)}: install p4c as p4lang documents ({P4C_INSTALL})")
    if bmv2:
        parts.append(f"{', '.join(bmv2)}: install BMv2 with P4Runtime support as p4lang documents ({BMV2_INSTALL})")
    if other:
        parts.append(f"{', '.join(other)}: apt-get install clang llvm (make deps does)")
    return f"missing from PATH: {'; '.join(parts)}"


class SwitchStartError(RuntimeError):
    """The switch process exited or did not open its P4Runtime port; the message ends with its log tails."""


@dataclass(frozen=True)
class SwitchSpec:
    """What one switch process is: target, ports (number, interface), P4Runtime address and device id,
    logging.  ``log_file``: softswitch's log, or BMv2's (it appends ``.txt``); none: BMv2 logs nothing,
    softswitch to its stderr.  ``log_level``: the target's own level names (softswitch: debug..error;
    BMv2: trace..off); ``log_flush`` (BMv2 only) flushes every line, as a per-packet trace needs."""

    target: str
    ports: Sequence[tuple[int, str]]
    grpc_addr: str = GRPC_ADDR
    device_id: int = DEVICE_ID
    log_file: Path | None = None
    log_level: str | None = None
    log_flush: bool = False
    thrift_port: int = THRIFT_PORT
    cpu_port: int = CPU_PORT
    extra: Sequence[str] = field(default=())  # appended as they are (softswitch) or before BMv2's "--"

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"unknown switch target {self.target!r}; use one of {', '.join(TARGETS)}")

    def argv(self) -> list[str]:
        """The command line, shaped as each target wants it: ``-i PORT@IFACE`` per port on both."""
        ports = [a for port, iface in self.ports for a in ("-i", f"{port}@{iface}")]
        log = ["--log-file", str(self.log_file)] if self.log_file is not None else []
        log += ["--log-level", self.log_level] if self.log_level is not None else []
        if self.target == "bmv2":
            log += ["--log-flush"] if self.log_flush else []
            return [
                bmv2_binary(self.log_level),
                "--device-id",
                str(self.device_id),
                *ports,
                *log,
                "--no-p4",
                "--thrift-port",
                str(self.thrift_port),
                *self.extra,
                "--",
                "--grpc-server-addr",
                self.grpc_addr,
                "--cpu-port",
                str(self.cpu_port),
            ]
        return [
            sys.executable,
            "-m",
            "softswitch",
            "--device-id",
            str(self.device_id),
            "--grpc-addr",
            self.grpc_addr,
            *ports,
            *log,
            *(["--dataplane", "ebpf"] if self.target == "ebpf" else []),
            *self.extra,
        ]

    def detach_argv(self) -> list[str] | None:
        """What takes this switch's data plane down once its process is gone, for a target whose data plane
        outlives its process -- ebpf: its programs stay on the ports, running on their old tables, after a
        SIGKILL -- and None where the data plane dies with the process (softswitch, BMv2)."""
        return [*self.argv(), "--cleanup"] if self.target == "ebpf" else None


def bmv2_binary(log_level: str | None) -> str:
    """Which BMv2 runs: the fast build wherever it is installed and nothing per packet is asked of the log.

    Why: at ``info`` and above the logging build writes nothing more than the fast one (a loaded
    ``make run`` left empty logs), yet forwards ~5.5x slower, and on two shared cores its queues held a
    spine's answers 30-45 ms now and then -- a false death in the leaves' liveness (7-13 in a quiet 60 s
    run, 0 with the fast build).  A per-packet trace (``trace``/``debug``) needs the logging build."""
    if log_level not in BMV2_PACKET_LOG_LEVELS and shutil.which(BMV2_FAST_SWITCH):
        return BMV2_FAST_SWITCH
    return BMV2_SWITCH


def source_env(*paths: Path) -> dict[str, str]:
    """This environment with this checkout (and ``paths``) first on PYTHONPATH, unbuffered output: a child
    Python runs the packages of this tree, not those of another checkout an editable install points at."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *map(str, paths), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a log, or why there are none."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"({path} unreadable)"
    return "\n".join(text[-lines:]) or f"({path.name} is empty)"


_PORT_PROBE = """\
import socket, sys, time
host, port, end = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    try:
        socket.create_connection((host, port), timeout=0.2).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.05)
sys.exit(1)
"""


def in_netns(netns: str, target: str) -> list[str]:
    """The command prefix that runs a switch of ``target`` in network namespace ``netns``: ``ip netns exec``,
    except for ebpf, whose bpffs that command would hide (it mounts a fresh /sys): ``nsenter`` enters the
    network namespace alone."""
    if target == "ebpf":
        return ["nsenter", f"--net=/run/netns/{netns}"]
    return ["ip", "netns", "exec", netns]


class SwitchProcess:
    """One switch process started from a :class:`SwitchSpec`: stdout and stderr to ``out``, its own process
    group (``stop`` signals the group), dies with the process that started it.  With ``netns`` it runs in
    that network namespace (``ip netns exec``) and its port is probed from inside; without, it runs in the
    caller's (which may have entered a namespace itself)."""

    def __init__(self, spec: SwitchSpec, out: Path, *, netns: str | None = None, name: str | None = None) -> None:
        self.spec, self.out, self.netns = spec, out, netns
        self.name = name or spec.target
        self.proc: subprocess.Popen | None = None

    def argv(self) -> list[str]:
        """What is run: the spec's command line, inside the namespace when one is named."""
        return [*in_netns(self.netns, self.spec.target), *self.spec.argv()] if self.netns else self.spec.argv()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self, env: Mapping[str, str] | None = None, cwd: Path = REPO) -> subprocess.Popen:
        """Start the process (``env``: default :func:`source_env`); returns at once, see :meth:`wait_ready`."""
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(
                tied_argv(self.argv()),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env is not None else source_env(),
                cwd=cwd,
                start_new_session=True,
            )
        return self.proc

    def returncode(self) -> int | None:
        """The exit code once the process has exited (or was never started: None then too)."""
        return self.proc.poll() if self.proc is not None else None

    def logs(self, lines: int = 25) -> str:
        """The tails of its output and of its log file, each under a header, for an error message."""
        files = [self.out, *([self.spec.log_file] if self.spec.log_file is not None else [])]
        return "\n".join(f"--- {f.name} ---\n{tail(f, lines)}" for f in files if f.exists())

    def wait_ready(self, timeout: float = 30.0) -> float:
        """Block until the P4Runtime port accepts a connection; the seconds it took.  SwitchStartError (with
        the log tails) if the process exits first or the port stays closed for ``timeout`` s."""
        if self.proc is None:
            raise SwitchStartError(f"{self.name} was not started")
        host, _, port = self.spec.grpc_addr.rpartition(":")
        probe = [sys.executable, "-c", _PORT_PROBE, host, port, str(timeout)]
        if self.netns:
            probe = [*in_netns(self.netns, self.spec.target), *probe]
        t0 = time.monotonic()
        poller = subprocess.Popen(tied_argv(probe), stdin=subprocess.DEVNULL)
        try:
            while True:
                rc = poller.poll()
                if rc == 0:
                    return time.monotonic() - t0
                if rc is not None:
                    raise SwitchStartError(
                        f"{self.name} did not open {self.spec.grpc_addr} within {timeout:.0f} s\n" + self.logs()
                    )
                if self.proc.poll() is not None:
                    raise SwitchStartError(
                        f"{self.name} exited with code {self.proc.returncode} before serving P4Runtime\n" + self.logs()
                    )
                time.sleep(0.05)
        finally:
            if poller.poll() is None:
                poller.kill()
                poller.wait()

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM its process group, SIGKILL what lingers after ``grace`` s (nothing if it has exited), then
        take down a data plane that outlives its process (:meth:`SwitchSpec.detach_argv`)."""
        stop_group(self.proc, grace)
        if (detach := self.spec.detach_argv()) is not None:
            argv = [*in_netns(self.netns, self.spec.target), *detach] if self.netns else detach
            subprocess.run(argv, capture_output=True, check=False, env=source_env(), cwd=REPO)
