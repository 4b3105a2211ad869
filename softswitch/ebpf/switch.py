"""A switch whose data plane is the PSA build in the kernel: p4c-ebpf's programs on its interfaces' TC ingress
hooks, its state in their maps, served over P4Runtime by softswitch's own server (softswitch/server/) through
:class:`~softswitch.ebpf.state.EbpfState`.

Starting one: build the program for this switch (p4c-ebpf, clang, llc: its CPU and probe ports' interface
indexes are compile-time constants of the PSA top; a restart reuses the build, see build.cached), load it
under a pin root of its own (every Mininet switch shares one bpffs), run its map initializer (the CRC table,
default actions), attach its ingress program to every port and to the CPU port's veth, then serve.  Packets
never pass through this process: the kernel runs them.  What this process does besides P4Runtime: writes
packet-outs into the CPU port's veth, pops digests from the program's queue maps (softswitch/ebpf/digests.py).
"""

from __future__ import annotations

import logging
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from finsy.proto import p4r

from distcache import p4names
from harness import bpffs
from softswitch.dataplane import PROGRAM
from softswitch.ebpf import build, layout, libbpf
from softswitch.ebpf.digests import DigestQueues
from softswitch.ebpf.state import EbpfState, Ports
from softswitch.server import P4RuntimeError, P4RuntimeServer, PipelineConfig, packet_out_frame

log = logging.getLogger("softswitch.ebpf")

TC_INGRESS, INITIALIZER, XDP_HELPER = "classifier/tc-ingress", "classifier/map-initializer", "xdp/xdp-ingress"
PIN_ROOT = bpffs.BPFFS / "distcache"
CPU_PORT, PROBE_PORT = p4names.CPU_PORT, p4names.PROBE_PORT
# the CPU port's interface index: base + device id (ifindexes are per namespace; Mininet's run from 1 upwards)
CPU_IFINDEX_BASE, CPU_IFINDEX_SPAN = 60000, 4000


class SwitchError(RuntimeError):
    """The switch could not start: an interface is missing, the build or the load failed, a tc command failed."""


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SwitchError(f"{' '.join(cmd)}: {done.stderr.strip() or done.stdout.strip()}")


def detach(dev: str) -> None:
    """Take this target's programs off ``dev`` (TC ingress and the XDP helper), if any are there."""
    subprocess.run(["tc", "qdisc", "del", "dev", dev, "clsact"], capture_output=True, check=False)
    subprocess.run(["ip", "link", "set", "dev", dev, "xdpgeneric", "off"], capture_output=True, check=False)


def attach(dev: str, program: Path, xdp_helper: Path | None = None) -> None:
    """Put the pinned TC program ``program`` on ``dev``'s ingress hook (whatever was there before off first:
    a killed switch's program stays on its port, the kernel running it without its process), and
    ``xdp_helper`` on its XDP hook.  Attached this way a program outlives the process that attached it: only
    :func:`detach` (or :func:`remove_switch`, or the interface's deletion) takes it off."""
    detach(dev)
    _run(["tc", "qdisc", "add", "dev", dev, "clsact"])
    _run(["tc", "filter", "replace", "dev", dev, "ingress", "bpf", "direct-action", "object-pinned", str(program)])
    if xdp_helper is not None:
        _run(["ip", "link", "set", "dev", dev, "xdpgeneric", "pinned", str(xdp_helper)])


def attached(dev: str) -> bool:
    """Whether a BPF program is on ``dev``'s TC ingress hook (``tc filter show``): the data plane of a switch
    of this target runs while one is, whether its process does or not."""
    done = subprocess.run(["tc", "filter", "show", "dev", dev, "ingress"], capture_output=True, text=True, check=False)
    return done.returncode == 0 and " bpf " in f" {done.stdout} "


def pin_root(device_id: int) -> Path:
    """Where switch ``device_id`` pins its programs and maps (every switch of a host shares one bpffs)."""
    return PIN_ROOT / f"dev{device_id}"


def remove_switch(device_id: int, devs: list[str]) -> None:
    """Take switch ``device_id``'s data plane down for good: its programs off its ports ``devs``, its CPU
    port's veth deleted, its pins removed.  What stopping a kernel switch must do once its process is gone
    (its close() does it on SIGTERM; after a SIGKILL its launcher runs this, through ``python -m softswitch
    --dataplane ebpf --cleanup`` with the switch's own arguments); other switches are left alone."""
    for dev in devs:
        detach(dev)
    subprocess.run(["ip", "link", "del", cpu_veth(device_id)[0]], capture_output=True, check=False)
    bpffs.unpin(pin_root(device_id))


def cpu_veth(device_id: int) -> tuple[str, str]:
    """The CPU port's veth pair of switch ``device_id``: (the end the program is on, the end the server writes)."""
    return f"dccpu{device_id}", f"dccpu{device_id}h"


def _add_cpu_veth(device_id: int) -> None:
    """Create the CPU port's veth pair, its program end at interface index CPU_IFINDEX_BASE + ``device_id``.

    Why a fixed index: the index is a constant of the program (packet-outs are recognised by it), so a new
    index on every start meant a new compile on every restart.  With the index fixed, and the probe port's
    interface living as long as the topology, a restarted switch reuses its build (build.cached).  Where the
    index is taken (another interface has it) the kernel picks one, and that start compiles."""
    cpu, cpu_host = cpu_veth(device_id)
    if 0 < device_id <= CPU_IFINDEX_SPAN:
        want = CPU_IFINDEX_BASE + device_id
        done = subprocess.run(["ip", "link", "add", cpu, "index", str(want), "type", "veth", "peer", "name", cpu_host],
                              capture_output=True, text=True, check=False)  # fmt: skip
        if done.returncode == 0:
            return
        log.info("interface index %d is taken (%s): the CPU port gets another", want, done.stderr.strip())
    _run(["ip", "link", "add", cpu, "type", "veth", "peer", "name", cpu_host])


def remove_leftovers() -> None:
    """Remove what kernel switches killed before their close() left, for every device id: the CPU-port veths
    (deleting one end deletes the pair) and everything pinned under PIN_ROOT.  ``python -m softswitch
    --dataplane ebpf --cleanup`` without ports runs it; a live switch loses its CPU port and pins too."""
    prefix = cpu_veth(0)[0].removesuffix("0")
    for link in Path("/sys/class/net").iterdir():
        if link.name.startswith(prefix) and link.name.removeprefix(prefix).isdigit():
            subprocess.run(["ip", "link", "del", link.name], capture_output=True, check=False)
    if PIN_ROOT.exists():
        bpffs.unpin(PIN_ROOT)


class EbpfSwitch:
    """One running kernel switch: its program loaded and attached, its P4Runtime server, its digest poller."""

    def __init__(
        self, *, device_id: int, grpc_addr: str, ports: Mapping[int, str], work_dir: Path = build.CACHE
    ) -> None:
        if CPU_PORT in ports:
            raise SwitchError(f"port {CPU_PORT} is the CPU port: the switch makes its interface itself")
        self.device_id, self.grpc_addr, self.work_dir = device_id, grpc_addr, work_dir
        self.ports = dict(ports)
        self.pin_root = pin_root(device_id)
        self._attached: list[str] = []
        self._obj: libbpf.BpfObject | None = None
        self._state: EbpfState | None = None
        self._digests: DigestQueues | None = None
        self._cpu: socket.socket | None = None
        self._stop = threading.Event()
        self.server: P4RuntimeServer | None = None
        self.packet_outs = 0

    def start(self) -> None:
        try:
            self._start()
        except Exception:
            self.close()
            raise

    def _start(self) -> None:
        ifindex = {}
        for port, iface in self.ports.items():
            try:
                ifindex[port] = socket.if_nametoindex(iface)
            except OSError:
                raise SwitchError(f"port {port}: no interface {iface!r} in this network namespace") from None
        cpu, cpu_host = cpu_veth(self.device_id)
        subprocess.run(["ip", "link", "del", cpu], capture_output=True, check=False)  # a killed run's
        _add_cpu_veth(self.device_id)
        for dev in (cpu, cpu_host):
            # no IPv6 on the pair: the kernel's own router solicitations and MLD reports would enter the program
            # by the CPU port and count as NOT_IPV4 drops all run long
            ipv6 = Path(f"/proc/sys/net/ipv6/conf/{dev}/disable_ipv6")
            if ipv6.exists():
                ipv6.write_text("1")
            _run(["ip", "link", "set", dev, "up"])
        ifindex[CPU_PORT] = socket.if_nametoindex(cpu)
        defines = {"DC_CPU_IFINDEX": ifindex[CPU_PORT], "DC_PROBE_IFINDEX": ifindex.get(PROBE_PORT, 0)}
        t0 = time.monotonic()
        out = build.cached(defines, self.work_dir)
        log.info("program for CPU ifindex %d, probe ifindex %d ready in %.1f s (%s)", defines["DC_CPU_IFINDEX"],
                 defines["DC_PROBE_IFINDEX"], time.monotonic() - t0, out.object_file.parent)  # fmt: skip
        bpffs.unpin(self.pin_root)
        self._obj = libbpf.BpfObject(out.object_file, self.pin_root)
        if self._obj.test_run(INITIALIZER, bytes(128)) != 0:
            raise SwitchError("the program's map initializer failed")
        pinned = self._obj.pin_programs(self.pin_root / "progs")
        xdp_ports = {cpu, *([self.ports[PROBE_PORT]] if PROBE_PORT in self.ports else [])}
        for dev in [*self.ports.values(), cpu]:
            self._attached.append(dev)
            # p4c-ebpf's XDP helper, before TC: a frame whose EtherType is not IP (a packet-out starts with its
            # packet_out header) gets IPv4's, the real one kept in XDP metadata for the TC program to put back
            # -- the kernel resizes a packet (bpf_skb_adjust_room, the deparser) only if it is IP.  Only where
            # packet-outs come in: the TC program puts an EtherType back only there (build.py says why), so on
            # any other port the helper would leave a frame mislabelled
            attach(dev, pinned[TC_INGRESS], pinned[XDP_HELPER] if dev in xdp_ports else None)
        layouts = layout.load(out.object_file)
        self._state = EbpfState(PROGRAM, layouts, self.pin_root, Ports(ifindex))
        self.server = P4RuntimeServer(self._state, self.device_id, self.grpc_addr)
        self.server.service.packet_out_handler = self._on_packet_out
        self._cpu = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        self._cpu.bind((cpu_host, 0))
        self.server.start()
        self._digests = DigestQueues(PROGRAM.digests, layouts, self.pin_root, self.server.service.digests.submit)
        self._digests.start()
        self.server.service.on_commit = self._on_commit

    def _on_commit(self, _cfg: PipelineConfig, reconcile: bool) -> None:
        """A new pipeline config (its state already reset by the server): the digests the old one packed and
        nobody popped yet are not reported."""
        if not reconcile and self._digests is not None:
            self._digests.discard()

    def _on_packet_out(self, packet: p4r.PacketOut) -> None:
        """A primary controller's PacketOut: its packet_out header and payload written into the CPU port's
        veth, where the program takes it in as a packet-out (gRPC thread; the kernel runs it at once)."""
        assert self.server is not None and self._cpu is not None
        cfg: PipelineConfig | None = self.server.service.committed
        if cfg is None:
            raise P4RuntimeError("no forwarding pipeline config set", "FAILED_PRECONDITION")
        self._cpu.send(packet_out_frame(PROGRAM, cfg, packet))
        self.packet_outs += 1

    def run(self) -> None:
        self._stop.wait()

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        """Stop serving, take the program off every interface, remove the CPU veth and every pin."""
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self._digests is not None:
            self._digests.close()
            self._digests = None
        if self._cpu is not None:
            self._cpu.close()
            self._cpu = None
        if self._state is not None:
            self._state.close()
            self._state = None
        if self._obj is not None:
            self._obj.close()
            self._obj = None
        remove_switch(self.device_id, self._attached)
        self._attached.clear()
