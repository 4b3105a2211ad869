"""The numeric ids of an accepted P4Info mapped onto the program's objects, the accepted config, and the
frame a PacketOut becomes."""

from __future__ import annotations

from dataclasses import dataclass, field

from finsy.proto import p4i, p4r

from p4rt.codec import decode_checked
from softswitch.program import Action, ControllerHeader, Counter, Digest, Meter, Param, Program, Register, Table
from softswitch.server.codec import (
    SC,
    _err,
)


@dataclass
class TableIds:
    id: int
    table: Table
    field_index: dict[int, int]  # match field id -> index in table.keys
    field_ids: tuple[int, ...]  # index in table.keys -> match field id
    scopes: dict[int, int]  # action id -> ActionRef scope
    needs_priority: bool


@dataclass
class ActionIds:
    id: int
    action: Action
    params: dict[int, Param]  # param id -> Param
    param_ids: dict[str, int]


@dataclass
class IdMap:
    """Numeric ids of a validated P4Info, mapped onto the program's entities (by name)."""

    tables: dict[int, TableIds] = field(default_factory=dict)
    table_ids: dict[str, int] = field(default_factory=dict)
    actions: dict[int, ActionIds] = field(default_factory=dict)
    action_ids: dict[str, int] = field(default_factory=dict)
    counters: dict[int, Counter] = field(default_factory=dict)
    counter_ids: dict[str, int] = field(default_factory=dict)
    registers: dict[int, Register] = field(default_factory=dict)
    meters: dict[int, Meter] = field(default_factory=dict)
    meter_ids: dict[str, int] = field(default_factory=dict)
    digests: dict[int, Digest] = field(default_factory=dict)
    digest_ids: dict[str, int] = field(default_factory=dict)
    packet_out: dict[int, tuple[str, int]] = field(default_factory=dict)  # metadata id -> (name, bit width)

    @classmethod
    def build(cls, program: Program, info: p4i.P4Info) -> IdMap:
        """Only for a P4Info that :func:`p4info_mismatch` accepted."""
        m = cls()
        for pa in info.actions:
            a = program.action(pa.preamble.name)
            m.actions[pa.preamble.id] = ActionIds(
                pa.preamble.id, a, {p.id: a.param(p.name) for p in pa.params}, {p.name: p.id for p in pa.params}
            )
            m.action_ids[a.name] = pa.preamble.id
        for pt in info.tables:
            t = program.table(pt.preamble.name)
            by_name = {mf.name: mf.id for mf in pt.match_fields}
            fids = tuple(by_name[k.name] for k in t.keys)
            m.tables[pt.preamble.id] = TableIds(
                pt.preamble.id,
                t,
                {fid: i for i, fid in enumerate(fids)},
                fids,
                {ref.id: ref.scope for ref in pt.action_refs},
                any(k.match_type in ("ternary", "range", "optional") for k in t.keys),
            )
            m.table_ids[t.name] = pt.preamble.id
        for pc in info.counters:
            c = next(x for x in program.counters if x.name == pc.preamble.name)
            m.counters[pc.preamble.id] = c
            m.counter_ids[c.name] = pc.preamble.id
        for pr in info.registers:
            m.registers[pr.preamble.id] = next(x for x in program.registers if x.name == pr.preamble.name)
        for pm in info.meters:
            m.meters[pm.preamble.id] = program.meter(pm.preamble.name)
            m.meter_ids[pm.preamble.name] = pm.preamble.id
        for pd in info.digests:
            m.digests[pd.preamble.id] = program.digest(pd.preamble.name)
            m.digest_ids[pd.preamble.name] = pd.preamble.id
        for ph in info.controller_packet_metadata:
            if ph.preamble.name == PACKET_OUT:
                m.packet_out = {md.id: (md.name, md.bitwidth) for md in ph.metadata}
        return m


@dataclass
class PipelineConfig:
    """A forwarding pipeline config the server accepted."""

    p4info: p4i.P4Info
    device_config: bytes
    cookie: int | None
    ids: IdMap


PACKET_OUT = "packet_out"
"""The controller header a PacketOut's metadata fills (p4c: ``@controller_header("packet_out")``)."""


def packet_out_frame(program: Program, cfg: PipelineConfig, packet: p4r.PacketOut) -> bytes:
    """The bytes a PacketOut enters the pipeline with at the CPU port: its metadata serialized into the
    program's packet_out header (fields in order, big-endian bits; a field not given is 0), then the
    payload, as BMv2's P4Runtime server hands a packet-out to its ``--cpu-port``.

    P4RuntimeError (INVALID_ARGUMENT) for a metadata id the P4Info does not define or a value too wide;
    UNIMPLEMENTED when the program has no packet_out header.
    """
    try:
        header: ControllerHeader = program.controller_header(PACKET_OUT)
    except KeyError:
        _err(SC.UNIMPLEMENTED, f"program {program.name!r} has no packet_out header: it takes no packet-out")
    given: dict[str, int] = {}
    for md in packet.metadata:
        if md.metadata_id not in cfg.ids.packet_out:
            _err(SC.INVALID_ARGUMENT, f"packet-out metadata id {md.metadata_id} is not in the P4Info's packet_out")
        name, width = cfg.ids.packet_out[md.metadata_id]
        given[name] = decode_checked(md.value, width, f"packet-out metadata {name!r}")
    bits = 0
    for name, width in header.fields:
        bits = (bits << width) | given.get(name, 0)
    return bits.to_bytes(header.bitwidth // 8, "big") + packet.payload
