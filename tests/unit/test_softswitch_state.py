"""Matching semantics and storage of softswitch/state.py (no gRPC, no packets)."""

from __future__ import annotations

import pytest

from distcache import p4names
from softswitch.dataplane import PROGRAM
from softswitch.program import Action, Counter, MatchField, Param, Program, Register, Table
from softswitch.state import (
    EntryExistsError,
    EntryNotFoundError,
    RegisterArray,
    SwitchState,
    TableFullError,
)

pytestmark = pytest.mark.timeout(30)

ACTS = (Action("NoAction"), Action("fwd", (Param("port", 9),)), Action("mark", (Param("tag", 8),)))
MIXED = Program(
    "mixed",
    ACTS,
    (
        Table("t_tern", (MatchField("f", 16, "ternary"),), ("fwd", "NoAction"), "NoAction"),
        Table("t_range", (MatchField("r", 16, "range"), MatchField("e", 8, "exact")), ("fwd", "NoAction"), "NoAction"),
        Table(
            "t_opt", (MatchField("o", 8, "optional"), MatchField("t", 8, "ternary")), ("fwd", "NoAction"), "NoAction"
        ),
        Table(
            "t_lpm2",
            (MatchField("vrf", 8, "exact"), MatchField("dst", 32, "lpm")),
            ("fwd", "NoAction"),
            "NoAction",
            size=4,
        ),
        Table(
            "t_ex2",
            (MatchField("a", 16, "exact"), MatchField("b", 48, "exact")),
            ("fwd", "mark"),
            "mark",
            default_params=(("tag", 7),),
            size=2,
        ),
    ),
    (Register("r8", 8, 4), Register("r128", 128, 32768), Register("r1", 1, 10)),
    (Counter("c", 4),),
)


def ip(s: str) -> int:
    a, b, c, d = (int(x) for x in s.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


@pytest.fixture
def dc() -> SwitchState:
    return SwitchState(PROGRAM)


@pytest.fixture
def mixed() -> SwitchState:
    return SwitchState(MIXED)


def test_lpm_longest_prefix_wins(dc: SwitchState) -> None:
    t = dc.tables[p4names.IPV4_LPM]
    t.insert([(ip("10.0.0.0"), 8)], p4names.SET_NHOP, {"dmac": 1, "port": 1})
    t.insert([(ip("10.1.0.0"), 16)], p4names.SET_NHOP, {"dmac": 2, "port": 2})
    t.insert([(ip("10.1.2.0"), 24)], p4names.SET_NHOP, {"dmac": 3, "port": 3})
    t.insert([(0, 0)], p4names.SET_NHOP, {"dmac": 9, "port": 9})  # default route /0
    assert t.lookup(ip("10.1.2.3")) == (p4names.SET_NHOP, {"dmac": 3, "port": 3}, True)
    assert t.lookup(ip("10.1.3.3"))[1]["port"] == 2
    assert t.lookup(ip("10.2.0.1"))[1]["port"] == 1
    assert t.lookup(ip("192.168.0.1"))[1]["port"] == 9
    t.delete([(ip("10.1.2.0"), 24)])
    assert t.lookup(ip("10.1.2.3"))[1]["port"] == 2
    t.delete([(0, 0)])
    assert t.lookup(ip("192.168.0.1")) == (p4names.DROP, {}, False)  # the program's default: drop


def test_lpm_rejects_host_bits_and_long_prefix(dc: SwitchState) -> None:
    t = dc.tables[p4names.IPV4_LPM]
    with pytest.raises(ValueError, match="beyond prefix"):
        t.insert([(ip("10.1.2.3"), 24)], p4names.SET_NHOP, {"dmac": 1, "port": 1})
    with pytest.raises(ValueError, match="prefix length"):
        t.insert([(ip("10.1.2.3"), 33)], p4names.SET_NHOP, {"dmac": 1, "port": 1})
    with pytest.raises(ValueError, match="does not fit"):
        t.insert([(1 << 32, 32)], p4names.SET_NHOP, {"dmac": 1, "port": 1})
    assert len(t) == 0


def test_lpm_with_exact_field(mixed: SwitchState) -> None:
    t = mixed.tables["t_lpm2"]
    t.insert([1, (ip("10.0.0.0"), 8)], "fwd", {"port": 1})
    t.insert([2, (ip("10.0.0.0"), 16)], "fwd", {"port": 2})
    t.insert([1, (ip("10.0.0.0"), 24)], "fwd", {"port": 3})
    assert t.lookup(1, ip("10.0.0.5"))[1] == {"port": 3}
    assert t.lookup(1, ip("10.9.0.5"))[1] == {"port": 1}
    assert t.lookup(2, ip("10.0.9.5"))[1] == {"port": 2}
    assert t.lookup(2, ip("10.9.0.5"))[2] is False
    assert t.lookup(3, ip("10.0.0.5"))[2] is False


def test_exact_multi_field_default_and_full(mixed: SwitchState) -> None:
    t = mixed.tables["t_ex2"]
    assert t.lookup(1, 2) == ("mark", {"tag": 7}, False)
    t.insert([1, 2], "fwd", {"port": 5})
    t.insert([1, 3], "mark", {"tag": 1})
    assert t.lookup(1, 2) == ("fwd", {"port": 5}, True)
    assert t.lookup(2, 1)[2] is False
    with pytest.raises(TableFullError):
        t.insert([9, 9], "fwd", {"port": 1})
    with pytest.raises(EntryExistsError):
        t.insert([1, 2], "fwd", {"port": 6})
    t.modify([1, 2], "mark", {"tag": 3})
    assert t.lookup(1, 2) == ("mark", {"tag": 3}, True)
    with pytest.raises(EntryNotFoundError):
        t.modify([7, 7], "mark", {"tag": 3})
    with pytest.raises(EntryNotFoundError):
        t.delete([7, 7])
    with pytest.raises(ValueError, match="cannot be don't-care"):
        t.insert([None, 1], "fwd", {"port": 1})
    with pytest.raises(ValueError, match="not one of"):
        t.insert([5, 5], "NoAction")


def test_default_action_change_and_reset(dc: SwitchState) -> None:
    t = dc.tables[p4names.SWITCH_CONFIG]  # keyless
    assert t.lookup() == (p4names.NO_ACTION, {}, False)
    t.set_default(p4names.SET_CONFIG, {"switch_id": 3, "role": 1, "mechanism": 2})
    assert t.lookup() == (p4names.SET_CONFIG, {"switch_id": 3, "role": 1, "mechanism": 2}, False)
    assert t.default_modified
    t.reset_default()
    assert t.lookup() == (p4names.NO_ACTION, {}, False)
    with pytest.raises(ValueError, match="no key"):
        t.insert([], p4names.SET_CONFIG, {"switch_id": 1, "role": 1, "mechanism": 1})
    c = dc.tables[p4names.CACHE_LOOKUP]
    key = 0x0123456789ABCDEF_FEDCBA9876543210
    c.insert([key], p4names.CACHE_HIT, {"slot": 5, "version": 1})
    assert c.lookup(key) == (p4names.CACHE_HIT, {"slot": 5, "version": 1}, True)
    assert c.lookup(key ^ 1) == (p4names.CACHE_MISS, {}, False)
    c.set_default(p4names.CACHE_HIT, {"slot": 0, "version": 0})
    assert c.lookup(key ^ 1) == (p4names.CACHE_HIT, {"slot": 0, "version": 0}, False)


def test_ternary_highest_priority_wins(mixed: SwitchState) -> None:
    t = mixed.tables["t_tern"]
    t.insert([(0x1200, 0xFF00)], "fwd", {"port": 1}, priority=10)
    t.insert([(0x1234, 0xFFFF)], "fwd", {"port": 2}, priority=20)
    t.insert([None], "fwd", {"port": 3}, priority=1)  # match-all, lowest
    assert t.lookup(0x1234)[1] == {"port": 2}
    assert t.lookup(0x1299)[1] == {"port": 1}
    assert t.lookup(0x9999)[1] == {"port": 3}
    # same match, other priority: a different entry (P4Runtime key = match + priority)
    t.insert([(0x1200, 0xFF00)], "fwd", {"port": 4}, priority=30)
    assert t.lookup(0x1234)[1] == {"port": 4}
    t.delete([(0x1200, 0xFF00)], priority=30)
    assert t.lookup(0x1234)[1] == {"port": 2}
    with pytest.raises(ValueError, match="outside mask"):
        t.insert([(0x1201, 0xFF00)], "fwd", {"port": 1}, priority=5)
    with pytest.raises(ValueError, match="priority > 0"):
        t.insert([(0x1200, 0xFF00)], "fwd", {"port": 1})


def test_equal_priority_first_inserted_wins(mixed: SwitchState) -> None:
    t = mixed.tables["t_tern"]
    t.insert([(0x0000, 0x8000)], "fwd", {"port": 1}, priority=5)
    t.insert([(0x0001, 0x0001)], "fwd", {"port": 2}, priority=5)
    assert t.lookup(0x0001)[1] == {"port": 1}


def test_range_and_optional(mixed: SwitchState) -> None:
    r = mixed.tables["t_range"]
    r.insert([(100, 200), 1], "fwd", {"port": 1}, priority=1)
    r.insert([(150, 160), 1], "fwd", {"port": 2}, priority=2)
    r.insert([None, 2], "fwd", {"port": 3}, priority=1)
    assert r.lookup(100, 1)[1] == {"port": 1}
    assert r.lookup(155, 1)[1] == {"port": 2}
    assert r.lookup(200, 1)[1] == {"port": 1}
    assert r.lookup(201, 1)[2] is False
    assert r.lookup(99, 1)[2] is False
    assert r.lookup(65535, 2)[1] == {"port": 3}
    with pytest.raises(ValueError, match="low"):
        r.insert([(5, 4), 1], "fwd", {"port": 1}, priority=3)
    o = mixed.tables["t_opt"]
    o.insert([7, None], "fwd", {"port": 1}, priority=1)
    o.insert([None, (0x80, 0x80)], "fwd", {"port": 2}, priority=2)
    assert o.lookup(7, 0)[1] == {"port": 1}
    assert o.lookup(7, 0x81)[1] == {"port": 2}
    assert o.lookup(8, 0x81)[1] == {"port": 2}
    assert o.lookup(8, 0x01)[2] is False


def test_registers_mask_and_out_of_range(mixed: SwitchState) -> None:
    r8 = mixed.registers["r8"]
    r8.write(0, 0x1FF)
    assert r8.read(0) == 0xFF
    r8.write(1, -1)  # two's complement, like a P4 cast to bit<8>
    assert r8.read(1) == 0xFF
    r8.write(4, 5)  # out of range: ignored
    r8.write(-1, 5)  # negative is out of range too, not Python's last cell
    assert r8.read(4) == 0 and r8.read(-1) == 0 and r8.read(3) == 0
    r1 = mixed.registers["r1"]
    r1.write(9, 2)
    assert r1.read(9) == 0
    r1.write(9, 3)
    assert r1.read(9) == 1
    big = mixed.registers["r128"]
    v = (1 << 128) - 5
    big.write(32767, v)
    big.write(0, 1 << 128 | 7)
    assert big.read(32767) == v and big.read(0) == 7 and big.read(32768) == 0


def test_register_storage_is_compact() -> None:
    import sys

    r = RegisterArray("x", 32, 65536)
    assert sys.getsizeof(r._cells) < 65536 * 4 + 1024  # typed array, not a list of ints
    wide = RegisterArray("y", 128, 32768)
    assert sys.getsizeof(wide._cells) < 32768 * 8 + 1024  # a list of one shared 0 until written


def test_counters(mixed: SwitchState) -> None:
    c = mixed.counters["c"]
    c.count(1, 100)
    c.count(1, 50)
    c.count(3)
    c.count(4, 1000)  # out of range: ignored
    c.count(-1, 1000)
    assert c.read(1) == (2, 150)
    assert c.read(3) == (1, 0)
    assert c.read(0) == (0, 0)
    assert c.read(4) == (0, 0)
    c.write(2, 5, 6)
    assert c.read(2) == (5, 6)


def test_reset_clears_in_place(dc: SwitchState) -> None:
    t = dc.tables[p4names.IPV4_LPM]
    reg = dc.registers[p4names.CACHE_VALUE]
    cnt = dc.counters[p4names.DC_STATS]
    t.insert([(ip("10.0.0.0"), 8)], p4names.SET_NHOP, {"dmac": 1, "port": 1})
    dc.tables[p4names.SWITCH_CONFIG].set_default(p4names.SET_CONFIG, {"switch_id": 1, "role": 1, "mechanism": 1})
    reg.write(3, 12345)
    cnt.count(2, 10)
    dc.reset()
    assert (
        dc.tables[p4names.IPV4_LPM] is t
        and dc.registers[p4names.CACHE_VALUE] is reg
        and dc.counters[p4names.DC_STATS] is cnt
    )
    assert len(t) == 0 and t.lookup(ip("10.0.0.1"))[2] is False
    assert dc.tables[p4names.SWITCH_CONFIG].lookup()[0] == p4names.NO_ACTION
    assert reg.read(3) == 0 and cnt.read(2) == (0, 0)
    t.insert([(ip("10.0.0.0"), 8)], p4names.SET_NHOP, {"dmac": 1, "port": 1})
    assert t.lookup(ip("10.0.0.1"))[2] is True


def test_state_has_every_declared_entity(dc: SwitchState) -> None:
    assert set(dc.tables) == {t.name for t in PROGRAM.tables}
    assert set(dc.registers) == {r.name for r in PROGRAM.registers}
    assert set(dc.counters) == {c.name for c in PROGRAM.counters}
    for r in PROGRAM.registers:
        assert (dc.registers[r.name].bitwidth, dc.registers[r.name].size) == (r.bitwidth, r.size)
