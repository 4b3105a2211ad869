"""BMv2's Thrift server listens on loopback only (harness.loopbind; issue 44).

BMv2 takes no address for its Thrift port and binds every interface.  A deployment on BMv2 starts its switch
processes in a cgroup whose sock_addr programs (tools/loopbind) turn a TCP bind to 0.0.0.0 or :: into one to
127.0.0.1 or ::1.  No BMv2 here: any process of the cgroup binds the same way, so a Python one stands in,
started as the deployment and `recover` start a switch (a preexec join, and SwitchProcesses with the spec's
``cgroup``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.bpffs import sbin_tool
from harness.loopbind import OBJECT, LoopbackCgroup
from harness.processes import SwitchProcesses
from tests.common.softswitch_helpers import free_tcp_port

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: makes a cgroup and attaches BPF to it"),
    pytest.mark.skipif(not OBJECT.is_file(), reason="build/loopbind.bpf.o missing: run make deps"),
    pytest.mark.skipif(sbin_tool("bpftool") is None, reason="bpftool missing: apt-get install bpftool"),
]

# what BMv2's Thrift server does: bind every address (v4, and v6 as Thrift's TServerSocket may), then serve
_SERVER = """\
import socket, sys, time
port = int(sys.argv[1])
v4 = socket.socket(); v4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); v4.bind(("0.0.0.0", port)); v4.listen()
v6 = socket.socket(socket.AF_INET6); v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
v6.bind(("::", port)); v6.listen()
udp = socket.socket(type=socket.SOCK_DGRAM); udp.bind(("0.0.0.0", 0))
print(v4.getsockname()[0], v6.getsockname()[0], udp.getsockname()[0], flush=True)
time.sleep(60)
"""


@pytest.fixture
def cgroup() -> Iterator[LoopbackCgroup]:
    cg = LoopbackCgroup(f"dcloopbind-t{os.getpid()}")
    yield cg
    cg.close()


def test_every_tcp_server_of_the_cgroup_listens_on_loopback_only(cgroup: LoopbackCgroup) -> None:
    for preexec in (cgroup.preexec, None):
        p = subprocess.Popen([sys.executable, "-c", _SERVER, str(free_tcp_port())], stdout=subprocess.PIPE,
                             text=True, preexec_fn=preexec)  # fmt: skip
        try:
            assert p.stdout is not None
            got = p.stdout.readline().split()
        finally:
            p.kill()
            p.wait()
        if preexec is not None:
            assert got == ["127.0.0.1", "::1", "0.0.0.0"]  # TCP kept on loopback; UDP as it was
        else:
            assert got == ["0.0.0.0", "::", "0.0.0.0"]  # outside the cgroup nothing changes
    cgroup.close()
    assert not cgroup.path.exists() and not cgroup.pins.exists()


def test_a_switch_started_again_by_recover_joins_the_cgroup(cgroup: LoopbackCgroup, tmp_path: Path) -> None:
    port = free_tcp_port()
    spec = {
        "cmd": [sys.executable, "-c", _SERVER, str(port)],
        "pid_file": str(tmp_path / "sp0.pid"),
        "log": str(tmp_path / "sp0.out"),
        "grpc": f"127.0.0.1:{port}",
        "cgroup": str(cgroup.path),
    }
    (tmp_path / "switches.json").write_text(json.dumps({"sp0": spec}))
    procs = SwitchProcesses(tmp_path / "switches.json")
    procs.start("sp0")
    try:
        assert (tmp_path / "sp0.out").read_text().split()[:2] == ["127.0.0.1", "::1"]
        assert str(procs.pid("sp0")) in (cgroup.path / "cgroup.procs").read_text().split()
    finally:
        procs.stop("sp0")
