"""A kernel switch's data plane outlives its process; stopping a switch takes it down (issue 44, defect 2).

The kernel target attaches its programs to its ports with ``tc`` (softswitch/ebpf/switch.py ``attach``):
attached so, a program stays on the port and goes on forwarding by its old tables after its process is
SIGKILLed.  Before: ``distcache-ctl fail``, the fault matrix and the controller treated "process gone" as
"data plane gone", and the controller let the shims stop invalidating a spine that a killed client leaf
still routed reads to.  Now a switch's spec names the command that takes its data plane down
(``detach``: ``python -m softswitch --dataplane ebpf --cleanup`` with the switch's own arguments), every
stop runs it, and the controller counts a data plane as gone only once that ran (``data_plane_gone``),
fencing a switch it declares dead whose process is gone.

No p4c here: any clang-built TC object attaches and detaches the way p4c-ebpf's does, so these tests use
``build/turnaround.bpf.o`` (tools/turnaround), loaded and attached by the target's own functions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import text_format

from controller.controller import Controller
from controller.state import Failure
from distcache.cluster import Cluster, Role
from harness.bpffs import sbin_tool
from harness.processes import SwitchProcesses, pid_alive
from softswitch.dataplane import PROGRAM
from softswitch.ebpf.switch import attached, pin_root
from tests.common.softswitch_helpers import free_tcp_port

REPO = Path(__file__).resolve().parents[2]
OBJECT = REPO / "build" / "turnaround.bpf.o"
DEVICE_IDS = (3901, 3902)  # far above any deployment's (1, 64.., 128..): their pins are never touched

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: loads BPF and attaches it with tc"),
    pytest.mark.skipif(not OBJECT.is_file(), reason="build/turnaround.bpf.o missing: run make deps"),
    pytest.mark.skipif(sbin_tool("tc") is None, reason="tc missing: apt-get install iproute2"),
]

# a kernel "switch" as the target starts one: load, pin under its device's root, attach to its port with the
# target's own attach(); then serve a TCP port (what SwitchProcesses waits for) until killed
_SWITCH = """\
import socket, sys, time
from pathlib import Path
from harness import bpffs
from softswitch.ebpf import libbpf
from softswitch.ebpf.switch import attach, pin_root
obj, dev, device_id, port = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
root = pin_root(device_id)
bpffs.unpin(root)
loaded = libbpf.BpfObject(obj, root)
attach(dev, loaded.pin_programs(root / "progs")["tc"])
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", port))
server.listen()
while True:
    time.sleep(60)
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def ports() -> Iterator[list[str]]:
    """Two veth pairs in the root namespace (as Mininet's switch ports are), one port per switch; no traffic
    is sent over them."""
    names = [f"dck{os.getpid() % 100000}{i}" for i in range(2)]
    for name in names:
        _ip("link", "add", name, "type", "veth", "peer", "name", name + "p")
        _ip("link", "set", name, "up")
    yield names
    for name in names:
        subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)


@pytest.fixture
def procs(tmp_path: Path, ports: list[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[SwitchProcesses]:
    """Switches k0 and k1 (the cluster's cl0 and sl0 in the controller test), each a kernel program on its
    port, with the detach command a deployment records for a kernel switch."""
    specs = {}
    for name, dev, device_id in zip(("cl0", "sl0"), ports, DEVICE_IDS, strict=True):
        port = free_tcp_port()
        specs[name] = {
            "cmd": [sys.executable, "-c", _SWITCH, str(OBJECT), dev, str(device_id), str(port)],
            "pid_file": str(tmp_path / f"{name}.pid"),
            "log": str(tmp_path / f"{name}.out"),
            "grpc": f"127.0.0.1:{port}",
            "detach": [
                *(sys.executable, "-m", "softswitch", "--dataplane", "ebpf", "--cleanup"),
                *("--device-id", str(device_id), "-i", f"1@{dev}"),
            ],
        }
    (tmp_path / "switches.json").write_text(json.dumps(specs))
    # for this test's switch processes only (set on os.environ for good, it reached every later test's children)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    p = SwitchProcesses(tmp_path / "switches.json")
    yield p
    for name in specs:
        if p.running(name):
            p.stop(name)
        else:
            p.fence(name)


def _crash(procs: SwitchProcesses, name: str) -> None:
    """SIGKILL the switch behind the harness's back, as a crash (or the OOM killer) would."""
    pid = procs.pid(name)
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)
    procs._children[name].wait(5)
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_killed_kernel_switch_forwards_until_fenced_and_a_stopped_one_forwards_nothing(
    procs: SwitchProcesses, ports: list[str]
) -> None:
    procs.start("cl0")
    procs.start("sl0")
    assert attached(ports[0]) and attached(ports[1])
    assert not procs.data_plane_gone("cl0")
    _crash(procs, "cl0")
    assert not procs.running("cl0")
    # the kernel runs the program without its process: the port still forwards by the old tables
    assert attached(ports[0]) and pin_root(DEVICE_IDS[0]).exists()
    assert not procs.data_plane_gone("cl0"), "a killed kernel switch was taken for one that forwards nothing"
    procs.fence("cl0")
    assert not attached(ports[0]) and not pin_root(DEVICE_IDS[0]).exists()
    assert procs.data_plane_gone("cl0")
    assert attached(ports[1]) and pin_root(DEVICE_IDS[1]).exists(), "fencing one switch touched another"
    # started again it forwards; stopped (distcache-ctl fail, the fault matrix) it forwards nothing at once
    procs.start("cl0")
    assert attached(ports[0]) and not procs.data_plane_gone("cl0")
    procs.stop("cl0")
    assert not attached(ports[0]) and procs.data_plane_gone("cl0")


def test_the_controller_keeps_invalidating_a_spine_a_killed_kernel_leaf_still_routes_to(
    tmp_path: Path, procs: SwitchProcesses, ports: list[str]
) -> None:
    """sp0 is failed and cl0 never took the routes without it (it crashed first).  While cl0's program runs,
    the shims must go on invalidating sp0; once the controller has declared cl0 dead it takes cl0's data plane
    down itself, and from then on sp0 may be skipped."""
    cluster = Cluster(spines=2)
    p4info = tmp_path / "p4info.txt"
    p4info.write_text(text_format.MessageToString(PROGRAM.p4info()))
    ctl = Controller(
        cluster, p4info, lambda h: f"unix:{tmp_path / h.name}.sock", b"", tmp_path / "state.json", procs=procs
    )
    try:
        sp0, cl0 = cluster.spine(0), next(s for s in cluster.switches() if s.role == Role.CLIENT_LEAF)
        ctl.state.failed[sp0.name] = Failure(admin=True, since=0.0)
        procs.start(cl0.name)
        assert ctl.shim_down() == []  # cl0 may send reads to sp0
        _crash(procs, cl0.name)
        assert attached(ports[0])
        assert ctl.shim_down() == [], "sp0 skipped while a killed kernel leaf's program still routes reads to it"
        ctl.failover.declare_dead(cl0, time.monotonic() - 1.0, "P4Runtime unreachable")
        assert not attached(ports[0]), "the controller left a dead kernel switch's data plane running"
        assert ctl.shim_down() == [sp0.switch_id]
    finally:
        ctl.close()
