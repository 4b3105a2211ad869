"""Mininet switches that run a P4Runtime-controlled data plane process.

Like the p4lang tutorials' P4RuntimeSwitch, the process runs in the root
network namespace and attaches to the switch's veth ends as ``-i PORT@IFACE``.
Three targets share this class: ``softswitch`` (default, always available),
``bmv2`` (``simple_switch_grpc --no-p4``; the pipeline arrives over
P4Runtime, exactly like softswitch's) and ``ebpf`` (the PSA build in the kernel
on the switch's ports, served by softswitch's P4Runtime server: docs/ebpf.md).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from mininet.node import Switch

from distcache import p4names
from harness.processes import (
    is_ours,
    join_cgroup,
    pid_alive,
    raise_priority,
    read_pid_file,
    wait_for_port,
    write_pid_file,
)
from harness.switch import BMV2_COMPILER, BMV2_FAST_SWITCH, BMV2_SWITCH, SwitchSpec, how_to_get
from p4rt.probes import probe_interfaces

TARGETS = ("softswitch", "bmv2", "ebpf")

BMV2_CPU_PORT = p4names.CPU_PORT  # packet-out (probes) enters here; 511 is BMv2's drop port
BMV2_THRIFT_BASE = 9090  # one Thrift (debug CLI) port per switch: 9090 + device id
# What a switch writes to its log in the run folder (softswitch: <switch>.log; BMv2: <switch>.txt, rotated
# at 5 MB into <switch>.1.txt...).  "packets": BMv2 logs every packet's
# parse, tables and actions (trace level, flushed line by line: the p4lang tutorials' logs/s1.log) --
# the way to see why a packet went where it did, but BMv2 then forwards ~10x slower, on a loaded machine
# slowly enough that leaves take healthy spines for dead (softswitch has no per-packet log -- its
# `--pcap` is the packet view -- and logs its P4Runtime sessions in detail).  "events", the default:
# pipeline, table and session events and warnings only.
SWITCH_LOGS = ("events", "packets")
SWITCH_LOG_HELP = (
    "what each switch logs in the run folder: events (default) or packets (BMv2's per-packet trace; ~10x slower)"
)
_LOG_LEVEL = {  # (level, flush every line)
    ("bmv2", "packets"): ("trace", True),
    ("bmv2", "events"): ("info", False),
    ("softswitch", "packets"): ("debug", False),
    ("softswitch", "events"): ("info", False),
    ("ebpf", "packets"): ("debug", False),  # the kernel has no per-packet log of ours: the server's debug log
    ("ebpf", "events"): ("info", False),
}


class TargetMissingError(RuntimeError):
    """The requested data-plane target is not installed."""


def check_target(target: str) -> None:
    if target not in TARGETS:
        raise TargetMissingError(f"unknown TARGET={target!r}; use one of {', '.join(TARGETS)}")
    if target == "ebpf":
        check = [sys.executable, "-m", "softswitch", "--dataplane", "ebpf", "--check"]
        done = subprocess.run(check, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            missing = done.stderr.strip().removeprefix("softswitch: missing ").split()
            raise TargetMissingError(f"TARGET=ebpf: {how_to_get(missing or ['p4c-ebpf'])}. Use TARGET=softswitch.")
    if target == "bmv2" and shutil.which(BMV2_SWITCH) is None:
        missing = [b for b in (BMV2_SWITCH, BMV2_COMPILER) if shutil.which(b) is None]
        raise TargetMissingError(
            f"TARGET=bmv2: {how_to_get(missing)}; then `make build` compiles the pipeline. Use TARGET=softswitch."
        )


class P4RuntimeSwitch(Switch):
    """A switch whose data plane is a softswitch or BMv2 process."""

    def __init__(
        self,
        name: str,
        *,
        device_id: int,
        grpc_port: int,
        run_dir: str,
        target: str = "softswitch",
        pcap: bool = False,
        switch_log: str = "events",
        extra_args: tuple[str, ...] = (),
        spine: bool = False,
        probe_port: bool = False,
        cgroup: str | None = None,
        **params: object,
    ) -> None:
        """``spine``: a spine, whose silence its leaves measure.  It runs at a real-time priority
        (SPINE_RT_PRIORITY in harness.processes) if softswitch (idle in poll() between frames, it takes
        nothing the leaves need; they stamp frames with the kernel's receive time, so their own waits cost
        nothing).  BMv2's fast build runs every switch, spine or leaf, at that priority: a BMv2 leaf stamps
        a frame when its port thread reads it, so its own wait for a CPU counts against the spine too, and
        at nice -10 a loaded run saw both kinds (captured on the links: a spine sending nothing out of any
        port for 36-48 ms, and a leaf that forwarded probes while taking nothing from a spine that kept
        answering), 1-3 false deaths in each quiet 60 s run; with its spines alone at SCHED_RR or nice -20
        the leaves' stalls remained, and the spines took ~20 % of the CPU the others needed.  All five at
        SCHED_RR: 0 deaths in four quiet runs, at 1,412-1,545 ops/s against 1,548-1,610.  Not the logging
        build: ~5x slower per packet, its spines at SCHED_RR starved the rest (~950 -> ~700 ops/s).
        ``probe_port``: a leaf's PROBE_PORT on a veth whose peer, in the root namespace too, is where its
        probe source writes (p4rt.probes.probe_interfaces); no host is linked to it.  ``cgroup``: the process
        starts in this cgroup (harness.loopbind: BMv2's Thrift server then listens on loopback only)."""
        params.setdefault("dpid", f"{device_id:016x}")
        params["inNamespace"] = False
        super().__init__(name, **params)
        self.device_id, self.grpc_port, self.run_dir = device_id, grpc_port, Path(run_dir)
        if switch_log not in SWITCH_LOGS:
            raise ValueError(f"unknown switch log {switch_log!r}; use one of {', '.join(SWITCH_LOGS)}")
        self.target, self.pcap, self.switch_log = target, pcap, switch_log
        self.extra_args = list(extra_args)  # appended to the switch process's command line
        self.spine = spine
        self.realtime = False  # what start() gives it
        self.probe_ifaces = probe_interfaces(name) if probe_port else None
        self.proc: subprocess.Popen | None = None
        self._cmd: list[str] = []
        self.cgroup = Path(cgroup) if cgroup else None

    def command(self) -> list[str]:
        """The switch process's command line (one shape for both targets: :class:`harness.switch.SwitchSpec`)."""
        return self.switch_spec().argv()

    def switch_spec(self) -> SwitchSpec:
        """What this switch's process is (:class:`harness.switch.SwitchSpec`)."""
        bmv2 = self.target == "bmv2"
        level = _LOG_LEVEL[self.target, self.switch_log]
        if self.pcap and self.target == "ebpf":
            raise ValueError("--pcap: the kernel target writes no captures (capture its links with tcpdump)")
        pcap = (
            ["--pcap", str(self.run_dir / "pcap")] if bmv2 else ["--pcap-dir", str(self.run_dir / "pcap" / self.name)]
        )
        return SwitchSpec(
            self.target,
            [
                *((self.ports[intf], intf.name) for intf in self.intfList() if intf.name != "lo"),
                *([(p4names.PROBE_PORT, self.probe_ifaces[0])] if self.probe_ifaces else []),
            ],
            grpc_addr=f"127.0.0.1:{self.grpc_port}",
            device_id=self.device_id,
            log_file=self.run_dir / (self.name if bmv2 else f"{self.name}.log"),  # BMv2 appends .txt
            log_level=level[0],
            log_flush=level[1],
            thrift_port=BMV2_THRIFT_BASE + self.device_id,
            cpu_port=BMV2_CPU_PORT,
            extra=[*(pcap if self.pcap else []), *([] if self.target != "softswitch" else self.extra_args)],
        )

    def start(self, controllers: list) -> None:  # noqa: ARG002 - P4Runtime, not OpenFlow
        ifaces = [intf.name for intf in self.intfList() if intf.name != "lo"]
        if self.probe_ifaces:
            port, peer = self.probe_ifaces
            if not os.path.exists(f"/sys/class/net/{port}"):
                self.cmd(f"ip link add {port} type veth peer name {peer}")
            ifaces += [port, peer]  # the peer too: nothing of the root namespace's own (IPv6) is sent into the port
        for iface in ifaces:
            self.cmd(f"ethtool -K {iface} tx off rx off >/dev/null 2>&1")
            # the port is the switch's, not the root namespace's: no IPv6 on it, and strict reverse-path
            # filtering, so nothing a host sends through it is taken in (or forwarded) by the root
            # namespace, where the control plane listens (on loopback: BMv2's Thrift server too, harness.loopbind)
            self.cmd(f"sysctl -qw net.ipv6.conf.{iface}.disable_ipv6=1 net.ipv4.conf.{iface}.rp_filter=1")
        if self.probe_ifaces:
            self.cmd(f"ip link set {self.probe_ifaces[0]} up && ip link set {self.probe_ifaces[1]} up")
        out = open(self.run_dir / f"{self.name}.out", "wb")  # noqa: SIM115 - lives as long as the process
        self._cmd = self.command()  # what stop() recognizes the process by (Mininet may delete the ports first)
        self.realtime = self._cmd[0] == BMV2_FAST_SWITCH if self.target == "bmv2" else self.spine
        cgroup = self.cgroup
        self.proc = subprocess.Popen(
            self._cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=(lambda: join_cgroup(cgroup)) if cgroup is not None else None,
        )
        out.close()
        write_pid_file(self.pid_file, self.proc.pid)

    def wait_started(self) -> None:
        """Wait for the process start() began to serve P4Runtime.  Apart from start(), so that a deployment
        starts every switch first and then waits for them all (one by one, each softswitch's Python start-up
        cost half a second of every deployment's start per switch)."""
        assert self.proc is not None, f"{self.name}: wait_started() before start()"
        wait_for_port(
            f"127.0.0.1:{self.grpc_port}",
            self.proc,
            30.0,
            f"{self.target} {self.name}",
            self.run_dir / f"{self.name}.out",
        )
        raise_priority(self.proc, self.realtime)  # now that it serves (harness.processes.raise_priority)

    @property
    def pid_file(self) -> Path:
        """Pid of the switch's current process: the controller's `fail`/`recover` may replace it."""
        return self.run_dir / f"{self.name}.pid"

    def spec(self) -> dict:
        """How to start this switch's process again (``harness.processes``)."""
        return {
            "cmd": self.command(),
            "pid_file": str(self.pid_file),
            "log": str(self.run_dir / f"{self.name}.out"),
            "grpc": f"127.0.0.1:{self.grpc_port}",
            "realtime": self.realtime,
            **({"detach": detach} if (detach := self.switch_spec().detach_argv()) is not None else {}),
            **({"cgroup": str(self.cgroup)} if self.cgroup is not None else {}),
        }

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 - Mininet's signature
        # the process started here while it runs (not yet reaped, so its pid is still its own), and the one
        # `recover` may have started since if the pid file still names it (a pid file outlives its process:
        # its pid may belong to a stranger by now, see harness.processes)
        pids = {self.proc.pid} if self.proc is not None and self.proc.poll() is None else set()
        record = read_pid_file(self.pid_file)
        if record is not None and is_ours(record, self._cmd or self.command()):
            pids.add(record[0])
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 5
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if pid_alive(pid):
                os.killpg(pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(5)
        self.proc = None
        if (detach := self.switch_spec().detach_argv()) is not None:
            # a kernel switch's programs outlive a SIGKILL (or a crash before this stop): off its ports
            subprocess.run(detach, capture_output=True, check=False)
        if deleteIntfs and self.probe_ifaces:
            self.cmd(f"ip link del {self.probe_ifaces[0]} 2>/dev/null")
        super().stop(deleteIntfs)
