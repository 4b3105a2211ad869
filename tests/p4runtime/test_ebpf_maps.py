"""Table entries as the PSA build's BPF maps hold them (issue 19: the eBPF target's P4Runtime server writes its
tables there): the layouts read from the object's BTF (softswitch.ebpf.layout) fit every table, key field and
action parameter of the P4Info; entries encoded by softswitch.ebpf.codec read back as written; and the kernel's
ingress program acts on them -- a route written through the codec forwards a frame with the next hop's
address and the TTL decremented, and sending it back where it came from is refused as a loop.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from distcache import p4names
from distcache.cluster import PortKind, Role
from distcache.p4names import DropReason
from harness import bpffs
from harness.netns import delete_namespace, make_veth_namespace
from p4rt.client import P4RuntimeError, SwitchConnection
from p4rt.p4info import Match
from softswitch.dataplane import PROGRAM
from softswitch.ebpf import build, layout, libbpf
from softswitch.ebpf.codec import TableCodec
from softswitch.ebpf.state import EbpfState, Ports
from softswitch.server import P4RuntimeServer
from tests.common.ebpf_helpers import drops

pytestmark = [
    pytest.mark.ebpf,
    pytest.mark.skipif(bool(build.missing_tools()), reason=f"needs {', '.join(build.missing_tools())}"),
    pytest.mark.skipif(os.geteuid() != 0, reason="loading BPF programs needs root"),
]

NS = f"dcbpfm-{os.getpid()}"
IN_IF, IN_HOST, OUT_IF, OUT_HOST = "dcbm-in", "dcbm-inh", "dcbm-out", "dcbm-outh"
TC_INGRESS, INITIALIZER = "classifier/tc-ingress", "classifier/map-initializer"
NEXT_HOP = 0x02AABBCCDDEE
DEVICE = 1


def test_every_table_has_maps_its_entries_fit(
    ebpf_layouts: dict[str, layout.MapLayout], ebpf_build: build.BpfBuild
) -> None:
    """Each table's key members and each action's parameters are as wide as the P4Info says, and an action's
    number is the one p4c-ebpf's C gives it (``#define <TABLE>_ACT_<ACTION> <n>``)."""
    defines = {m[1]: int(m[2]) for m in re.finditer(r"#define (\w+_ACT_\w+) (\d+)", ebpf_build.c_file.read_text())}
    checked = 0
    for t in PROGRAM.tables:
        codec = TableCodec.of(PROGRAM, t.name, ebpf_layouts)
        value = codec.entries.value
        assert isinstance(value, layout.TableValue)
        for a in t.actions:
            if a == "NoAction":
                continue
            member = value.by_name(layout.c_name(a))
            assert defines[f"{layout.c_name(t.name)}_ACT_{layout.c_name(a)}".upper()] == member.id, (t.name, a)
            checked += 1
    assert checked >= len(PROGRAM.tables)


def _some(bitwidth: int, salt: int) -> int:
    """A value that fills the width (the top and bottom bits set) and differs per field."""
    return ((1 << (bitwidth - 1)) | (0x5A5A5A5A5A5A5A5A5A5A5A5A5A5A5A5A * (salt + 1))) & ((1 << bitwidth) - 1) | 1


def test_every_entry_reads_back_as_written(ebpf_layouts: dict[str, layout.MapLayout]) -> None:
    for t in PROGRAM.tables:
        codec = TableCodec.of(PROGRAM, t.name, ebpf_layouts)
        if t.keys:
            full = tuple((_some(k.bitwidth, i), (1 << k.bitwidth) - 1) for i, k in enumerate(t.keys))
            assert codec.match(codec.key(full)) == full, t.name
            if codec.lpm:
                w = t.keys[-1].bitwidth
                mask = ((1 << w) - 1) ^ ((1 << (w - 7)) - 1)  # a 7-bit prefix
                prefix = (*full[:-1], (full[-1][0] & mask, mask))
                assert codec.match(codec.key(prefix)) == prefix, t.name
                assert codec.match(codec.key((*full[:-1], (0, 0)))) == (*full[:-1], (0, 0)), t.name
        for a in t.actions:
            params = {p.name: _some(p.bitwidth, i) for i, p in enumerate(PROGRAM.action(a).params)}
            assert codec.action(codec.value(a, params)) == (a, params), (t.name, a)


@pytest.fixture
def attached(ebpf_build: build.BpfBuild) -> Iterator[tuple[Path, dict[str, int]]]:
    """The program on the ingress of two veths in a namespace of the test's: (pin root, ifindex by name)."""
    root = bpffs.BPFFS / f"dctest-maps-{os.getpid()}"
    bpffs.unpin(root)
    obj = libbpf.BpfObject(ebpf_build.object_file, root)
    make_veth_namespace(NS, [(IN_IF, IN_HOST), (OUT_IF, OUT_HOST)])
    try:
        obj.test_run(INITIALIZER, bytes(128))
        pinned = obj.pin_programs(root / "progs")
        ifindex = {}
        for dev in (IN_IF, OUT_IF):
            for cmd in (
                ["tc", "qdisc", "add", "dev", dev, "clsact"],
                ["tc", "filter", "add", "dev", dev, "ingress", "bpf", "direct-action", "object-pinned",
                 str(pinned[TC_INGRESS])],
            ):  # fmt: skip
                done = _inside(cmd)
                assert done.returncode == 0, f"{' '.join(cmd)}: {done.stderr}"
            ifindex[dev] = int(_inside(["ip", "-o", "link", "show", dev]).stdout.split(":")[0])
        yield root, ifindex
    finally:
        delete_namespace(NS)
        obj.close()
        bpffs.unpin(root)


def _inside(cmd: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    # not `ip netns exec`: it remounts /sys, and bpffs with it
    return subprocess.run(
        ["nsenter", f"--net=/run/netns/{NS}", *cmd], capture_output=True, text=True, check=False, timeout=timeout
    )


def _write(root: Path, layouts: dict[str, layout.MapLayout], table: str, match, action: str, params: dict) -> None:  # noqa: ANN001
    """Write one entry (``match`` None: the default entry) through the codec, as the server will."""
    codec = TableCodec.of(PROGRAM, table, layouts)
    fd = libbpf.map_get(root / (codec.default.name if match is None else codec.entries.name))
    try:
        key = bytes(codec.default.key_size) if match is None else codec.key(match)
        libbpf.update(fd, key, codec.value(action, params))
    finally:
        os.close(fd)


SEND_AND_LISTEN = r"""
import socket, struct, sys, time
out = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
out.bind((sys.argv[2], 0))
out.settimeout(0.5)
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
payload = b"hello"
udp = struct.pack("!HHHH", 40000, 9999, 8 + len(payload), 0) + payload
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, bytes([10, 1, 0, 5]), bytes([10, 9, 9, 9]))
s.send(bytes.fromhex("02ff00000081020000000001") + b"\x08\x00" + ip + udp)
end = time.monotonic() + 1.0
while time.monotonic() < end:
    try:
        f = out.recv(2000)
    except socket.timeout:
        break
    if f[12:14] == b"\x08\x00":  # IPv4 only: the kernel's own IPv6 neighbour traffic is not ours
        print(f.hex())
"""


def test_the_ingress_program_routes_by_entries_the_codec_wrote(
    attached: tuple[Path, dict[str, int]], ebpf_layouts: dict[str, layout.MapLayout]
) -> None:
    root, ifindex = attached
    layouts = ebpf_layouts
    config = {"switch_id": 64, "role": int(Role.STORAGE_LEAF), "mechanism": 0}
    _write(root, layouts, p4names.SWITCH_CONFIG, None, p4names.SET_CONFIG, config)
    for dev in (IN_IF, OUT_IF):
        _write(
            root,
            layouts,
            p4names.PORT_KIND,
            ((ifindex[dev], 0x1FF),),
            p4names.SET_PORT_KIND,
            {"kind": int(PortKind.STORAGE)},
        )
    route = ((0x0A090909, 0xFFFFFFFF),)  # 10.9.9.9/32
    _write(root, layouts, p4names.IPV4_LPM, route, p4names.SET_NHOP, {"dmac": NEXT_HOP, "port": ifindex[OUT_IF]})
    done = _inside([sys.executable, "-c", SEND_AND_LISTEN, IN_HOST, OUT_HOST])
    assert done.returncode == 0, done.stderr
    frames = [bytes.fromhex(line) for line in done.stdout.split()]
    assert len(frames) == 1, done.stdout
    f = frames[0]
    assert f[:6] == NEXT_HOP.to_bytes(6, "big") and f[12:14] == b"\x08\x00"
    assert f[14 + 8] == 63 and f[14 + 16 : 14 + 20] == bytes([10, 9, 9, 9])  # TTL decremented, same destination
    # read back through the map: the entry the program used, decoded as written
    codec = TableCodec.of(PROGRAM, p4names.IPV4_LPM, layouts)
    fd = libbpf.map_get(root / codec.entries.name)
    try:
        held = {
            codec.match(k): codec.action(libbpf.lookup(fd, k, codec.entries.value_size) or b"")
            for k in libbpf.keys(fd, codec.entries.key_size)
        }
    finally:
        os.close(fd)
    assert held == {route: (p4names.SET_NHOP, {"dmac": NEXT_HOP, "port": ifindex[OUT_IF]})}
    # the same route out of the port the frame came in by: a loop, refused and counted
    _write(root, layouts, p4names.IPV4_LPM, route, p4names.SET_NHOP, {"dmac": NEXT_HOP, "port": ifindex[IN_IF]})
    before = drops(root, layouts)
    done = _inside([sys.executable, "-c", SEND_AND_LISTEN, IN_HOST, OUT_HOST])
    assert done.returncode == 0 and done.stdout.split() == [], done.stdout
    after = drops(root, layouts)
    assert {r: after[r] - before[r] for r in DropReason if after[r] != before[r]} == {DropReason.LOOP: 1}


def test_softswitchs_p4runtime_server_drives_the_kernel_program_through_its_maps(
    attached: tuple[Path, dict[str, int]], ebpf_layouts: dict[str, layout.MapLayout]
) -> None:
    """The same server softswitch runs, over EbpfState: a controller writes with P4Runtime port numbers (1 and
    2), the maps hold the interfaces' indexes, the kernel forwards by them, and everything reads back as the
    controller wrote it -- entries, defaults, counters the program moved, a meter's rates."""
    root, ifindex = attached
    ports = Ports({1: ifindex[IN_IF], 2: ifindex[OUT_IF]})
    state = EbpfState(PROGRAM, ebpf_layouts, root, ports)
    server = P4RuntimeServer(state, DEVICE, "127.0.0.1:0")
    server.start()
    conn = SwitchConnection(server.address, DEVICE)
    try:
        conn.connect()
        conn.set_pipeline(PROGRAM.p4info())
        conn.set_default(p4names.SWITCH_CONFIG, p4names.SET_CONFIG, {"switch_id": 64, "role": int(Role.STORAGE_LEAF),
                                                          "mechanism": 0})  # fmt: skip
        for port in (1, 2):
            conn.insert(
                p4names.PORT_KIND,
                {p4names.KEY_INGRESS_PORT: port},
                p4names.SET_PORT_KIND,
                {"kind": int(PortKind.STORAGE)},
            )
        route = {p4names.KEY_IPV4_DST: Match(0x0A090900, prefix_len=24)}
        conn.insert(p4names.IPV4_LPM, route, p4names.SET_NHOP, {"dmac": NEXT_HOP, "port": 2})
        with pytest.raises(P4RuntimeError) as exists:
            conn.insert(p4names.IPV4_LPM, route, p4names.SET_NHOP, {"dmac": NEXT_HOP, "port": 2})
        assert exists.value.code == "ALREADY_EXISTS"
        done = _inside([sys.executable, "-c", SEND_AND_LISTEN, IN_HOST, OUT_HOST])
        frames = [bytes.fromhex(line) for line in done.stdout.split()]
        assert len(frames) == 1 and frames[0][:6] == NEXT_HOP.to_bytes(6, "big"), done.stdout + done.stderr
        # the map holds the interface's index; P4Runtime reads back the port
        codec, fd = (
            TableCodec.of(PROGRAM, p4names.IPV4_LPM, ebpf_layouts),
            state.tables[p4names.IPV4_LPM].entries_map.fd,
        )
        (key,) = libbpf.keys(fd, codec.entries.key_size)
        held = libbpf.lookup(fd, key, codec.entries.value_size)
        assert held is not None and codec.action(held)[1]["port"] == ifindex[OUT_IF]
        assert conn.read_table(p4names.IPV4_LPM) == [(route, p4names.SET_NHOP, {"dmac": NEXT_HOP, "port": 2})]
        assert {m[p4names.KEY_INGRESS_PORT] for m, _, _ in conn.read_table(p4names.PORT_KIND)} == {1, 2}
        config = {"switch_id": 64, "role": int(Role.STORAGE_LEAF), "mechanism": 0}
        assert conn.read_default(p4names.SWITCH_CONFIG) == (p4names.SET_CONFIG, config)
        # back where it came from: a loop the program counts, read over P4Runtime
        conn.modify(p4names.IPV4_LPM, route, p4names.SET_NHOP, {"dmac": NEXT_HOP, "port": 1})
        before = conn.read_counter(p4names.DC_DROPS, int(DropReason.LOOP))[int(DropReason.LOOP)][0]
        done = _inside([sys.executable, "-c", SEND_AND_LISTEN, IN_HOST, OUT_HOST])
        assert done.stdout.split() == []
        assert conn.read_counter(p4names.DC_DROPS, int(DropReason.LOOP))[int(DropReason.LOOP)][0] == before + 1
        conn.delete(p4names.IPV4_LPM, route)
        assert conn.read_table(p4names.IPV4_LPM) == []
        with pytest.raises(P4RuntimeError) as missing:
            conn.delete(p4names.IPV4_LPM, route)
        assert missing.value.code == "NOT_FOUND"
        # a meter's rates, written and read back; cleared, it is unconfigured again
        conn.set_meter(p4names.CACHE_METER, 0, 1000, 10, 3000, 30)
        assert conn.read_meter(p4names.CACHE_METER) == {0: (1000, 10, 3000, 30)}
        conn.clear_meter(p4names.CACHE_METER, 0)
        assert conn.read_meter(p4names.CACHE_METER) == {0: None}
    finally:
        conn.close()
        server.stop()
        state.close()
