"""Malformed P4Runtime requests get the same codes from softswitch as from BMv2.

One table of requests (:data:`CASES`, :data:`BEFORE_PIPELINE`), each with the
answer written down: the gRPC status code of the RPC and the per-item
``p4.v1.Error`` canonical codes packed in its status details.  The table runs
against softswitch always and against BMv2's ``simple_switch_grpc`` when it
and ``p4c-bm2-ss`` are on PATH, so a drift on either target fails here.

The expected answers are BMv2 1.15.5's (PI P4Runtime server), except where
marked ``BMV2_DIFFERS``: there BMv2's answer is a bug or unhelpful, softswitch
keeps the P4Runtime specification's code, and the table holds both.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from finsy.proto import p4d, p4r

from distcache import p4names
from tests.common.p4rt_targets import Names, Outcome, Target

pytestmark = pytest.mark.timeout(120)

UPD = p4r.Update
OK, UNKNOWN, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED = 0, 2, 3, 5, 6, 7
FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED, INTERNAL = 9, 11, 12, 13
NOT_PRIMARY_ELECTION_ID = 3


# -- entity builders: everything by name, through the P4Info the target runs ------------------------------
def lpm(
    ids: Names,
    prefix: str = "10.2.0.0",
    plen: int = 16,
    *,
    port: int = 1,
    value: bytes | None = None,
    action: str = p4names.SET_NHOP,
) -> p4r.TableEntry:
    te = p4r.TableEntry(table_id=ids.id(p4names.IPV4_LPM))
    fm = te.match.add(field_id=ids.field(p4names.IPV4_LPM, p4names.KEY_IPV4_DST))
    fm.lpm.value = value if value is not None else socket.inet_aton(prefix)
    fm.lpm.prefix_len = plen
    a = te.action.action
    a.action_id = ids.id(action)
    a.params.add(param_id=ids.param(p4names.SET_NHOP, "dmac"), value=b"\x02\x00\x00\x00\x00\x01")
    a.params.add(param_id=ids.param(p4names.SET_NHOP, "port"), value=port.to_bytes(2, "big"))
    return te


def port_kind(ids: Names, port: int | bytes = 1, kind: int = 1) -> p4r.TableEntry:
    te = p4r.TableEntry(table_id=ids.id(p4names.PORT_KIND))
    te.match.add(field_id=ids.field(p4names.PORT_KIND, p4names.KEY_INGRESS_PORT)).exact.value = (
        port if isinstance(port, bytes) else port.to_bytes(2, "big")
    )
    te.action.action.action_id = ids.id(p4names.SET_PORT_KIND)
    te.action.action.params.add(param_id=ids.param(p4names.SET_PORT_KIND, "kind"), value=bytes([kind]))
    return te


def switch_config_default(ids: Names) -> p4r.TableEntry:
    te = p4r.TableEntry(table_id=ids.id(p4names.SWITCH_CONFIG), is_default_action=True)
    a = te.action.action
    a.action_id = ids.id(p4names.SET_CONFIG)
    for name, v in (("switch_id", 1), ("role", 1), ("mechanism", 1)):
        a.params.add(param_id=ids.param(p4names.SET_CONFIG, name), value=bytes([v]))
    return te


def ipv4_lpm_default(ids: Names) -> p4r.TableEntry:
    te = p4r.TableEntry(table_id=ids.id(p4names.IPV4_LPM), is_default_action=True)
    te.action.action.action_id = ids.id(p4names.DROP)
    return te


def counter(
    ids: Names, name: str = p4names.DC_STATS, index: int | None = 0, *, packets: int | None = None, nbytes: int = 0
) -> p4r.CounterEntry:
    ce = p4r.CounterEntry(counter_id=ids.id(name))
    if index is not None:
        ce.index.index = index
    if packets is not None:
        ce.data.packet_count, ce.data.byte_count = packets, nbytes
    return ce


def meter_id(ids: Names, name: str = p4names.CACHE_METER) -> int:
    return next(m.preamble.id for m in ids.info.meters if m.preamble.name == name)


def meter(
    ids: Names, index: int | None = 0, config: tuple[int, int, int, int] | None = None, *, mid: int | None = None
) -> p4r.MeterEntry:
    """A MeterEntry of the cache meter (or of id ``mid``); ``config`` is (cir, cburst, pir, pburst)."""
    me = p4r.MeterEntry(meter_id=meter_id(ids) if mid is None else mid)
    if index is not None:
        me.index.index = index
    if config is not None:
        me.config.cir, me.config.cburst, me.config.pir, me.config.pburst = config
    return me


Entry = p4r.TableEntry | p4r.CounterEntry | p4r.RegisterEntry | p4r.MeterEntry


def ent(x: Entry) -> p4r.Entity:
    if isinstance(x, p4r.TableEntry):
        return p4r.Entity(table_entry=x)
    if isinstance(x, p4r.CounterEntry):
        return p4r.Entity(counter_entry=x)
    if isinstance(x, p4r.MeterEntry):
        return p4r.Entity(meter_entry=x)
    return p4r.Entity(register_entry=x)


def u(kind: int, x: Entry) -> p4r.Update:
    return p4r.Update(type=kind, entity=ent(x))


def edit(x: p4r.TableEntry, f: Callable[[p4r.TableEntry], object]) -> p4r.TableEntry:
    f(x)
    return x


# -- the request table -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One request, the state it needs, and the answer both targets must give."""

    name: str
    rpc: str  # "write" or "read"
    build: Callable[[Names], list[p4r.Update] | list[p4r.Entity]]
    want: Outcome
    setup: Callable[[Names], list[p4r.Update]] | None = None  # applied first, must succeed
    election_id: int | None = 10  # of the Write
    bmv2: Outcome | None = None  # BMV2_DIFFERS: BMv2's own answer where softswitch keeps the spec's

    def run(self, t: Target) -> Outcome:
        if self.setup is not None:
            got = t.write(self.setup(t.names))
            assert got == ("OK", ()), f"{self.name}: setup failed on {t.name}: {got}"
        if self.rpc == "write":
            return t.write(self.build(t.names), election_id=self.election_id)  # type: ignore[arg-type]
        outcome, _ = t.read(self.build(t.names))  # type: ignore[arg-type]
        return outcome

    def expected(self, target: str) -> Outcome:
        return self.bmv2 if target == "bmv2" and self.bmv2 is not None else self.want


def item_error(code: int) -> Outcome:
    """A one-update Write that fails with ``code``: status UNKNOWN, one p4.v1.Error."""
    return ("UNKNOWN", (code,))


def answer(code: str) -> Outcome:
    """A Read (or a whole Write) that fails with ``code`` and no per-item details."""
    return (code, ())


WRITE_OK: Outcome = ("OK", ())
W_INV = item_error(INVALID_ARGUMENT)


def _no_action(te: p4r.TableEntry) -> None:
    te.ClearField("action")


def _set(attr: str, value: object) -> Callable[[p4r.TableEntry], None]:
    return lambda te: setattr(te, attr, value)


METER_CFG = (5, 5, 10, 8)  # cir, cburst, pir, pburst: rates BMv2 reads back exactly (see test_meter_rate_rounding)

BEFORE_PIPELINE: list[Case] = [
    Case(
        "write before a pipeline is set", "write", lambda ids: [u(UPD.INSERT, lpm(ids))], answer("FAILED_PRECONDITION")
    ),
    Case("read before a pipeline is set", "read", lambda _ids: [ent(p4r.TableEntry())], answer("FAILED_PRECONDITION")),
]

CASES: list[Case] = [
    # acceptance, so a target that refuses everything fails too
    Case("good INSERT", "write", lambda ids: [u(UPD.INSERT, lpm(ids))], WRITE_OK),
    Case(
        "leading zero bytes",
        "write",
        lambda ids: [
            u(
                UPD.INSERT,
                edit(
                    lpm(ids, value=b"\x00\x0a\x02\x00\x00"),
                    lambda te: setattr(te.action.action.params[1], "value", b"\x00\x00\x01"),
                ),
            )
        ],
        WRITE_OK,
    ),
    # table entries
    Case(
        "MODIFY without an action",
        "write",
        lambda ids: [u(UPD.MODIFY, edit(lpm(ids), _no_action))],
        W_INV,
        setup=lambda ids: [u(UPD.INSERT, lpm(ids))],
    ),
    Case("INSERT without an action", "write", lambda ids: [u(UPD.INSERT, edit(lpm(ids), _no_action))], W_INV),
    Case(
        "INSERT with an unknown action id",
        "write",
        lambda ids: [u(UPD.INSERT, edit(lpm(ids), lambda te: setattr(te.action.action, "action_id", 0x01ABCDEF)))],
        W_INV,
    ),
    Case(
        "action not in the table's action refs",
        "write",
        lambda ids: [
            u(UPD.INSERT, edit(lpm(ids), lambda te: setattr(te.action.action, "action_id", ids.id(p4names.CACHE_HIT))))
        ],
        W_INV,
    ),
    Case(
        "missing action param",
        "write",
        lambda ids: [u(UPD.INSERT, edit(lpm(ids), lambda te: te.action.action.params.pop()))],
        W_INV,
    ),
    Case(
        "extra action param",
        "write",
        lambda ids: [u(UPD.INSERT, edit(lpm(ids), lambda te: te.action.action.params.add(param_id=9, value=b"\x01")))],
        W_INV,
    ),
    Case("param wider than its bitwidth", "write", lambda ids: [u(UPD.INSERT, lpm(ids, port=512))], W_INV),
    # BMV2_DIFFERS: BMv2 accepts an empty bytestring; the spec rejects it
    Case(
        "empty param value",
        "write",
        lambda ids: [u(UPD.INSERT, edit(lpm(ids), lambda te: setattr(te.action.action.params[1], "value", b"")))],
        W_INV,
        bmv2=WRITE_OK,
    ),
    Case(
        "exact match field missing",
        "write",
        lambda ids: [u(UPD.INSERT, edit(port_kind(ids), lambda te: te.ClearField("match")))],
        W_INV,
    ),
    Case(
        "unknown match field id",
        "write",
        lambda ids: [u(UPD.INSERT, edit(lpm(ids), lambda te: setattr(te.match[0], "field_id", 7)))],
        W_INV,
    ),
    Case("exact value wider than the field", "write", lambda ids: [u(UPD.INSERT, port_kind(ids, 512))], W_INV),
    Case(
        "exact value with too many bytes", "write", lambda ids: [u(UPD.INSERT, port_kind(ids, b"\x01\x00\x01"))], W_INV
    ),
    # BMV2_DIFFERS: BMv2 accepts an empty bytestring; the spec rejects it
    Case("empty exact value", "write", lambda ids: [u(UPD.INSERT, port_kind(ids, b""))], W_INV, bmv2=WRITE_OK),
    Case(
        "wrong match kind",
        "write",
        lambda ids: [
            u(
                UPD.INSERT,
                edit(
                    port_kind(ids),
                    lambda te: (
                        te.match[0].ClearField("exact"),
                        setattr(te.match[0].lpm, "value", b"\x01"),
                        setattr(te.match[0].lpm, "prefix_len", 9),
                    ),
                ),
            )
        ],
        W_INV,
    ),
    Case("LPM host bits beyond the prefix", "write", lambda ids: [u(UPD.INSERT, lpm(ids, "10.2.0.1", 16))], W_INV),
    Case("LPM prefix longer than the field", "write", lambda ids: [u(UPD.INSERT, lpm(ids, "10.2.0.0", 33))], W_INV),
    Case("LPM prefix 0 not omitted", "write", lambda ids: [u(UPD.INSERT, lpm(ids, "0.0.0.0", 0))], W_INV),
    Case(
        "priority on an exact table",
        "write",
        lambda ids: [u(UPD.INSERT, edit(port_kind(ids), _set("priority", 5)))],
        W_INV,
    ),
    Case("priority on an LPM table", "write", lambda ids: [u(UPD.INSERT, edit(lpm(ids), _set("priority", 5)))], W_INV),
    Case(
        "INSERT of an existing entry",
        "write",
        lambda ids: [u(UPD.INSERT, lpm(ids))],
        item_error(ALREADY_EXISTS),
        setup=lambda ids: [u(UPD.INSERT, lpm(ids))],
    ),
    Case("DELETE of a missing entry", "write", lambda ids: [u(UPD.DELETE, lpm(ids))], item_error(NOT_FOUND)),
    Case("MODIFY of a missing entry", "write", lambda ids: [u(UPD.MODIFY, lpm(ids))], item_error(NOT_FOUND)),
    Case("unknown table id", "write", lambda ids: [u(UPD.INSERT, edit(lpm(ids), _set("table_id", 0x02ABCDEF)))], W_INV),
    Case("table id 0", "write", lambda ids: [u(UPD.INSERT, edit(lpm(ids), _set("table_id", 0)))], W_INV),
    # BMV2_DIFFERS: BMv2 says UNKNOWN "Error when adding match entry to target"; malformed is INVALID_ARGUMENT
    Case(
        "keyless table INSERT",
        "write",
        lambda ids: [u(UPD.INSERT, edit(switch_config_default(ids), _set("is_default_action", False)))],
        W_INV,
        bmv2=item_error(UNKNOWN),
    ),
    # BMV2_DIFFERS: BMv2 ignores is_const; the spec says INVALID_ARGUMENT
    Case(
        "is_const in a write",
        "write",
        lambda ids: [u(UPD.INSERT, edit(lpm(ids), _set("is_const", True)))],
        W_INV,
        bmv2=WRITE_OK,
    ),
    Case("no update type", "write", lambda ids: [u(UPD.UNSPECIFIED, lpm(ids))], W_INV),
    # BMV2_DIFFERS: BMv2 says UNKNOWN "Incorrect entity type"; malformed is INVALID_ARGUMENT
    Case(
        "update without an entity", "write", lambda _ids: [p4r.Update(type=UPD.INSERT)], W_INV, bmv2=item_error(UNKNOWN)
    ),
    # default entries
    Case("MODIFY default entry", "write", lambda ids: [u(UPD.MODIFY, switch_config_default(ids))], WRITE_OK),
    Case(
        "reset default entry (MODIFY, no action)",
        "write",
        lambda ids: [u(UPD.MODIFY, edit(ipv4_lpm_default(ids), _no_action))],
        WRITE_OK,
    ),
    Case(
        "default action not in the table's action refs",
        "write",
        lambda ids: [
            u(
                UPD.MODIFY,
                edit(
                    ipv4_lpm_default(ids), lambda te: setattr(te.action.action, "action_id", ids.id(p4names.CACHE_HIT))
                ),
            )
        ],
        W_INV,
    ),
    Case(
        "default entry with a match",
        "write",
        lambda ids: [u(UPD.MODIFY, edit(ipv4_lpm_default(ids), lambda te: te.match.extend(lpm(ids).match)))],
        W_INV,
    ),
    Case("INSERT default entry", "write", lambda ids: [u(UPD.INSERT, switch_config_default(ids))], W_INV),
    Case("DELETE default entry", "write", lambda ids: [u(UPD.DELETE, switch_config_default(ids))], W_INV),
    # a batch: per-update codes, good updates applied
    Case(
        "batch of good and bad",
        "write",
        lambda ids: [
            u(UPD.INSERT, lpm(ids)),
            u(UPD.INSERT, lpm(ids)),
            u(UPD.INSERT, lpm(ids, port=512)),
            u(UPD.DELETE, lpm(ids, "10.3.0.0")),
        ],
        ("UNKNOWN", (OK, ALREADY_EXISTS, INVALID_ARGUMENT, NOT_FOUND)),
    ),
    # counters and registers
    Case(
        "counter read, unknown counter id",
        "read",
        lambda _ids: [ent(p4r.CounterEntry(counter_id=0x12ABCDEF))],
        answer("INVALID_ARGUMENT"),
    ),
    # BMV2_DIFFERS: BMv2 says UNKNOWN "Error when reading counter from target"; the spec says OUT_OF_RANGE
    Case(
        "counter read, index out of range",
        "read",
        lambda ids: [ent(counter(ids, p4names.DC_STATS, p4names.N_STATS))],
        answer("OUT_OF_RANGE"),
        bmv2=answer("UNKNOWN"),
    ),
    Case(
        "counter read, negative index",
        "read",
        lambda ids: [ent(counter(ids, p4names.DC_STATS, -1))],
        answer("INVALID_ARGUMENT"),
    ),
    # BMV2_DIFFERS: as above
    Case(
        "counter read, one good one bad",
        "read",
        lambda ids: [ent(counter(ids, p4names.DC_STATS, 0)), ent(counter(ids, p4names.DC_STATS, p4names.N_STATS))],
        answer("OUT_OF_RANGE"),
        bmv2=answer("UNKNOWN"),
    ),
    Case("counter INSERT", "write", lambda ids: [u(UPD.INSERT, counter(ids))], W_INV),
    # BMV2_DIFFERS: BMv2 says UNKNOWN "Error when writing to counter"; the spec says OUT_OF_RANGE
    Case(
        "counter MODIFY, index out of range",
        "write",
        lambda ids: [u(UPD.MODIFY, counter(ids, p4names.DC_STATS, p4names.N_STATS, packets=1))],
        item_error(OUT_OF_RANGE),
        bmv2=item_error(UNKNOWN),
    ),
    # BMV2_DIFFERS: BMv2 has not implemented it; the spec defines it (set every cell)
    Case(
        "counter MODIFY of every cell (no index)",
        "write",
        lambda ids: [u(UPD.MODIFY, counter(ids, p4names.DC_STATS, None, packets=1))],
        WRITE_OK,
        bmv2=item_error(UNIMPLEMENTED),
    ),
    Case(
        "register read",
        "read",
        lambda ids: [ent(p4r.RegisterEntry(register_id=ids.id(p4names.LOAD_COUNT), index=p4r.Index(index=0)))],
        answer("UNIMPLEMENTED"),
    ),
    Case(
        "register write",
        "write",
        lambda ids: [
            u(
                UPD.MODIFY,
                p4r.RegisterEntry(
                    register_id=ids.id(p4names.LOAD_COUNT), index=p4r.Index(index=0), data=p4d.P4Data(bitstring=b"\x05")
                ),
            )
        ],
        item_error(UNIMPLEMENTED),
    ),
    # meters (MeterEntry: MODIFY only; no config, or all four values -1, resets a cell to unconfigured)
    Case("meter MODIFY with a config", "write", lambda ids: [u(UPD.MODIFY, meter(ids, 0, METER_CFG))], WRITE_OK),
    Case(
        "meter MODIFY without a config",
        "write",
        lambda ids: [u(UPD.MODIFY, meter(ids, 0))],
        WRITE_OK,
        setup=lambda ids: [u(UPD.MODIFY, meter(ids, 0, METER_CFG))],
    ),
    Case(
        "meter MODIFY with all values -1",
        "write",
        lambda ids: [u(UPD.MODIFY, meter(ids, 0, (-1, -1, -1, -1)))],
        WRITE_OK,
    ),
    Case(
        "meter MODIFY with zero rates and bursts",
        "write",
        lambda ids: [u(UPD.MODIFY, meter(ids, 0, (0, 0, 0, 0)))],
        WRITE_OK,
    ),
    Case("meter INSERT", "write", lambda ids: [u(UPD.INSERT, meter(ids, 0, METER_CFG))], W_INV),
    Case("meter DELETE", "write", lambda ids: [u(UPD.DELETE, meter(ids, 0))], W_INV),
    Case("meter MODIFY, meter_id 0", "write", lambda ids: [u(UPD.MODIFY, meter(ids, 0, METER_CFG, mid=0))], W_INV),
    Case(
        "meter MODIFY, unknown meter id",
        "write",
        lambda ids: [u(UPD.MODIFY, meter(ids, 0, METER_CFG, mid=0x14ABCDEF))],
        W_INV,
    ),
    # BMV2_DIFFERS: BMv2 says UNKNOWN "Error when writing meter spec"; the spec says OUT_OF_RANGE
    Case(
        "meter MODIFY, index out of range",
        "write",
        lambda ids: [u(UPD.MODIFY, meter(ids, 1, METER_CFG))],
        item_error(OUT_OF_RANGE),
        bmv2=item_error(UNKNOWN),
    ),
    Case("meter MODIFY, negative index", "write", lambda ids: [u(UPD.MODIFY, meter(ids, -1, METER_CFG))], W_INV),
    # BMV2_DIFFERS: BMv2 has not implemented it; the spec defines it (set every cell)
    Case(
        "meter MODIFY of every cell (no index)",
        "write",
        lambda ids: [u(UPD.MODIFY, meter(ids, None, METER_CFG))],
        WRITE_OK,
        bmv2=item_error(UNIMPLEMENTED),
    ),
    # BMV2_DIFFERS: BMv2 says UNKNOWN "Error when writing meter spec" (and leaves the cell half written)
    Case(
        "meter MODIFY, cir > pir",
        "write",
        lambda ids: [u(UPD.MODIFY, meter(ids, 0, (10, 5, 5, 5)))],
        W_INV,
        bmv2=item_error(UNKNOWN),
    ),
    Case("meter MODIFY, negative rate", "write", lambda ids: [u(UPD.MODIFY, meter(ids, 0, (-2, 5, 5, 5)))], W_INV),
    Case(
        "meter MODIFY, burst wider than 32 bits",
        "write",
        lambda ids: [u(UPD.MODIFY, meter(ids, 0, (5, 1 << 32, 5, 5)))],
        item_error(UNIMPLEMENTED),
    ),
    Case("meter read of one cell", "read", lambda ids: [ent(meter(ids, 0))], answer("OK")),
    Case("meter read of every meter at one index", "read", lambda ids: [ent(meter(ids, 0, mid=0))], answer("OK")),
    Case(
        "meter read, unknown meter id",
        "read",
        lambda ids: [ent(meter(ids, 0, mid=0x14ABCDEF))],
        answer("INVALID_ARGUMENT"),
    ),
    # BMV2_DIFFERS: BMv2 says UNKNOWN "Error when reading meter spec from target"; the spec says OUT_OF_RANGE
    Case(
        "meter read, index out of range",
        "read",
        lambda ids: [ent(meter(ids, 1))],
        answer("OUT_OF_RANGE"),
        bmv2=answer("UNKNOWN"),
    ),
    Case("meter read, negative index", "read", lambda ids: [ent(meter(ids, -1))], answer("INVALID_ARGUMENT")),
    # BMV2_DIFFERS: BMv2 says UNKNOWN; malformed is INVALID_ARGUMENT
    Case(
        "read of an empty entity",
        "read",
        lambda _ids: [p4r.Entity()],
        answer("INVALID_ARGUMENT"),
        bmv2=answer("UNKNOWN"),
    ),
    Case(
        "table read, unknown table id",
        "read",
        lambda _ids: [ent(p4r.TableEntry(table_id=0x02ABCDEF))],
        answer("INVALID_ARGUMENT"),
    ),
    # arbitration
    Case(
        "Write without being primary",
        "write",
        lambda ids: [u(UPD.INSERT, lpm(ids))],
        answer("PERMISSION_DENIED"),
        election_id=NOT_PRIMARY_ELECTION_ID,
    ),
    Case(
        "Write without an election id",
        "write",
        lambda ids: [u(UPD.INSERT, lpm(ids))],
        answer("PERMISSION_DENIED"),
        election_id=None,
    ),
]


# -- fixtures (``target``, softswitch and BMv2 where installed, is the folder's conftest's) -------------------
def reset_meters(target: Target) -> None:
    """Every meter cell back to unconfigured (MODIFY without a config), one index at a time as BMv2 needs."""
    ups = [
        u(UPD.MODIFY, meter(target.names, i, mid=m.preamble.id))
        for m in target.names.info.meters
        for i in range(m.size)
    ]
    assert target.write(ups) == WRITE_OK


@pytest.fixture
def clean(target: Target) -> Iterator[Target]:
    target.clear_tables()
    reset_meters(target)
    yield target
    target.clear_tables()
    reset_meters(target)


@pytest.mark.parametrize("case", BEFORE_PIPELINE, ids=lambda c: c.name)
def test_before_pipeline(target: Target, case: Case) -> None:
    assert target.before_pipeline[case.name] == case.expected(target.name)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_malformed_request(clean: Target, case: Case) -> None:
    assert case.run(clean) == case.expected(clean.name)


def test_every_case_has_a_unique_name() -> None:
    names = [c.name for c in BEFORE_PIPELINE + CASES]
    assert len(names) == len(set(names))


# -- counters report only their unit -------------------------------------------------------------------------
PACKET_COUNTERS = (p4names.DC_STATS, p4names.DC_DROPS, p4names.CACHE_HITS)


@pytest.mark.parametrize("name", PACKET_COUNTERS)
def test_packet_counters_read_back_without_bytes(target: Target, name: str) -> None:
    """Set a cell with both counts (MODIFY), read it back alone and in a wildcard read: packets only."""
    ids = target.names
    ce = counter(ids, name, 3, packets=5, nbytes=700)
    assert target.write([u(UPD.MODIFY, ce)]) == WRITE_OK
    try:
        (outcome, one) = target.read([ent(counter(ids, name, 3))])
        assert outcome == answer("OK")
        (outcome, every) = target.read([ent(counter(ids, name, None))])
        assert outcome == answer("OK")
        cell3 = [e for e in every if e.counter_entry.index.index == 3]
        for e in (*one, *cell3):
            assert e.counter_entry.HasField("data")
            assert (e.counter_entry.data.packet_count, e.counter_entry.data.byte_count) == (5, 0), e
        assert len(one) == len(cell3) == 1
    finally:
        ce.data.packet_count, ce.data.byte_count = 0, 0
        assert target.write([u(UPD.MODIFY, ce)]) == WRITE_OK


# -- meters: what a read answers -----------------------------------------------------------------------------
def read_meters(target: Target, q: p4r.MeterEntry) -> list[p4r.MeterEntry]:
    outcome, got = target.read([ent(q)])
    assert outcome == answer("OK"), outcome
    return [e.meter_entry for e in got]


def cell(mid: int, config: tuple[int, int, int, int] | None = None) -> p4r.MeterEntry:
    """What a read of cell 0 answers: its id and index, and its config only when configured."""
    me = p4r.MeterEntry(meter_id=mid)
    me.index.index = 0
    if config is not None:
        me.config.cir, me.config.cburst, me.config.pir, me.config.pburst = config
    return me


def test_meter_config_reads_back(clean: Target) -> None:
    """A written config reads back as written: by cell, by meter (every cell) and for every meter."""
    ids = clean.names
    assert clean.write([u(UPD.MODIFY, meter(ids, 0, METER_CFG))]) == WRITE_OK
    want = [cell(meter_id(ids), METER_CFG)]
    assert read_meters(clean, meter(ids, 0)) == want
    assert read_meters(clean, meter(ids, None)) == want
    assert read_meters(clean, meter(ids, None, mid=0)) == want


def test_unconfigured_meter_reads_without_config(clean: Target) -> None:
    """A cell never configured reads back with no config (BMv2: the PI default spec, all -1, is left out)."""
    ids = clean.names
    assert read_meters(clean, meter(ids, 0)) == [cell(meter_id(ids))]
    assert read_meters(clean, meter(ids, None, mid=0)) == [cell(meter_id(ids))]


@pytest.mark.parametrize("reset", [None, (-1, -1, -1, -1)], ids=["no config", "all -1"])
def test_meter_modify_without_config_resets(clean: Target, reset: tuple[int, int, int, int] | None) -> None:
    """MODIFY with no config (the spec) or all four values -1 (BMv2's old form) makes the cell unconfigured."""
    ids = clean.names
    assert clean.write([u(UPD.MODIFY, meter(ids, 0, METER_CFG))]) == WRITE_OK
    assert read_meters(clean, meter(ids, 0)) == [cell(meter_id(ids), METER_CFG)]
    assert clean.write([u(UPD.MODIFY, meter(ids, 0, reset))]) == WRITE_OK
    assert read_meters(clean, meter(ids, 0)) == [cell(meter_id(ids))]


def test_meter_zero_config_is_a_config(clean: Target) -> None:
    """All zeros is a configuration (every packet RED), read back as an empty but present config."""
    ids = clean.names
    assert clean.write([u(UPD.MODIFY, meter(ids, 0, (0, 0, 0, 0)))]) == WRITE_OK
    (got,) = read_meters(clean, meter(ids, 0))
    assert got.HasField("config") and got.config == p4r.MeterConfig()


def test_meter_rate_rounding(clean: Target) -> None:
    """BMV2_DIFFERS: BMv2 stores a rate as rate / 1e6 per microsecond (a double) and reads back the
    truncated rate * 1e6, so some rates come back one less (249 -> 248); softswitch answers what was written."""
    ids = clean.names
    assert clean.write([u(UPD.MODIFY, meter(ids, 0, (249, 7, 1000, 9)))]) == WRITE_OK
    want = (248 if clean.name == "bmv2" else 249, 7, 1000, 9)
    assert read_meters(clean, meter(ids, 0)) == [cell(meter_id(ids), want)]
