"""The softswitch P4Runtime server, driven over real gRPC with bare stubs.

The switch runs in-process on 127.0.0.1 with a free port and the tiny
ForwardPipeline (tests/common/softswitch_helpers.py) on the DistCache program's
declarations; packets are fed through SoftSwitch.process_packet.
"""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from finsy.proto import p4i, p4r

from distcache import p4names
from softswitch.dataplane import PROGRAM
from softswitch.program import Action, Counter, Program
from softswitch.server import device_config_mismatch, p4info_mismatch
from softswitch.state import SwitchState
from softswitch.switch import SoftSwitch
from tests.common.p4rt_targets import BMV2_AVAILABLE, compile_p4src
from tests.common.softswitch_helpers import (
    DROP_NO_ROUTE,
    STAT_ROUTED,
    Client,
    error_details,
    ip,
    ipv4_udp_frame,
    running_switch,
)

pytestmark = pytest.mark.timeout(60)

UPD = p4r.Update
CFG = p4r.SetForwardingPipelineConfigRequest
SC = grpc.StatusCode
OK, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED = 0, 3, 5, 6, 7
RESOURCE_EXHAUSTED, FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED = 8, 9, 11, 12
DEVICE = 7


@pytest.fixture
def switch() -> Iterator[SoftSwitch]:
    with running_switch(DEVICE) as sw:
        yield sw


@pytest.fixture
def client(switch: SoftSwitch) -> Iterator[Client]:
    c = Client(switch.server.address, DEVICE)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def primary(client: Client) -> Client:
    """A client that is primary and has pushed softswitch's own P4Info."""
    client.become_primary(10)
    client.set_pipeline(PROGRAM.p4info(), cookie=0xC0FFEE, device_config=PROGRAM.device_config())
    return client


# -- entity builders (softswitch's own ids unless told otherwise) -------------------------------------
def lpm_entity(
    prefix: str,
    plen: int,
    dmac: int,
    port: int,
    *,
    value: bytes | None = None,
    table_id: int | None = None,
    action_id: int | None = None,
) -> p4r.Entity:
    te = p4r.TableEntry(table_id=table_id or PROGRAM.id_of(p4names.IPV4_LPM))
    fm = te.match.add(field_id=1)
    fm.lpm.value = value if value is not None else socket.inet_aton(prefix)
    fm.lpm.prefix_len = plen
    a = te.action.action
    a.action_id = action_id or PROGRAM.id_of(p4names.SET_NHOP)
    a.params.add(param_id=1, value=dmac.to_bytes(6, "big"))
    a.params.add(param_id=2, value=port.to_bytes(2, "big"))
    return p4r.Entity(table_entry=te)


def cache_entity(key: int, slot: int, version: int) -> p4r.Entity:
    te = p4r.TableEntry(table_id=PROGRAM.id_of(p4names.CACHE_LOOKUP))
    te.match.add(field_id=1).exact.value = key.to_bytes(16, "big")
    a = te.action.action
    a.action_id = PROGRAM.id_of(p4names.CACHE_HIT)
    a.params.add(param_id=1, value=slot.to_bytes(2, "big"))
    a.params.add(param_id=2, value=version.to_bytes(2, "big"))
    return p4r.Entity(table_entry=te)


def default_config_entity(switch_id: int, role: int, mechanism: int) -> p4r.Entity:
    te = p4r.TableEntry(table_id=PROGRAM.id_of(p4names.SWITCH_CONFIG), is_default_action=True)
    a = te.action.action
    a.action_id = PROGRAM.id_of(p4names.SET_CONFIG)
    for i, v in enumerate((switch_id, role, mechanism), start=1):
        a.params.add(param_id=i, value=bytes([v]))
    return p4r.Entity(table_entry=te)


def upd(kind: int, ent: p4r.Entity) -> p4r.Update:
    return p4r.Update(type=kind, entity=ent)


def write_codes(client: Client, *updates: p4r.Update) -> list[int]:
    """Per-update canonical codes of a Write (all OK if it succeeded)."""
    try:
        client.write(updates)
    except grpc.RpcError as e:
        assert e.code() == SC.UNKNOWN, e
        details = error_details(e)
        assert len(details) == len(updates)
        return [c for c, _ in details]
    return [OK] * len(updates)


def table_read(client: Client, name: str, **kw: object) -> list[p4r.TableEntry]:
    q = p4r.TableEntry(table_id=PROGRAM.id_of(name), **kw)  # type: ignore[arg-type]
    return [e.table_entry for e in client.read(p4r.Entity(table_entry=q))]


# -- capabilities and arbitration --------------------------------------------------------------------
def test_capabilities(client: Client) -> None:
    r = client.stub.Capabilities(p4r.CapabilitiesRequest())
    assert r.p4runtime_api_version.startswith("1.")
    with pytest.raises(grpc.RpcError) as ei:
        client.stub.Capabilities(p4r.CapabilitiesRequest(device_id=DEVICE + 1))
    assert ei.value.code() == SC.NOT_FOUND


def test_arbitration_primary_backup_and_failover(client: Client) -> None:
    a = client.stream()
    ra = a.arbitrate(DEVICE, 10)
    assert ra.status.code == OK and ra.election_id.low == 10 and ra.device_id == DEVICE
    b = client.stream()
    rb = b.arbitrate(DEVICE, 5)
    assert rb.status.code == ALREADY_EXISTS and rb.election_id.low == 10
    assert a.no_message()  # a backup joining does not disturb the primary
    c = client.stream()
    rc = c.arbitrate(DEVICE, 20)
    assert rc.status.code == OK and rc.election_id.low == 20
    for s in (a, b):  # everyone hears of the new primary
        r = s.recv_arbitration()
        assert r.status.code == ALREADY_EXISTS and r.election_id.low == 20
    c.close()  # primary leaves: no primary until someone claims >= the highest id seen
    for s in (a, b):
        r = s.recv_arbitration()
        assert r.status.code == NOT_FOUND and r.election_id.low == 20
    ra = a.arbitrate(DEVICE, 20)
    assert ra.status.code == OK
    assert b.recv_arbitration().status.code == ALREADY_EXISTS


def test_arbitration_errors_close_the_stream(client: Client) -> None:
    s = client.stream()
    s.send(
        p4r.StreamMessageRequest(
            arbitration=p4r.MasterArbitrationUpdate(device_id=DEVICE + 1, election_id=p4r.Uint128(low=1))
        )
    )
    with pytest.raises(grpc.RpcError) as ei:
        s.recv()
    assert ei.value.code() == SC.NOT_FOUND
    client.become_primary(3)
    dup = client.stream()
    dup.send(
        p4r.StreamMessageRequest(
            arbitration=p4r.MasterArbitrationUpdate(device_id=DEVICE, election_id=p4r.Uint128(low=3))
        )
    )
    with pytest.raises(grpc.RpcError) as ei:
        dup.recv()
    assert ei.value.code() == SC.INVALID_ARGUMENT and "election id" in (ei.value.details() or "").lower()


def test_unset_election_id_is_never_primary(client: Client) -> None:
    s = client.stream()
    r = s.arbitrate(DEVICE, None)
    assert r.status.code == NOT_FOUND and not r.HasField("election_id")


def test_packet_out_from_backup_is_refused(client: Client) -> None:
    client.become_primary(9)
    backup = client.stream()
    assert backup.arbitrate(DEVICE, 2).status.code == ALREADY_EXISTS
    backup.send(p4r.StreamMessageRequest(packet=p4r.PacketOut(payload=b"x")))
    r = backup.recv()
    assert r.WhichOneof("update") == "error" and r.error.canonical_code == PERMISSION_DENIED


# -- pipeline config ---------------------------------------------------------------------------------
def test_nothing_works_before_a_config(client: Client) -> None:
    with pytest.raises(grpc.RpcError) as ei:
        client.stub.GetForwardingPipelineConfig(p4r.GetForwardingPipelineConfigRequest(device_id=DEVICE))
    assert ei.value.code() == SC.FAILED_PRECONDITION
    assert "no forwarding pipeline config" in (ei.value.details() or "").lower()  # what finsy looks for
    client.become_primary(1)
    with pytest.raises(grpc.RpcError) as ei:
        client.write([upd(UPD.INSERT, lpm_entity("10.0.0.0", 8, 1, 1))])
    assert ei.value.code() == SC.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as ei:
        client.read(p4r.Entity(table_entry=p4r.TableEntry()))
    assert ei.value.code() == SC.FAILED_PRECONDITION


def test_packets_dropped_until_committed(switch: SoftSwitch, client: Client) -> None:
    frame = ipv4_udp_frame("10.0.1.1")
    assert switch.process_packet(1, frame) == []
    assert switch.stats.dropped_no_config == 1
    client.become_primary(1)
    client.set_pipeline(PROGRAM.p4info(), action=CFG.VERIFY_AND_SAVE)
    assert switch.process_packet(1, frame) == []  # saved, not committed
    assert switch.stats.dropped_no_config == 2
    client.write([upd(UPD.INSERT, lpm_entity("10.0.1.0", 24, 0xAA, 2))])  # lands in the saved config
    client.set_pipeline(None, action=CFG.COMMIT)
    out = switch.process_packet(1, frame)
    assert out == [(2, (0xAA).to_bytes(6, "big") + frame[6:])]


def test_set_config_needs_primary(client: Client) -> None:
    client.become_primary(10)
    s = client.stream()
    assert s.arbitrate(DEVICE, 4).status.code == ALREADY_EXISTS
    for eid in (4, None, 11):
        with pytest.raises(grpc.RpcError) as ei:
            req = p4r.SetForwardingPipelineConfigRequest(device_id=DEVICE, action=CFG.VERIFY_AND_COMMIT)
            if eid is not None:
                req.election_id.low = eid
            req.config.p4info.CopyFrom(PROGRAM.p4info())
            client.stub.SetForwardingPipelineConfig(req)
        assert ei.value.code() == SC.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as ei:
        client.stub.SetForwardingPipelineConfig(
            p4r.SetForwardingPipelineConfigRequest(
                device_id=DEVICE + 1, election_id=p4r.Uint128(low=10), action=CFG.VERIFY
            )
        )
    assert ei.value.code() == SC.NOT_FOUND


def test_get_config_response_types(primary: Client) -> None:
    request = p4r.GetForwardingPipelineConfigRequest

    def get(rt: int) -> p4r.ForwardingPipelineConfig:
        return primary.stub.GetForwardingPipelineConfig(request(device_id=DEVICE, response_type=rt)).config

    full = get(request.ALL)
    assert full.p4info == PROGRAM.p4info() and full.p4_device_config == PROGRAM.device_config()
    assert full.cookie.cookie == 0xC0FFEE
    c = get(request.COOKIE_ONLY)
    assert c.cookie.cookie == 0xC0FFEE and not c.HasField("p4info") and not c.p4_device_config
    pc = get(request.P4INFO_AND_COOKIE)
    assert pc.HasField("p4info") and not pc.p4_device_config
    dc = get(request.DEVICE_CONFIG_AND_COOKIE)
    assert not dc.HasField("p4info") and dc.p4_device_config == PROGRAM.device_config()


def remapped_p4info() -> tuple[p4i.P4Info, dict[str, int]]:
    """PROGRAM's P4Info with every id changed (p4c-like sequential ids, reversed field/param ids)."""
    info = PROGRAM.p4info()
    new: dict[str, int] = {}
    amap: dict[int, int] = {}
    for i, a in enumerate(info.actions):
        old = a.preamble.id
        a.preamble.id = (0x01 << 24) | (0x100 + i)
        amap[old] = a.preamble.id
        new[a.preamble.name] = a.preamble.id
        k = len(a.params)
        for j, p in enumerate(a.params):
            p.id = k - j
    for i, t in enumerate(info.tables):
        t.preamble.id = (0x02 << 24) | (0x200 + i)
        new[t.preamble.name] = t.preamble.id
        k = len(t.match_fields)
        for j, mf in enumerate(t.match_fields):
            mf.id = 10 + k - j
        for ref in t.action_refs:
            ref.id = amap[ref.id]
    for i, c in enumerate(info.counters):
        c.preamble.id = (0x12 << 24) | (0x300 + i)
        new[c.preamble.name] = c.preamble.id
    for i, r in enumerate(info.registers):
        r.preamble.id = (0x16 << 24) | (0x400 + i)
        new[r.preamble.name] = r.preamble.id
    return info, new


def test_remapped_ids_are_adopted(switch: SoftSwitch, client: Client) -> None:
    info, ids = remapped_p4info()
    assert p4info_mismatch(PROGRAM, info) is None
    client.become_primary(1)
    client.set_pipeline(info)
    te = p4r.TableEntry(table_id=ids[p4names.IPV4_LPM])
    fm = te.match.add(field_id=11)  # the only key, renumbered
    fm.lpm.value, fm.lpm.prefix_len = socket.inet_aton("10.9.0.0"), 16
    te.action.action.action_id = ids[p4names.SET_NHOP]
    te.action.action.params.add(param_id=2, value=b"\x00\x00\x00\x00\x00\x42")  # dmac is now id 2
    te.action.action.params.add(param_id=1, value=b"\x03")  # port is now id 1
    client.write([upd(UPD.INSERT, p4r.Entity(table_entry=te))])
    assert switch.state.tables[p4names.IPV4_LPM].lookup(ip("10.9.1.1")) == (
        p4names.SET_NHOP,
        {"dmac": 0x42, "port": 3},
        True,
    )
    (got,) = [
        e.table_entry for e in client.read(p4r.Entity(table_entry=p4r.TableEntry(table_id=ids[p4names.IPV4_LPM])))
    ]
    assert got.table_id == ids[p4names.IPV4_LPM] and got.match[0].field_id == 11
    assert got.action.action.action_id == ids[p4names.SET_NHOP]
    assert {p.param_id: p.value for p in got.action.action.params} == {2: b"\x42", 1: b"\x03"}
    # softswitch's own ids mean nothing now
    assert write_codes(client, upd(UPD.INSERT, lpm_entity("10.8.0.0", 16, 1, 1))) == [INVALID_ARGUMENT]
    # counters answer under the new ids
    (ce,) = client.read(
        p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=ids[p4names.DC_STATS], index=p4r.Index(index=0)))
    )
    assert ce.counter_entry.counter_id == ids[p4names.DC_STATS]


def _named(items, name: str):  # noqa: ANN001, ANN202 - a P4Info entity by name
    return next(x for x in items if x.preamble.name == name)


@pytest.mark.parametrize(
    "mutate, words",
    [
        (
            lambda i: setattr(_named(i.tables, p4names.IPV4_LPM).preamble, "name", p4names.IPV4_LPM + "_renamed"),
            p4names.IPV4_LPM,
        ),
        (lambda i: setattr(_named(i.tables, p4names.IPV4_LPM).match_fields[0], "bitwidth", 31), "bit<31>"),
        (
            lambda i: setattr(_named(i.tables, p4names.IPV4_LPM).match_fields[0], "match_type", p4i.MatchField.TERNARY),
            "ternary",
        ),
        (lambda i: setattr(_named(i.actions, p4names.SET_NHOP).params[1], "bitwidth", 16), "port"),
        (lambda i: _named(i.tables, p4names.IPV4_LPM).action_refs.pop(), "action"),
        (lambda i: setattr(_named(i.registers, p4names.CACHE_VALUE), "size", 1), "cache_value"),
        (lambda i: i.digests.add().preamble.CopyFrom(p4i.Preamble(id=0x17000001, name="hh")), "digest 'hh'"),
    ],
)
def test_mismatched_p4info_is_rejected(client: Client, mutate: object, words: str) -> None:
    info = PROGRAM.p4info()
    mutate(info)  # type: ignore[operator]
    client.become_primary(1)
    with pytest.raises(grpc.RpcError) as ei:
        client.set_pipeline(info)
    assert ei.value.code() == SC.INVALID_ARGUMENT
    assert words in (ei.value.details() or "")
    with pytest.raises(grpc.RpcError) as ei:  # and nothing got committed
        client.read(p4r.Entity(table_entry=p4r.TableEntry()))
    assert ei.value.code() == SC.FAILED_PRECONDITION


def test_commit_resets_and_reconcile_keeps_state(switch: SoftSwitch, primary: Client) -> None:
    primary.write([upd(UPD.INSERT, lpm_entity("10.0.0.0", 8, 1, 1))])
    switch.state.registers[p4names.LOAD_COUNT].write(0, 5)
    primary.set_pipeline(PROGRAM.p4info(), action=CFG.RECONCILE_AND_COMMIT)
    assert len(table_read(primary, p4names.IPV4_LPM)) == 1 and switch.state.registers[p4names.LOAD_COUNT].read(0) == 5
    primary.set_pipeline(PROGRAM.p4info(), action=CFG.VERIFY)
    assert len(table_read(primary, p4names.IPV4_LPM)) == 1
    primary.set_pipeline(PROGRAM.p4info(), action=CFG.VERIFY_AND_COMMIT)
    assert table_read(primary, p4names.IPV4_LPM) == [] and switch.state.registers[p4names.LOAD_COUNT].read(0) == 0
    with pytest.raises(grpc.RpcError) as ei:
        primary.set_pipeline(None, action=CFG.COMMIT)
    assert ei.value.code() == SC.NOT_FOUND


# -- Write and Read of table entries ----------------------------------------------------------------
def test_write_and_read_back_exact_lpm_and_default(switch: SoftSwitch, primary: Client) -> None:
    key = 0x00112233445566778899AABBCCDDEEFF
    assert write_codes(
        primary,
        upd(UPD.INSERT, lpm_entity("10.0.1.0", 24, 0x0A0B0C0D0E0F, 5)),
        upd(UPD.INSERT, cache_entity(key, 17, 300)),
        upd(UPD.MODIFY, default_config_entity(4, 2, 1)),
    ) == [OK, OK, OK]

    (r,) = table_read(primary, p4names.IPV4_LPM)
    assert r.table_id == PROGRAM.id_of(p4names.IPV4_LPM) and r.priority == 0 and not r.is_default_action
    (m,) = r.match
    assert m.field_id == 1 and m.WhichOneof("field_match_type") == "lpm"
    assert m.lpm.value == socket.inet_aton("10.0.1.0") and m.lpm.prefix_len == 24
    assert r.action.action.action_id == PROGRAM.id_of(p4names.SET_NHOP)
    assert [(p.param_id, p.value) for p in r.action.action.params] == [(1, bytes.fromhex("0a0b0c0d0e0f")), (2, b"\x05")]

    (c,) = table_read(primary, p4names.CACHE_LOOKUP)
    assert c.match[0].field_id == 1 and c.match[0].exact.value == key.to_bytes(16, "big")[1:]  # canonical
    assert c.action.action.action_id == PROGRAM.id_of(p4names.CACHE_HIT)
    assert [(p.param_id, p.value) for p in c.action.action.params] == [(1, b"\x11"), (2, b"\x01\x2c")]

    (d,) = table_read(primary, p4names.SWITCH_CONFIG, is_default_action=True)
    assert d.is_default_action and d.action.action.action_id == PROGRAM.id_of(p4names.SET_CONFIG)
    assert [p.value for p in d.action.action.params] == [b"\x04", b"\x02", b"\x01"]
    assert table_read(primary, p4names.SWITCH_CONFIG) == []  # a wildcard read skips the default entry
    assert switch.state.tables[p4names.SWITCH_CONFIG].lookup() == (
        p4names.SET_CONFIG,
        {"switch_id": 4, "role": 2, "mechanism": 1},
        False,
    )
    (cl,) = table_read(primary, p4names.CACHE_LOOKUP, match=[c.match[0]])  # read one entry by its key
    assert cl == c
    assert (
        table_read(
            primary,
            p4names.IPV4_LPM,
            match=[
                p4r.FieldMatch(field_id=1, lpm=p4r.FieldMatch.LPM(value=socket.inet_aton("10.0.2.0"), prefix_len=24))
            ],
        )
        == []
    )
    everything = primary.read(p4r.Entity(table_entry=p4r.TableEntry()))
    assert len(everything) == 2

    # MODIFY, reset of the default entry, DELETE
    e = cache_entity(key, 18, 301)
    assert write_codes(primary, upd(UPD.MODIFY, e)) == [OK]
    assert switch.state.tables[p4names.CACHE_LOOKUP].lookup(key) == (
        p4names.CACHE_HIT,
        {"slot": 18, "version": 301},
        True,
    )
    reset = p4r.Entity(
        table_entry=p4r.TableEntry(table_id=PROGRAM.id_of(p4names.SWITCH_CONFIG), is_default_action=True)
    )
    assert write_codes(primary, upd(UPD.MODIFY, reset)) == [OK]
    (d,) = table_read(primary, p4names.SWITCH_CONFIG, is_default_action=True)
    assert d.action.action.action_id == PROGRAM.id_of(p4names.NO_ACTION)
    assert write_codes(primary, upd(UPD.DELETE, cache_entity(key, 0, 0))) == [OK]
    assert table_read(primary, p4names.CACHE_LOOKUP) == []


@pytest.mark.usefixtures("switch")
def test_leading_zero_bytes_accepted(primary: Client) -> None:
    ent = lpm_entity("", 16, 7, 2, value=b"\x00\x00\x0a\x01\x00\x00")
    ent.table_entry.action.action.params[1].value = b"\x00\x00\x00\x02"
    assert write_codes(primary, upd(UPD.INSERT, ent)) == [OK]
    (r,) = table_read(primary, p4names.IPV4_LPM)
    assert r.match[0].lpm.value == b"\x0a\x01\x00\x00"
    assert [p.value for p in r.action.action.params] == [b"\x07", b"\x02"]


def test_write_errors_per_update(primary: Client) -> None:
    good = lpm_entity("10.0.0.0", 8, 1, 1)
    # a batch: each update gets its own status, the good ones are applied
    assert write_codes(
        primary, upd(UPD.INSERT, good), upd(UPD.INSERT, good), upd(UPD.INSERT, lpm_entity("10.1.0.0", 16, 1, 1))
    ) == [OK, ALREADY_EXISTS, OK]
    assert len(table_read(primary, p4names.IPV4_LPM)) == 2

    cases: list[tuple[str, p4r.Update, int]] = []
    e = lpm_entity("10.2.0.0", 16, 1, 1, table_id=0x02ABCDEF)
    cases.append(("unknown table", upd(UPD.INSERT, e), INVALID_ARGUMENT))
    e = lpm_entity("10.2.0.0", 16, 1, 1, action_id=0x01ABCDEF)
    cases.append(("unknown action", upd(UPD.INSERT, e), INVALID_ARGUMENT))
    e = lpm_entity("10.2.0.0", 16, 1, 1, action_id=PROGRAM.id_of(p4names.CACHE_HIT))
    cases.append(("action of another table", upd(UPD.INSERT, e), INVALID_ARGUMENT))
    e = lpm_entity("10.2.0.0", 16, 1, 512)  # port is bit<9>
    cases.append(("param too wide", upd(UPD.INSERT, e), INVALID_ARGUMENT))
    e = lpm_entity("10.2.0.0", 16, 1, 1)
    e.table_entry.action.action.params[0].value = b""
    cases.append(("empty param", upd(UPD.INSERT, e), INVALID_ARGUMENT))
    e = lpm_entity("10.2.0.0", 16, 1, 1)
    del e.table_entry.action.action.params[1]
    cases.append(("missing param", upd(UPD.INSERT, e), INVALID_ARGUMENT))
    e = lpm_entity("10.2.0.0", 16, 1, 1)
    e.table_entry.action.action.params[1].param_id = 9
    cases.append(("unknown param id", upd(UPD.INSERT, e), INVALID_ARGUMENT))
    e = lpm_entity("", 16, 1, 1, value=b"\x01\x0a\x02\x00\x00")
    cases.append(("match value too wide", upd(UPD.INSERT, e), INVALID_ARGUMENT))
    cases.append(("host bits", upd(UPD.INSERT, lpm_entity("10.2.0.1", 16, 1, 1)), INVALID_ARGUMENT))
    cases.append(("prefix > width", upd(UPD.INSERT, lpm_entity("10.2.0.0", 33, 1, 1)), INVALID_ARGUMENT))
    cases.append(("prefix 0 not omitted", upd(UPD.INSERT, lpm_entity("0.0.0.0", 0, 1, 1)), INVALID_ARGUMENT))
    e = lpm_entity("10.2.0.0", 16, 1, 1)
    e.table_entry.priority = 5
    cases.append(("priority on lpm table", upd(UPD.INSERT, e), INVALID_ARGUMENT))
    e = lpm_entity("10.2.0.0", 16, 1, 1)
    e.table_entry.match[0].field_id = 2
    cases.append(("unknown match field", upd(UPD.INSERT, e), INVALID_ARGUMENT))
    e = cache_entity(1, 1, 1)
    del e.table_entry.match[:]
    cases.append(("missing exact field", upd(UPD.INSERT, e), INVALID_ARGUMENT))
    e = cache_entity(1, 1, 1)
    e.table_entry.match[0].ClearField("exact")
    e.table_entry.match[0].lpm.value, e.table_entry.match[0].lpm.prefix_len = b"\x01", 8
    cases.append(("wrong match kind", upd(UPD.INSERT, e), INVALID_ARGUMENT))
    cases.append(("modify missing", upd(UPD.MODIFY, lpm_entity("10.3.0.0", 16, 1, 1)), NOT_FOUND))
    cases.append(("delete missing", upd(UPD.DELETE, lpm_entity("10.3.0.0", 16, 1, 1)), NOT_FOUND))
    cases.append(("insert default", upd(UPD.INSERT, default_config_entity(1, 1, 1)), INVALID_ARGUMENT))
    cases.append(("delete default", upd(UPD.DELETE, default_config_entity(1, 1, 1)), INVALID_ARGUMENT))
    e = default_config_entity(1, 1, 1)
    e.table_entry.is_default_action = False
    cases.append(("keyless insert", upd(UPD.INSERT, e), INVALID_ARGUMENT))
    e = lpm_entity("10.2.0.0", 16, 1, 1)
    e.table_entry.is_const = True
    cases.append(("is_const", upd(UPD.INSERT, e), INVALID_ARGUMENT))
    cases.append(("no update type", upd(UPD.UNSPECIFIED, lpm_entity("10.2.0.0", 16, 1, 1)), INVALID_ARGUMENT))
    cases.append(("empty entity", p4r.Update(type=UPD.INSERT), INVALID_ARGUMENT))

    codes = write_codes(primary, *(u for _, u, _ in cases))
    assert [(name, c) for (name, _, _), c in zip(cases, codes, strict=True)] == [
        (name, want) for name, _, want in cases
    ]
    assert len(table_read(primary, p4names.IPV4_LPM)) == 2  # nothing else got in


def test_table_full(primary: Client) -> None:
    def port_kind(p: int) -> p4r.Update:
        te = p4r.TableEntry(table_id=PROGRAM.id_of(p4names.PORT_KIND))
        te.match.add(field_id=1).exact.value = p.to_bytes(2, "big")
        te.action.action.action_id = PROGRAM.id_of(p4names.SET_PORT_KIND)
        te.action.action.params.add(param_id=1, value=b"\x01")
        return upd(UPD.INSERT, p4r.Entity(table_entry=te))

    assert set(write_codes(primary, *(port_kind(p) for p in range(p4names.MAX_PORTS)))) == {OK}
    assert write_codes(primary, port_kind(p4names.MAX_PORTS)) == [RESOURCE_EXHAUSTED]


def test_write_needs_primary(switch: SoftSwitch, primary: Client) -> None:
    backup = primary.stream()
    assert backup.arbitrate(DEVICE, 3).status.code == ALREADY_EXISTS
    for eid in (3, 11):
        with pytest.raises(grpc.RpcError) as ei:
            primary.write([upd(UPD.INSERT, lpm_entity("10.0.0.0", 8, 1, 1))], election_id=eid)
        assert ei.value.code() == SC.PERMISSION_DENIED
    req = p4r.WriteRequest(device_id=DEVICE, updates=[upd(UPD.INSERT, lpm_entity("10.0.0.0", 8, 1, 1))])
    with pytest.raises(grpc.RpcError) as ei:  # no election id at all
        primary.stub.Write(req)
    assert ei.value.code() == SC.PERMISSION_DENIED
    req.election_id.low, req.role = 10, "no-such-role"
    with pytest.raises(grpc.RpcError) as ei:
        primary.stub.Write(req)
    assert ei.value.code() == SC.NOT_FOUND
    req.role, req.device_id = "", DEVICE + 1
    with pytest.raises(grpc.RpcError) as ei:
        primary.stub.Write(req)
    assert ei.value.code() == SC.NOT_FOUND
    assert len(switch.state.tables[p4names.IPV4_LPM]) == 0


def test_rollback_atomicity_unimplemented(primary: Client) -> None:
    req = p4r.WriteRequest(
        device_id=DEVICE,
        election_id=p4r.Uint128(low=10),
        atomicity=p4r.WriteRequest.ROLLBACK_ON_ERROR,
        updates=[upd(UPD.INSERT, lpm_entity("10.0.0.0", 8, 1, 1))],
    )
    with pytest.raises(grpc.RpcError) as ei:
        primary.stub.Write(req)
    assert ei.value.code() == SC.UNIMPLEMENTED


# -- counters, registers, packets ---------------------------------------------------------------------
def counter_read(client: Client, name: str, index: int | None = None) -> list[tuple[int, int, int]]:
    q = p4r.CounterEntry(counter_id=PROGRAM.id_of(name))
    if index is not None:
        q.index.index = index
    return [
        (e.counter_entry.index.index, e.counter_entry.data.packet_count, e.counter_entry.data.byte_count)
        for e in client.read(p4r.Entity(counter_entry=q))
    ]


def test_counters_move_with_packets(switch: SoftSwitch, primary: Client) -> None:
    primary.write([upd(UPD.INSERT, lpm_entity("10.0.1.0", 24, 0x020000000002, 2))])
    frame = ipv4_udp_frame("10.0.1.7", b"x" * 50)
    for _ in range(3):
        assert switch.process_packet(1, frame) == [(2, bytes.fromhex("020000000002") + frame[6:])]
    assert switch.process_packet(1, ipv4_udp_frame("10.0.2.7")) == []  # no route
    assert counter_read(primary, p4names.DC_STATS, STAT_ROUTED) == [(STAT_ROUTED, 3, 0)]  # packets counter: no bytes
    assert counter_read(primary, p4names.DC_DROPS, DROP_NO_ROUTE)[0][1] == 1
    cells = counter_read(primary, p4names.DC_STATS)
    assert len(cells) == p4names.N_STATS and sum(c[1] for c in cells) == 3
    everything = primary.read(p4r.Entity(counter_entry=p4r.CounterEntry()))
    assert len(everything) == sum(c.size for c in PROGRAM.counters)
    with pytest.raises(grpc.RpcError) as ei:
        counter_read(primary, p4names.DC_STATS, p4names.N_STATS)
    assert ei.value.code() == SC.OUT_OF_RANGE
    with pytest.raises(grpc.RpcError) as ei:
        primary.read(p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=0x12ABCDEF)))
    assert ei.value.code() == SC.INVALID_ARGUMENT
    # P4Runtime may set a counter (MODIFY only)
    ce = p4r.CounterEntry(
        counter_id=PROGRAM.id_of(p4names.DC_STATS),
        index=p4r.Index(index=STAT_ROUTED),
        data=p4r.CounterData(packet_count=0, byte_count=0),
    )
    assert write_codes(
        primary, upd(UPD.MODIFY, p4r.Entity(counter_entry=ce)), upd(UPD.INSERT, p4r.Entity(counter_entry=ce))
    ) == [OK, INVALID_ARGUMENT]
    assert counter_read(primary, p4names.DC_STATS, STAT_ROUTED) == [(STAT_ROUTED, 0, 0)]


def test_pipeline_exception_drops_packet_only(switch: SoftSwitch, primary: Client) -> None:
    primary.write([upd(UPD.INSERT, lpm_entity("10.0.1.0", 24, 1, 2))])
    assert switch.process_packet(1, ipv4_udp_frame("10.0.1.1", b"BOOM")) == []
    assert switch.stats.dropped_pipeline_error == 1
    assert switch.process_packet(1, ipv4_udp_frame("10.0.1.1"))  # still forwarding
    assert primary.stub.Capabilities(p4r.CapabilitiesRequest()).p4runtime_api_version  # server still fine


def test_registers_are_unimplemented(switch: SoftSwitch, primary: Client) -> None:
    rid = PROGRAM.id_of(p4names.LOAD_COUNT)
    with pytest.raises(grpc.RpcError) as ei:
        primary.read(p4r.Entity(register_entry=p4r.RegisterEntry(register_id=rid, index=p4r.Index(index=0))))
    assert ei.value.code() == SC.UNIMPLEMENTED
    w = p4r.RegisterEntry(register_id=rid, index=p4r.Index(index=0))
    w.data.bitstring = b"\x05"
    assert write_codes(primary, upd(UPD.MODIFY, p4r.Entity(register_entry=w))) == [UNIMPLEMENTED]
    assert switch.state.registers[p4names.LOAD_COUNT].read(0) == 0


# -- device config: only what softswitch can run ------------------------------------------------------
def _identity(**changes: object) -> bytes:
    doc = json.loads(PROGRAM.device_config())
    doc.update(changes)
    return json.dumps(doc).encode()


REFUSED_DEVICE_CONFIGS = {
    "BMv2 JSON": json.dumps(
        {"header_types": [], "headers": [], "pipelines": [{"name": "ingress"}], "program": "p4src/distcache.p4"}
    ).encode(),
    "other JSON": b'{"bmv2": "json"}',
    "JSON list": b"[1, 2]",
    "another program": _identity(program="other"),
    "another target": _identity(target="bmv2"),
    "stale hash": _identity(p4info_sha256="0" * 64),
    "unknown field": _identity(extra=1),
    "garbage": b"\xff\x00\x13garbage",
}
PUSH_ACTIONS = {
    "VERIFY": CFG.VERIFY,
    "VERIFY_AND_SAVE": CFG.VERIFY_AND_SAVE,
    "VERIFY_AND_COMMIT": CFG.VERIFY_AND_COMMIT,
    "RECONCILE_AND_COMMIT": CFG.RECONCILE_AND_COMMIT,
}


def test_device_config_identity() -> None:
    doc = json.loads(PROGRAM.device_config())
    assert doc == {
        "target": "softswitch",
        "program": "distcache",
        "p4info_sha256": hashlib.sha256(PROGRAM.p4info().SerializeToString(deterministic=True)).hexdigest(),
    }
    assert device_config_mismatch(PROGRAM, b"") is None
    assert device_config_mismatch(PROGRAM, PROGRAM.device_config()) is None


@pytest.mark.parametrize("action", PUSH_ACTIONS)
@pytest.mark.parametrize("blob", REFUSED_DEVICE_CONFIGS)
@pytest.mark.usefixtures("switch")
def test_device_config_softswitch_cannot_run_is_refused(primary: Client, blob: str, action: str) -> None:
    primary.write([upd(UPD.INSERT, lpm_entity("10.0.0.0", 8, 1, 1))])
    with pytest.raises(grpc.RpcError) as ei:
        primary.set_pipeline(
            PROGRAM.p4info(), action=PUSH_ACTIONS[action], cookie=0xBAD, device_config=REFUSED_DEVICE_CONFIGS[blob]
        )
    assert ei.value.code() == SC.INVALID_ARGUMENT
    assert "softswitch accepts an empty p4_device_config" in (ei.value.details() or "")
    # nothing changed: the committed config, its entries, no saved config to commit
    cfg = primary.stub.GetForwardingPipelineConfig(p4r.GetForwardingPipelineConfigRequest(device_id=DEVICE)).config
    assert cfg.cookie.cookie == 0xC0FFEE and cfg.p4_device_config == PROGRAM.device_config()
    assert len(table_read(primary, p4names.IPV4_LPM)) == 1
    with pytest.raises(grpc.RpcError) as ei:
        primary.set_pipeline(None, action=CFG.COMMIT)
    assert ei.value.code() == SC.NOT_FOUND


@pytest.mark.parametrize("action", PUSH_ACTIONS)
@pytest.mark.parametrize("blob", [b"", PROGRAM.device_config()], ids=["empty", "identity"])
def test_device_config_softswitch_runs_is_accepted(primary: Client, blob: bytes, action: str) -> None:
    primary.set_pipeline(PROGRAM.p4info(), action=PUSH_ACTIONS[action], cookie=7, device_config=blob)
    if action == "VERIFY_AND_SAVE":
        primary.set_pipeline(None, action=CFG.COMMIT)
    cfg = primary.stub.GetForwardingPipelineConfig(p4r.GetForwardingPipelineConfigRequest(device_id=DEVICE)).config
    if action == "VERIFY":  # verified only: the committed config is unchanged
        assert cfg.cookie.cookie == 0xC0FFEE
    else:  # handed back as pushed
        assert cfg.cookie.cookie == 7 and cfg.p4_device_config == blob


def test_device_config_identity_goes_with_p4c_ids(client: Client) -> None:
    """The identity names the program, not the P4Info's ids: a remapped (p4c-like) P4Info takes it too."""
    info, _ = remapped_p4info()
    client.become_primary(1)
    client.set_pipeline(info, device_config=PROGRAM.device_config())


@pytest.mark.skipif(not BMV2_AVAILABLE, reason="p4c-bm2-ss is not on PATH")
def test_device_config_real_bmv2_json_is_refused(client: Client, tmp_path: Path) -> None:
    """p4c's P4Info is accepted, its BMv2 JSON (which softswitch cannot run) is not."""
    info, bmv2_json = compile_p4src(tmp_path)
    client.become_primary(1)
    with pytest.raises(grpc.RpcError) as ei:
        client.set_pipeline(info, device_config=bmv2_json)
    assert ei.value.code() == SC.INVALID_ARGUMENT and "BMv2 JSON" in (ei.value.details() or "")
    client.set_pipeline(info)  # the same P4Info without the JSON runs


class _UnitsPipeline:
    """Counts every frame in one counter of each unit, at index 1."""

    program = Program(
        "units",
        (Action("NoAction"),),
        (),
        counters=(Counter("c.packets", 4, "packets"), Counter("c.bytes", 4, "bytes"), Counter("c.both", 4, "both")),
    )

    def process(self, state: SwitchState, _ingress_port: int, packet: bytes, _now_us: int) -> list[tuple[int, bytes]]:
        for c in state.counters.values():
            c.count(1, len(packet))
        return []


def test_counters_read_back_only_their_unit() -> None:
    sw = SoftSwitch(_UnitsPipeline(), device_id=DEVICE, grpc_addr="127.0.0.1:0")
    sw.start()
    c = Client(sw.server.address, DEVICE)
    try:
        c.become_primary(1)
        prog = _UnitsPipeline.program
        c.set_pipeline(prog.p4info(), device_config=prog.device_config())
        for _ in range(2):
            sw.process_packet(1, b"x" * 60)
        got = {}
        for e in c.read(p4r.Entity(counter_entry=p4r.CounterEntry())):
            ce = e.counter_entry
            if ce.index.index == 1:
                got[ce.counter_id] = (ce.data.packet_count, ce.data.byte_count)
        assert got == {prog.id_of("c.packets"): (2, 0), prog.id_of("c.bytes"): (0, 120), prog.id_of("c.both"): (2, 120)}
    finally:
        c.close()
        sw.close()
