"""The PSA build of p4src/ in the kernel (issue 19): p4c-ebpf's C builds into a BPF object whose programs the
verifier takes, loaded under a pin root of its own (softswitch.ebpf); its map initializer fills the CRC32
table the hashes read; and its ingress program, attached to a veth in a namespace of the test's own, parses
frames and counts what DcValidation drops, in its own counter map, as BMv2 and softswitch count them.

What the build took in the shared P4 (each a limit of p4c-ebpf or of the kernel, met once for every
target): register indexes and values staged in metadata (a local whose address the map calls take stays on
the 512-byte stack), one register per detector structure (at most 64 maps per program), IPv4 options as
payload (each option length walked the whole ingress again: over the verifier's million instructions),
the parse status from metadata (p4c-ebpf compares `error` values wrongly).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from distcache.p4names import DropReason
from distcache.wire import DC_PORT, Message, Op, encode
from harness import bpffs
from harness.netns import delete_namespace, make_veth_namespace
from softswitch.ebpf import build, layout, libbpf
from tests.common.ebpf_helpers import drops

pytestmark = [
    pytest.mark.ebpf,
    pytest.mark.skipif(bool(build.missing_tools()), reason=f"needs {', '.join(build.missing_tools())}"),
    pytest.mark.skipif(os.geteuid() != 0, reason="loading BPF programs needs root"),
]

NS = f"dcbpf-{os.getpid()}"
SWITCH_IF, HOST_IF = "dcbpf-sw", "dcbpf-h"
TC_INGRESS, INITIALIZER = "classifier/tc-ingress", "classifier/map-initializer"
VERIFIER_LIMIT = 1_000_000  # instructions the kernel's verifier walks at most per program


@pytest.fixture(scope="module")
def loaded(ebpf_build: build.BpfBuild) -> Iterator[tuple[libbpf.BpfObject, Path]]:
    root = bpffs.BPFFS / f"dctest-{os.getpid()}"
    bpffs.unpin(root)
    obj = libbpf.BpfObject(ebpf_build.object_file, root)
    try:
        yield obj, root
    finally:
        obj.close()
        bpffs.unpin(root)


def test_the_verifier_takes_every_program(loaded: tuple[libbpf.BpfObject, Path]) -> None:
    obj, root = loaded
    assert set(obj.programs) == {INITIALIZER, TC_INGRESS, "xdp/xdp-ingress"}
    ingress = obj.programs[TC_INGRESS]
    assert 0 < ingress.verified_insns < VERIFIER_LIMIT
    print(f"tc ingress verified in {ingress.verified_insns} instructions (limit {VERIFIER_LIMIT})")
    # pinned under its own root, not /sys/fs/bpf's: a second switch gets tables of its own
    assert (root / "_dc_drops").exists() and not (bpffs.BPFFS / "_dc_drops").exists()


def _crc32_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        table.append(c)
    assert table[255] == 0x2D02EF8D  # the reflected CRC-32 table's last entry (zlib's)
    return table


def test_the_map_initializer_fills_the_crc32_table(loaded: tuple[libbpf.BpfObject, Path]) -> None:
    """Until it runs, every hash of the program is silently wrong (the table is zeros): the loader must run it."""
    obj, root = loaded
    fd = libbpf.map_get(root / "crc_lookup_tbl")
    try:
        before = libbpf.lookup(fd, bytes(4), 8192)
        assert before is not None and not any(before)
        assert obj.test_run(INITIALIZER, bytes(128)) == 0
        after = libbpf.lookup(fd, bytes(4), 8192)
    finally:
        os.close(fd)
    assert after is not None
    assert list(struct.unpack_from("<256I", after)) == _crc32_table()


def _frames() -> dict[DropReason, bytes]:
    eth = bytes.fromhex("02ff00000081") + bytes.fromhex("020000000001")
    get = encode(Message(op=Op.GET, digest=bytes(16), seq=1))

    def ipv4(payload: bytes, ihl: int = 5, proto: int = 17) -> bytes:
        hdr = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, 20 + len(payload), 1, 0, 64, proto, 0,
                          bytes([10, 2, 0, 1]), bytes([10, 1, 0, 1]))  # fmt: skip
        return eth + b"\x08\x00" + hdr + payload

    udp = struct.pack("!HHHH", 40000, DC_PORT, 8 + len(get), 0)
    return {
        DropReason.NOT_IPV4: eth + b"\x08\x06" + bytes(28),  # ARP
        DropReason.TRUNCATED: (eth + b"\x08\x00" + bytes([0x45]) + bytes(9)),  # an IPv4 header cut short
        DropReason.PARSER_OTHER: ipv4(udp + get, ihl=4),  # Ipv4BadIhl
        DropReason.BAD_VERSION: ipv4(udp + bytes([2]) + get[1:]),  # a DistCache header of version 2
    }


def test_the_ingress_program_counts_each_drop_reason(
    loaded: tuple[libbpf.BpfObject, Path], ebpf_layouts: dict[str, layout.MapLayout]
) -> None:
    """Frames written into a veth whose peer carries the ingress program (tc, direct action), in a namespace of
    the test's: each malformed one counted once under its own reason, in the program's own map."""
    obj, root = loaded
    obj.test_run(INITIALIZER, bytes(128))
    pinned = obj.pin_programs(root / "progs")
    make_veth_namespace(NS, [(SWITCH_IF, HOST_IF)])
    try:
        inside = ["nsenter", f"--net=/run/netns/{NS}"]  # not `ip netns exec`: it remounts /sys, bpffs with it
        for cmd in (
            ["tc", "qdisc", "add", "dev", SWITCH_IF, "clsact"],
            ["tc", "filter", "add", "dev", SWITCH_IF, "ingress", "bpf", "direct-action", "object-pinned",
             str(pinned[TC_INGRESS])],
        ):  # fmt: skip
            done = subprocess.run(inside + cmd, capture_output=True, text=True, check=False)
            assert done.returncode == 0, f"{' '.join(cmd)}: {done.stderr}"
        frames = _frames()
        before = drops(root, ebpf_layouts)
        send = (
            "import socket, sys\n"
            "s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n"
            f"s.bind(({HOST_IF!r}, 0))\n"
            "for f in sys.argv[1:]: s.send(bytes.fromhex(f))\n"
        )
        done = subprocess.run(
            [*inside, sys.executable, "-c", send, *(f.hex() for f in frames.values())],
            capture_output=True, text=True, check=False, timeout=30,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        after = drops(root, ebpf_layouts)
    finally:
        delete_namespace(NS)
    moved = {r: after[r] - before[r] for r in DropReason if after[r] != before[r]}
    assert moved == dict.fromkeys(frames, 1)


def test_a_refused_program_comes_back_with_the_verifiers_words(tmp_path: Path) -> None:
    """A program the kernel refuses raises LoadError naming it and ending with what the verifier said (here: a
    packet read without the bounds check every read needs), not a bare errno -- and not the words on a program
    of the same object that the verifier took before it."""
    src = tmp_path / "unchecked.c"
    src.write_text(
        "#include <linux/bpf.h>\n"
        '__attribute__((section("classifier/fine"), used)) int fine(struct __sk_buff *skb) { return 0; }\n'
        '__attribute__((section("classifier/unchecked"), used)) int unchecked(struct __sk_buff *skb)\n'
        "{ return *(int *)(long)skb->data; }\n"
        '__attribute__((section("license"), used)) char _license[] = "GPL";\n'
    )
    obj = tmp_path / "unchecked.o"
    done = subprocess.run(
        [build.CLANG, "-O2", "-g", "-target", "bpf", f"-I/usr/include/{os.uname().machine}-linux-gnu", "-c", str(src),
         "-o", str(obj)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    root = bpffs.BPFFS / f"dctest-refused-{os.getpid()}"
    try:
        with pytest.raises(libbpf.LoadError, match=r"(?s)classifier/unchecked.*invalid access to packet"):
            libbpf.BpfObject(obj, root)
    finally:
        bpffs.unpin(root)


def test_a_build_is_reused_while_its_inputs_stay_the_same(ebpf_build: build.BpfBuild, tmp_path: Path) -> None:
    """A kernel switch that restarts loads the program it built before (build.cached): no second compile for
    the same sources, defines and tools -- and a new one whenever any of them changes."""
    cache = ebpf_build.object_file.parents[1]
    stat = ebpf_build.object_file.stat()
    again = build.cached({}, cache)
    assert again == ebpf_build
    assert again.object_file.stat().st_mtime_ns == stat.st_mtime_ns  # not rebuilt
    assert [d.name for d in cache.iterdir()] == [ebpf_build.object_file.parent.name]  # one entry, no partial
    key = build._cache_key(build.P4_PSA, {})
    assert ebpf_build.object_file.parent.name == key
    assert build._cache_key(build.P4_PSA, {"DC_CPU_IFINDEX": 60001}) != key
    # a change to any P4 source beside the top (an included piece) is a new build
    p4 = tmp_path / "p4src"
    subprocess.run(["cp", "-r", str(build.P4_PSA.parents[1]), str(p4)], check=True)
    top = p4 / "psa" / build.P4_PSA.name
    assert build._cache_key(top, {}) == build._cache_key(top, {})
    before = build._cache_key(top, {})
    piece = next(f for f in sorted(p4.rglob("*.p4")) if f.parent.name != "psa")
    piece.write_text(piece.read_text() + "\n// changed\n")
    assert build._cache_key(top, {}) != before
