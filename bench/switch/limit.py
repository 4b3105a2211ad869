"""The ceiling of the bed's veths (``limit_pps``): in place of a switch, ``build/turnaround.bpf.o``
(tools/turnaround/turnaround.bpf.c, built by ``make deps``) on the TC ingress hook of the switch's input port,
which only turns a read around -- MAC addresses, IPv4 addresses and UDP ports swapped, as a reply carries
them -- and redirects it out of the port a cache hit's reply leaves by, so it crosses the same veths as a real
hit.  Measured as the hit path is; what a switch delivers over this is its share of what these veths carry.

Loaded with ``bpftool prog loadall`` under a pin directory of its own (``/sys/fs/bpf/dcturn-<pid>``: the
program and its two maps, ``cfg`` with the out port's interface index, ``counts`` with the frames it turned
and passed), attached with ``tc`` in the bench namespace; ``close`` detaches it and removes the pins (the
namespace's deletion would take the filter too), and a later run removes the pins of a run that was killed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import ClassVar

from rich.progress import Progress

from bench.switch.config import IN_PORT, LIMIT, PORTS, REPO, SPINE_PORTS, SetupError
from bench.switch.frames import Frames
from bench.switch.probe import probe
from bench.switch.sender import Sender
from harness import bpffs

OBJECT = REPO / "build" / "turnaround.bpf.o"
PIN_PREFIX = "dcturn-"
COUNTS = ("TURNED", "PASSED")  # the counts map's cells, in order


def missing() -> str | None:
    """What the turnaround needs that is not here ("needs ...", one line), or None."""
    if not OBJECT.is_file():
        return f"needs {OBJECT.relative_to(REPO)}: run make deps (it compiles tools/turnaround with clang)"
    for tool, package in (("tc", "iproute2"), ("bpftool", "bpftool")):
        if not bpffs.sbin_tool(tool):
            return f"needs {tool} (apt-get install {package}; make deps does)"
    return None


def turned(frame: bytes) -> bytes:
    """``frame`` (Ethernet/IPv4 without options/UDP) as the turnaround sends it back."""
    f = bytearray(frame)
    f[0:6], f[6:12] = frame[6:12], frame[0:6]
    f[26:30], f[30:34] = frame[30:34], frame[26:30]
    f[34:36], f[36:38] = frame[36:38], frame[34:36]
    return bytes(f)


def _run(*cmd: str, what: str) -> str:
    res = subprocess.run(list(cmd), capture_output=True, text=True, check=False)
    if res.returncode != 0:
        lines = [x.strip() for x in (res.stderr + res.stdout).splitlines() if x.strip()]
        raise SetupError(f"{what}: {lines[-1] if lines else f'exit {res.returncode}'}")
    return res.stdout


def remove_stale_pins() -> None:
    """Pin directories of runs that are gone (killed before their teardown)."""
    for d in bpffs.BPFFS.glob(f"{PIN_PREFIX}*"):
        pid = d.name.removeprefix(PIN_PREFIX)
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(d, ignore_errors=True)


class Turnaround:
    """The turnaround program on ``bsw<IN_PORT>``'s ingress, turning frames out of ``bsw<out_port>``; measured
    through the same interface as a :class:`~bench.switch.bed.SwitchBed` (bench/switch/measure.py ``Target``)."""

    paths = ("hit",)  # a read turned around: the hit path's frame and ports
    counters: ClassVar[dict[str, str]] = {"hit": "TURNED"}  # the count that must count every frame a path delivers
    watched = COUNTS  # counts that only the path counting them may move
    proc = None  # no process: the program runs in the kernel's softirq

    def __init__(self, progress: Progress | None = None, out_port: int = SPINE_PORTS[0]) -> None:
        self.target, self.progress = LIMIT, progress
        self.out_port = out_port
        self.pins = bpffs.BPFFS / f"{PIN_PREFIX}{os.getpid()}"
        self.sender = Sender(f"bpt{IN_PORT}")
        self.attached = False
        self.tc = self.bpftool = ""

    def start(self) -> None:
        """Load the program, point it at the out port and attach it (in the namespace the caller entered)."""
        if why := missing():
            raise SetupError(f"the limit {why}")
        self.tc, self.bpftool = str(bpffs.sbin_tool("tc")), str(bpffs.sbin_tool("bpftool"))
        bpffs.ensure_mounted()
        remove_stale_pins()
        shutil.rmtree(self.pins, ignore_errors=True)
        _run(
            self.bpftool, "prog", "loadall", str(OBJECT), str(self.pins), "type", "classifier", "pinmaps",
            str(self.pins), what=f"cannot load {OBJECT.name}",
        )  # fmt: skip
        try:
            ifindex = socket.if_nametoindex(f"bsw{self.out_port}")  # of the namespace the caller is in
        except OSError:
            raise SetupError(f"no interface bsw{self.out_port} here") from None
        value = [str(b) for b in ifindex.to_bytes(4, "little")]
        _run(self.bpftool, "map", "update", "pinned", str(self.pins / "cfg"), "key", "0", "0", "0", "0", "value",
             *value, what="cannot set the turnaround's out port")  # fmt: skip
        for p in PORTS:  # whatever a kernel switch before it left (this namespace is ours)
            subprocess.run([self.tc, "qdisc", "del", "dev", f"bsw{p}", "clsact"], capture_output=True, check=False)
        dev = f"bsw{IN_PORT}"
        _run(self.tc, "qdisc", "add", "dev", dev, "clsact", what=f"cannot add a clsact qdisc on {dev}")
        self.attached = True
        _run(self.tc, "filter", "add", "dev", dev, "ingress", "pref", "1", "handle", "1", "bpf", "direct-action",
             "object-pinned", str(self.pins / "turnaround"), what=f"cannot attach the turnaround to {dev}")  # fmt: skip

    def configure(self, frames: Frames) -> None:
        """Nothing to configure: one frame through, to see it works before it is measured."""
        self.check("hit", frames, probe(frames.paths["hit"]))

    def check(self, path: str, frames: Frames, out: list[tuple[int, bytes]]) -> int:
        """The port the probe frame left on, once checked to be the frame turned around."""
        want = turned(frames.paths[path])
        if [p for p, _ in out] != [self.out_port] or out[0][1] != want:
            raise SetupError(
                f"the turnaround sent {len(out)} frame(s) out of ports {[p for p, _ in out]}; expected one, the "
                f"hit frame turned around, out of port {self.out_port}"
                + (f"; got {out[0][1][:42].hex()}, expected {want[:42].hex()}" if out else "")
            )
        return self.out_port

    def stats(self) -> dict[str, int]:
        """The program's counts, summed over the CPUs."""
        text = _run(self.bpftool, "-j", "map", "dump", "pinned", str(self.pins / "counts"), what="cannot read counts")
        le = lambda hexes: int.from_bytes(bytes(int(x, 16) for x in hexes), "little")  # noqa: E731
        try:  # raw bytes, little-endian: what bpftool prints with or without BTF
            cells = {le(e["key"]): sum(le(v["value"]) for v in e["values"]) for e in json.loads(text)}
        except (ValueError, KeyError, TypeError) as e:
            raise SetupError(f"cannot read the turnaround's counts from bpftool's {text[:200]!r}: {e}") from None
        return {name: cells.get(i, 0) for i, name in enumerate(COUNTS)}

    def logs(self) -> str:
        return ""

    def close(self) -> None:
        self.sender.close()
        if self.attached:
            subprocess.run([self.tc, "qdisc", "del", "dev", f"bsw{IN_PORT}", "clsact"], capture_output=True)
            self.attached = False
        shutil.rmtree(self.pins, ignore_errors=True)
