"""Every constant p4src/ shares with Python is held equal here, on any machine.

p4src/include/define.p4 and size.p4 declare the wire format (version, port,
header length, ops, statuses, flags), what the controller writes (roles, port
kinds, mechanisms), the counter indexes the control plane reads (drop
reasons, stats) and the sizes.  ``make constants`` (tools/gen_constants.py)
writes their Python twin, distcache/p4defines.py, and the P4Info names,
distcache/p4names.py: a P4 change without it fails the freshness test here.
distcache.wire and distcache.cluster own the wire format and what the
controller writes; a value changed on one side only fails here.  Both
directions are checked: every Python member has its P4 constant and every P4
constant of a family has its Python member.
"""

from __future__ import annotations

import functools
import operator
import re
import shutil
from enum import IntEnum
from pathlib import Path

import pytest

from distcache import p4names, wire
from distcache.cluster import MAX_SPINES, Mechanism, PortKind, Role
from distcache.hashing import N_SPINE_BUCKETS
from distcache.wire import Flag, Op, Status
from tools import gen_constants

INCLUDE = Path(__file__).resolve().parents[2] / "p4src" / "include"


def _consts() -> dict[str, int]:
    text = (INCLUDE / "define.p4").read_text()
    return {
        name: int(value, 0)
        for name, value in re.findall(
            r"^(?:@\w+\([^)]*\)\s+)?const\s+bit<\d+>\s+(\w+)\s*=\s*(\w+)\s*;", text, flags=re.M
        )
    }


def _defines() -> dict[str, int]:
    text = (INCLUDE / "size.p4").read_text()
    return {name: int(value, 0) for name, value in re.findall(r"^#define\s+(\w+)\s+(\d+)", text, flags=re.M)}


CONSTS = _consts()
DEFINES = _defines()

FAMILIES: list[tuple[str, type[IntEnum]]] = [
    ("OP_", Op),
    ("STATUS_", Status),
    ("ROLE_", Role),
    ("PORT_", PortKind),
    ("MECH_", Mechanism),
    ("DROP_", p4names.DropReason),
    ("STAT_", p4names.Stat),
]
NOT_ENUM = {"OP_REPLY_BIT", "FLAG_ATTEMPT_SHIFT"}  # a mask over op codes, a shift: not members


@pytest.mark.parametrize(("prefix", "enum"), FAMILIES, ids=[p.rstrip("_") for p, _ in FAMILIES])
def test_enum_families_are_equal_both_ways(prefix: str, enum: type[IntEnum]) -> None:
    p4 = {k[len(prefix) :]: v for k, v in CONSTS.items() if k.startswith(prefix) and k not in NOT_ENUM}
    py = {m.name: int(m) for m in enum}
    assert p4 == py, f"{prefix}* in define.p4 differ from {enum.__module__}.{enum.__name__}"


def test_wire_constants() -> None:
    assert CONSTS["DC_VERSION"] == wire.VERSION
    assert CONSTS["DC_PORT"] == wire.DC_PORT
    assert CONSTS["DC_HEADER_LEN"] == wire.HEADER_LEN
    assert CONSTS["MAX_CACHEABLE"] == wire.MAX_CACHEABLE
    assert CONSTS["MAX_VALUE"] == wire.MAX_VALUE
    assert CONSTS["FLAG_CACHED"] == int(Flag.CACHED)
    assert CONSTS["FLAG_ATTEMPT_SHIFT"] == wire.ATTEMPT_SHIFT
    assert CONSTS["FLAG_ATTEMPT"] >> CONSTS["FLAG_ATTEMPT_SHIFT"] == wire.MAX_WIRE_ATTEMPT
    assert CONSTS["OP_REPLY_BIT"] == int(Op.GET_REPLY) ^ int(Op.GET)
    assert all(int(op.reply()) == int(op) | CONSTS["OP_REPLY_BIT"] for op in wire.REQUEST_OPS | wire.COHERENCE_OPS)


def test_flags_are_equal_both_ways() -> None:
    """Every FLAG_* of define.p4 is a ``wire.Flag`` member and back (the attempt field included, a
    multi-bit member that iterating an IntFlag would skip); the flag bits do not overlap."""
    p4 = {k[len("FLAG_") :]: v for k, v in CONSTS.items() if k.startswith("FLAG_") and k not in NOT_ENUM}
    py = {name: int(m) for name, m in Flag.__members__.items() if m}
    assert p4 == py, "FLAG_* in define.p4 differ from distcache.wire.Flag"
    assert sum(py.values()) == functools.reduce(operator.or_, py.values())


def test_sizes() -> None:
    assert DEFINES["CACHE_SLOTS"] == p4names.CACHE_SLOTS
    assert DEFINES["MAX_CHUNKS"] == p4names.MAX_CHUNKS == wire.MAX_CHUNKS
    assert DEFINES["CACHE_VALUE_CELLS"] == p4names.CACHE_SLOTS * p4names.MAX_CHUNKS
    assert DEFINES["SPINE_BUCKETS"] == p4names.SPINE_BUCKETS == N_SPINE_BUCKETS
    assert DEFINES["MAX_SWITCHES"] == p4names.MAX_SWITCHES
    assert DEFINES["N_DROP_REASONS"] == p4names.N_DROP_REASONS > max(p4names.DropReason)
    assert DEFINES["N_STATS"] == p4names.N_STATS > max(p4names.Stat)
    assert DEFINES["MAX_PORTS"] == p4names.MAX_PORTS
    assert DEFINES["MAX_ROUTES"] == p4names.MAX_ROUTES
    assert DEFINES["LOAD_WINDOW_SHIFT"] == p4names.LOAD_WINDOW_SHIFT
    assert DEFINES["TRANSIT_SLOTS"] == p4names.TRANSIT_SLOTS
    assert DEFINES["REPLICA_SLOTS"] == p4names.REPLICA_SLOTS
    assert DEFINES["MAX_REPLICATED_KEYS"] == p4names.MAX_REPLICATED_KEYS
    assert CONSTS["MAX_SPINE_ID"] == MAX_SPINES
    assert DEFINES["LIVENESS_SPINES"] == p4names.LIVENESS_SPINES > MAX_SPINES
    assert DEFINES["DEAD_AFTER_US"] == p4names.DEAD_AFTER_US
    assert DEFINES["DEAD_AFTER_MAX_US"] == p4names.DEAD_AFTER_MAX_US
    assert DEFINES["HOLD_US"] == p4names.HOLD_US


def test_cpu_port_is_the_one_every_launcher_gives_bmv2() -> None:
    """Packet-out enters at CPU_PORT: the P4 parser's constant, softswitch's, and BMv2's --cpu-port."""
    from tests.ptf import run as ptf_run

    assert CONSTS["CPU_PORT"] == p4names.CPU_PORT == ptf_run.CPU_PORT
    assert "BMV2_CPU_PORT = p4names.CPU_PORT" in (INCLUDE.parents[1] / "mininet/dcnet/p4switch.py").read_text()


def test_reader_sees_every_constant() -> None:
    """The regexes above must not silently skip declarations (hex, odd spacing)."""
    text = (INCLUDE / "define.p4").read_text()
    assert len(CONSTS) == len(re.findall(r"^(?:@\w+\([^)]*\)\s+)?const\b", text, flags=re.M))
    text = (INCLUDE / "size.p4").read_text()
    assert len(DEFINES) == len(re.findall(r"^#define\s+\w+\s+\d", text, flags=re.M))


def test_generated_constants_are_fresh() -> None:
    """distcache/p4names.py and p4defines.py are what ``make constants`` writes from p4src/ as it is now
    (from p4c's P4Info where p4c is installed, else from the source reader)."""
    stale = [
        str(p.relative_to(gen_constants.REPO)) for p, text in gen_constants.rendered().items() if p.read_text() != text
    ]
    assert stale == [], f"generated from an older p4src/: run make constants ({stale})"


@pytest.mark.skipif(
    shutil.which(gen_constants.P4C) is None, reason="p4c-bm2-ss not installed (softswitch-only machine)"
)
def test_p4c_and_the_source_reader_generate_the_same_names() -> None:
    """A machine without p4c writes the same p4names.py as one with it."""
    via_p4c, via_source = gen_constants.from_p4c(), gen_constants.from_source()
    assert gen_constants.render_p4names(via_p4c) == gen_constants.render_p4names(via_source)
