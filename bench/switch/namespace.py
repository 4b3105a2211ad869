"""The bed's network namespace ``dcbench-<pid>`` (built by harness.netns: lo and veth pairs bsw<N>/bpt<N>),
which the harness's main thread enters before any thread exists, so that its P4Runtime channel and every
process it starts live inside; the steering of the switch's input veth's receive work away from the sender's
core; and the kernel's packet counters of its interfaces."""

from __future__ import annotations

import ctypes
import os
import subprocess
import threading
from pathlib import Path

from bench.switch.config import SetupError, err
from harness.netns import NamespaceError, delete_namespace, make_veth_namespace


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, text=True, capture_output=True)


CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"setns: {os.strerror(e)}")


class Namespace:
    """``dcbench-<pid>``: lo and veth pairs bsw<N>/bpt<N>; the harness's main thread can enter and leave it.

    Built by harness.netns, as tests/ptf/run.py builds its own.
    """

    def __init__(self, ports: tuple[int, ...]) -> None:
        self.name = f"dcbench-{os.getpid()}"
        self.ports = ports
        self.created = False
        self._home: int | None = None  # fd of the network namespace the harness came from

    def create(self) -> None:
        try:
            make_veth_namespace(self.name, [(f"bsw{p}", f"bpt{p}") for p in self.ports])
        except NamespaceError as e:
            raise SetupError(str(e)) from None
        finally:
            self.created = Path(f"/run/netns/{self.name}").exists()  # whatever part of it exists is ours to delete

    def steer_rx(self, harness_cpu: int) -> str:
        """Split the cores (RPS): the receive work of the switch's ends (bsw<N>) to every core but
        ``harness_cpu``, that of the harness's ends (bpt<N>: the replies coming back) to ``harness_cpu``, where
        the sender runs.  A switch that runs in the kernel's softirq then works on cores of its own, not inside the
        sender's system calls; when it falls behind, its input's backlog fills and refuses frames (``rx_dropped``)
        rather than slowing the sender down; and the frames it sends do not queue behind its input on its own
        cores.  How the cores were split (one line), or "" on a single core.  sysfs shows a namespace's
        interfaces only to a sysfs mounted inside it: ``ip netns exec`` mounts one."""
        cpus = os.cpu_count() or 1
        if cpus < 2:
            return ""
        switch, harness = ((1 << cpus) - 1) & ~(1 << harness_cpu), 1 << harness_cpu
        script = "\n".join(
            f"echo {mask:x} > /sys/class/net/{end}{p}/queues/rx-0/rps_cpus"
            for p in self.ports
            for end, mask in (("bsw", switch), ("bpt", harness))
        )
        r = sh("ip", "netns", "exec", self.name, "sh", "-ec", script, check=False)
        if r.returncode != 0:
            raise SetupError(f"cannot steer the veths' receive work (RPS): {r.stderr.strip()}")
        others = [str(c) for c in range(cpus) if c != harness_cpu]
        return f"the switch's ends' receive work on core(s) {','.join(others)}, the harness's on core {harness_cpu}"

    def enter(self) -> None:
        """Move the calling (main) thread into the namespace; threads and processes started later follow."""
        if threading.active_count() != 1 or len(os.listdir("/proc/self/task")) != 1:
            raise SetupError("the harness must enter the namespace before it starts any thread")
        self._home = os.open("/proc/self/ns/net", os.O_RDONLY)
        fd = os.open(f"/run/netns/{self.name}", os.O_RDONLY)
        try:
            _setns(fd)
        finally:
            os.close(fd)
        missing = [f"bpt{p}" for p in self.ports if f"bpt{p}" not in netdev()]
        if missing:
            raise SetupError(f"entered {self.name} but do not see {missing}")

    def leave(self) -> None:
        if self._home is not None:
            _setns(self._home)
            os.close(self._home)
            self._home = None

    def delete(self) -> None:
        self.leave()
        if not self.created:
            return
        if delete_namespace(self.name):
            self.created = False
        else:
            err.print(f"[red]warning: could not delete network namespace {self.name}[/]")


def netdev() -> dict[str, tuple[int, int, int]]:
    """(rx_packets, tx_packets, rx_dropped) per interface of the main thread's network namespace
    (/proc/self/net/dev).  A veth counts in rx_dropped the frames its peer sent that it could not queue."""
    out = {}
    for line in Path("/proc/self/net/dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        f = rest.split()
        out[name.strip()] = (int(f[1]), int(f[9]), int(f[3]))
    return out
