"""A cgroup whose processes' TCP servers listen on loopback only, whatever address they bind.

BMv2's Thrift server (its debug CLI, ``--thrift-port``) has no address option and listens on every
interface, the machine's real ones included, beside Mininet switch ports that live in the root namespace.
A deployment on BMv2 starts every switch process inside one of these cgroups: ``tools/loopbind``'s
cgroup ``bind4``/``bind6`` programs turn a TCP bind to 0.0.0.0 or :: into one to 127.0.0.1 or ::1, so the
Thrift port answers this host only.  (PTF runs and make bench-switch start BMv2 in a network namespace of
their own: nothing outside it reaches the port there.)

Loaded and attached with bpftool; :meth:`LoopbackCgroup.close` detaches the programs, removes the pins and
the cgroup (once its processes are gone).
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

from harness import bpffs
from harness.processes import join_cgroup

REPO = Path(__file__).resolve().parents[1]
OBJECT = REPO / "build" / "loopbind.bpf.o"
PROGRAMS = {"bind4": "loopbind4", "bind6": "loopbind6"}  # attach type -> program name in the object


class LoopbindError(RuntimeError):
    """The cgroup could not be made or its programs loaded or attached; the message says what to do."""


def cgroup2_root() -> Path:
    """Where the unified (v2) cgroup hierarchy is mounted (``/sys/fs/cgroup`` or its ``unified`` part)."""
    with open("/proc/mounts") as f:
        for fields in (line.split() for line in f):
            if len(fields) > 2 and fields[2] == "cgroup2":
                return Path(fields[1])
    raise LoopbindError("no cgroup2 hierarchy is mounted (mount -t cgroup2 none /sys/fs/cgroup/unified)")


class LoopbackCgroup:
    """One cgroup (``name`` under the cgroup2 root) with the loopback-bind programs attached."""

    def __init__(self, name: str, obj: Path = OBJECT) -> None:
        tool = bpffs.sbin_tool("bpftool")
        if tool is None:
            raise LoopbindError("bpftool is missing: apt-get install bpftool")
        if not obj.is_file():
            raise LoopbindError(f"{obj} is missing: run make build (it needs clang: apt-get install clang libbpf-dev)")
        self.tool = tool
        self.path = cgroup2_root() / name
        self.pins = bpffs.BPFFS / name
        bpffs.ensure_mounted()
        self.close()  # what a killed run of the same name left
        try:
            self.path.mkdir()
            self._run("prog", "loadall", str(obj), str(self.pins))
            for kind, prog in PROGRAMS.items():
                self._run("cgroup", "attach", str(self.path), kind, "pinned", str(self.pins / prog))
        except (OSError, LoopbindError):
            self.close()
            raise

    def _run(self, *args: str) -> None:
        done = subprocess.run([self.tool, *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise LoopbindError(f"bpftool {' '.join(args)}: {(done.stderr or done.stdout).strip()}")

    def preexec(self) -> None:
        """For ``subprocess.Popen(preexec_fn=...)``: the child joins the cgroup before it execs."""
        join_cgroup(self.path)

    def close(self) -> None:
        """Detach the programs and remove the pins and the cgroup (left in place while processes are in it)."""
        if self.path.is_dir():
            for kind, prog in PROGRAMS.items():
                subprocess.run([self.tool, "cgroup", "detach", str(self.path), kind, "pinned", str(self.pins / prog)],
                               capture_output=True, check=False)  # fmt: skip
            with contextlib.suppress(OSError):
                self.path.rmdir()
        with contextlib.suppress(OSError):
            bpffs.unpin(self.pins)
