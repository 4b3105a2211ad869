"""No torn value on the kernel target (issue 19): a GET on one CPU while writes of the same key run on another.

p4c-ebpf has no @atomic: a GET could read chunks a concurrent UPDATE has half replaced.  DcCache reads the
value between two reads of the slot's write version (cache.p4, a seqlock whose writer is the INVALIDATE and
its UPDATE); a read a write began under goes on to the server.  Here the spine's ingress program runs, by
BPF_PROG_TEST_RUN, in two processes pinned to two CPUs (ebpf_torn_worker): one writes KEY again and again,
each write a value whose every 8-byte word is its seq; the other reads KEY and checks every cached reply is
one write's value.  The switch's READ_TORN count shows the race was met, not dodged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from distcache import p4names
from distcache.cluster import Cluster
from distcache.p4names import Stat
from distcache.partition import spine_buckets
from distcache.wire import DC_PORT
from harness import bpffs
from harness.netns import delete_namespace, make_veth_namespace
from p4rt.client import SwitchConnection
from p4rt.plan import plan
from softswitch.dataplane import PROGRAM
from softswitch.ebpf import build, layout, libbpf
from softswitch.ebpf.state import EbpfState, Ports
from softswitch.server import P4RuntimeServer
from tests.common.keys import digest

pytestmark = [
    pytest.mark.ebpf,
    pytest.mark.skipif(bool(build.missing_tools()), reason=f"needs {', '.join(build.missing_tools())}"),
    pytest.mark.skipif(os.geteuid() != 0, reason="loading BPF programs needs root"),
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a race between CPUs needs two of them"),
]

REPO = Path(__file__).resolve().parents[2]
NS = f"dcbpft-{os.getpid()}"
TC_INGRESS, INITIALIZER = "classifier/tc-ingress", "classifier/map-initializer"
DEVICE, SLOT, VERSION = 1, 5, 3
SECONDS = 3.0
C = Cluster(spines=2, storage_racks=2, client_racks=2)
SP0, SERVER, CLIENT = C.spine(0), C.server(0, 0), C.client(0, 0)
KEY = digest("torn")


def _inside(cmd: list[str]) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{NS}", *cmd]  # not `ip netns exec`: it remounts /sys, and bpffs with it


def _head(src: str, dst: str, sport: int, dport: int) -> str:
    """Ethernet, IPv4, UDP of a frame to the switch, lengths and checksums filled in by the worker."""
    eth = bytes.fromhex("0200000000020200000000010800")
    ip = (
        bytes([0x45, 0, 0, 0, 0, 1, 0, 0, 64, 17, 0, 0])
        + bytes(map(int, src.split(".")))
        + bytes(map(int, dst.split(".")))
    )
    return (eth + ip + sport.to_bytes(2, "big") + dport.to_bytes(2, "big") + bytes(4)).hex()


@pytest.fixture
def spine(ebpf_build: build.BpfBuild, ebpf_layouts: dict[str, layout.MapLayout]) -> Iterator[tuple[Path, dict]]:
    """sp0's program loaded (not attached: the workers run it), configured over P4Runtime as the controller
    would, KEY cached in SLOT; (the pinned ingress program, P4Runtime port -> ifindex, a connection)."""
    root = bpffs.BPFFS / f"dctest-torn-{os.getpid()}"
    bpffs.unpin(root)
    obj = libbpf.BpfObject(ebpf_build.object_file, root)
    devs = [(f"dcbt{p}", f"dcbt{p}h") for p in (1, 2, 3, 4)]
    make_veth_namespace(NS, devs)
    state = server = conn = None
    try:
        obj.test_run(INITIALIZER, bytes(128))
        pinned = obj.pin_programs(root / "progs")
        links = subprocess.run(_inside(["ip", "-o", "link", "show"]), capture_output=True, text=True, check=True)
        index = {
            line.split(":")[1].strip().split("@")[0]: int(line.split(":")[0]) for line in links.stdout.splitlines()
        }
        ports = {p: index[dev] for p, (dev, _) in zip((1, 2, 3, 4), devs, strict=True)}
        state = EbpfState(PROGRAM, ebpf_layouts, root, Ports(ports))
        server = P4RuntimeServer(state, DEVICE, "127.0.0.1:0")
        server.start()
        conn = SwitchConnection(server.address, DEVICE)
        conn.connect()
        conn.set_pipeline(PROGRAM.p4info())
        p = plan(C, SP0, spine_buckets([SP0.switch_id, C.spine(1).switch_id]))
        conn.set_default(p4names.SWITCH_CONFIG, p4names.SET_CONFIG, p.config)
        for e in p.defaults:
            conn.set_default(e.table, e.action, e.params_dict)
        for e in p.entries:
            conn.insert(e.table, e.match_dict, e.action, e.params_dict)
        conn.insert(p4names.CACHE_LOOKUP, {p4names.KEY_DC_KEY: int.from_bytes(KEY, "big")}, p4names.CACHE_HIT,
                    {"slot": SLOT, "version": VERSION})  # fmt: skip
        yield pinned[TC_INGRESS], {"ports": ports, "conn": conn}
    finally:
        if conn is not None:
            conn.close()
        if server is not None:
            server.stop()
        if state is not None:
            state.close()
        delete_namespace(NS)
        obj.close()
        bpffs.unpin(root)


def test_a_read_beside_writes_on_another_cpu_never_returns_a_torn_value(
    spine: tuple[Path, dict], tmp_path: Path
) -> None:
    prog, env = spine
    ports, conn = env["ports"], env["conn"]
    start = tmp_path / "start"
    spec = {
        "key": KEY.hex(),
        "target": SP0.switch_id,
        "epoch": 0,
        "version": VERSION,
        "first_seq": 1000,
        "get_head": _head(CLIENT.ip, SERVER.ip, 40000, DC_PORT),
        "write_head": _head(SERVER.ip, C.spine_address(SP0.switch_id), DC_PORT, DC_PORT),
        "start": str(start),
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    cpus = sorted(os.sched_getaffinity(0))[:2]
    procs = {}
    # the storage leaf sl0 is on port 1 (writes come up from it), client leaf cl0 on port 3 (reads)
    for role, port, cpu in (("writer", 1, cpus[1]), ("reader", 3, cpus[0])):
        argv = [sys.executable, "-m", "tests.p4runtime.ebpf_torn_worker", role, str(prog), str(ports[port]),
                str(cpu), str(SECONDS), str(tmp_path / "spec.json")]  # fmt: skip
        procs[role] = subprocess.Popen(
            _inside(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    for role, proc in procs.items():
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", f"{role}: {proc.stderr.read() if proc.stderr else ''}"
    start.touch()
    results = {}
    for role, proc in procs.items():
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, f"{role}: {err}"
        results[role] = json.loads(out.strip().splitlines()[-1])
    reads, writes = results["reader"], results["writer"]
    print(f"torn-read race: {reads} {writes}")
    assert writes["writes"] > 1000
    assert reads["hits"] > 1000 and reads["forwarded"] > 0, reads  # values served, and writes met
    assert reads["torn"] == 0, f"torn values served: {reads['examples']}"
    torn_detected = conn.read_counter(p4names.DC_STATS, int(Stat.READ_TORN))[int(Stat.READ_TORN)][0]
    print(f"READ_TORN={torn_detected}")
    assert torn_detected > 0, "no read met a write while it read the value: the race was not run"
