"""Declarations of a P4 program as softswitch runs it, and its P4Info.

A :class:`Program` lists what the control plane can see of a pipeline —
tables (keys, match kinds, widths, actions, sizes), actions and their
parameters, registers, counters, meters — in the shape p4c would emit for the P4
source.  :meth:`Program.p4info` renders it as a P4Info message, so softswitch
produces its own P4Info from the same description it executes, and the parity
test compares that P4Info against the declarations in ``p4src/``.

Ids follow p4c's layout (the top byte is the entity kind) but the low bits are
a hash of the name; a P4Runtime client may push a P4Info with other ids (such
as p4c's) as long as names and shapes agree, and softswitch adopts them.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass, field
from typing import Literal

from finsy.proto import p4i

MatchKind = Literal["exact", "lpm", "ternary", "range", "optional"]

DEVICE_CONFIG_TARGET = "softswitch"
"""The ``target`` of softswitch's device config (see :meth:`Program.device_config`)."""

# P4Info id prefixes (p4/config/v1/p4info.proto, P4Ids.Prefix)
PREFIX_ACTION = 0x01
PREFIX_TABLE = 0x02
PREFIX_CONTROLLER_HEADER = 0x04
PREFIX_COUNTER = 0x12
PREFIX_DIRECT_COUNTER = 0x13
PREFIX_METER = 0x14
PREFIX_REGISTER = 0x16
PREFIX_DIGEST = 0x17

_MATCH_TYPES = {
    "exact": p4i.MatchField.EXACT,
    "lpm": p4i.MatchField.LPM,
    "ternary": p4i.MatchField.TERNARY,
    "range": p4i.MatchField.RANGE,
    "optional": p4i.MatchField.OPTIONAL,
}
_COUNTER_UNITS = {
    "packets": p4i.CounterSpec.PACKETS,
    "bytes": p4i.CounterSpec.BYTES,
    "both": p4i.CounterSpec.BOTH,
}
_METER_UNITS = {
    "packets": p4i.MeterSpec.PACKETS,
    "bytes": p4i.MeterSpec.BYTES,
}


def alias(name: str) -> str:
    """p4c's alias: the shortest unambiguous suffix; we use the last component."""
    return name.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class MatchField:
    name: str
    bitwidth: int
    match_type: MatchKind


@dataclass(frozen=True)
class Param:
    name: str
    bitwidth: int


@dataclass(frozen=True)
class Action:
    name: str
    params: tuple[Param, ...] = ()

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"action {self.name} has no parameter {name!r}")


@dataclass(frozen=True)
class Table:
    name: str
    keys: tuple[MatchField, ...]
    actions: tuple[str, ...]
    default_action: str
    default_params: tuple[tuple[str, int], ...] = ()
    size: int = 1024
    const_default_action: bool = False


@dataclass(frozen=True)
class Register:
    name: str
    bitwidth: int
    size: int


@dataclass(frozen=True)
class Counter:
    name: str
    size: int
    unit: Literal["packets", "bytes", "both"] = "packets"


@dataclass(frozen=True)
class Meter:
    """An indirect v1model ``meter(size, MeterType.unit)``: ``size`` two-rate three-colour meters.

    Configured and read through P4Runtime MeterEntry; see :class:`softswitch.state.MeterArray`.
    """

    name: str
    size: int
    unit: Literal["packets", "bytes"] = "packets"


@dataclass(frozen=True)
class Digest:
    """A v1model ``digest<T>(receiver, data)``: p4c names the digest after the struct ``T``.

    ``fields`` are T's members in order, each (name, bit width); the pipeline emits
    one tuple of ints per message (:meth:`SwitchState.emit_digest`).
    """

    name: str
    fields: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class ControllerHeader:
    """A v1model ``@controller_header("name") header``: the metadata of P4Runtime PacketOut or PacketIn.

    ``fields`` are the header's members in order, each (name, bit width), as p4c lists them in
    ``controller_packet_metadata`` (ids 1, 2, ...).  The runtime serializes a PacketOut's metadata
    into these bits, big-endian, ahead of its payload, as BMv2 does, and injects the result at the
    program's CPU port.
    """

    name: str
    fields: tuple[tuple[str, int], ...]

    @property
    def bitwidth(self) -> int:
        return sum(w for _, w in self.fields)


@dataclass
class Program:
    name: str
    actions: tuple[Action, ...]
    tables: tuple[Table, ...]
    registers: tuple[Register, ...] = ()
    counters: tuple[Counter, ...] = ()
    digests: tuple[Digest, ...] = ()
    meters: tuple[Meter, ...] = ()
    controller_headers: tuple[ControllerHeader, ...] = ()
    cpu_port: int | None = None  # where packet-out enters (p4src's CPU_PORT; None: no packet-out)
    # ports whose frames the switch's own host generates (a leaf's probe port, standing for a hardware
    # packet generator): stamped when the pipeline takes them, like a packet-out (SoftSwitch.run)
    generator_ports: frozenset[int] = frozenset()
    arch: str = "v1model"
    _ids: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        names = [a.name for a in self.actions]
        for t in self.tables:
            for a in t.actions:
                if a not in names:
                    raise ValueError(f"table {t.name} refers to undeclared action {a}")
            if t.default_action not in t.actions:
                raise ValueError(f"table {t.name}: default action {t.default_action} not in its actions")
        for h in self.controller_headers:
            if h.bitwidth % 8:
                raise ValueError(f"controller header {h.name}: {h.bitwidth} bits, not whole bytes")
        used: set[int] = set()
        for prefix, items in (
            (PREFIX_ACTION, self.actions),
            (PREFIX_TABLE, self.tables),
            (PREFIX_REGISTER, self.registers),
            (PREFIX_COUNTER, self.counters),
            (PREFIX_DIGEST, self.digests),
            (PREFIX_METER, self.meters),
            (PREFIX_CONTROLLER_HEADER, self.controller_headers),
        ):
            for it in items:
                low = zlib.crc32(it.name.encode()) & 0xFFFFFF
                ident = (prefix << 24) | low
                while ident in used:
                    ident += 1
                used.add(ident)
                self._ids[it.name] = ident

    # -- look-ups -----------------------------------------------------------------
    def id_of(self, name: str) -> int:
        return self._ids[name]

    def action(self, name: str) -> Action:
        for a in self.actions:
            if a.name == name:
                return a
        raise KeyError(f"no action {name!r}")

    def digest(self, name: str) -> Digest:
        for d in self.digests:
            if d.name == name:
                return d
        raise KeyError(f"no digest {name!r}")

    def controller_header(self, name: str) -> ControllerHeader:
        for h in self.controller_headers:
            if h.name == name:
                return h
        raise KeyError(f"no controller header {name!r}")

    def meter(self, name: str) -> Meter:
        for m in self.meters:
            if m.name == name:
                return m
        raise KeyError(f"no meter {name!r}")

    def table(self, name: str) -> Table:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(f"no table {name!r}")

    # -- device config -------------------------------------------------------------
    def p4info_sha256(self) -> str:
        """SHA-256 (hex) of this program's own P4Info, serialized deterministically."""
        return hashlib.sha256(self.p4info().SerializeToString(deterministic=True)).hexdigest()

    def device_config(self) -> bytes:
        """The ``p4_device_config`` that names this program on softswitch (its "binary").

        softswitch cannot load a program, it runs the one it was started with;
        what a controller pushes as device config is either empty or this small
        JSON identity, which the P4Runtime server checks against the program it runs.
        """
        return json.dumps(
            {"target": DEVICE_CONFIG_TARGET, "program": self.name, "p4info_sha256": self.p4info_sha256()},
            sort_keys=True,
        ).encode()

    # -- P4Info -------------------------------------------------------------------
    def p4info(self) -> p4i.P4Info:
        info = p4i.P4Info()
        info.pkg_info.arch = self.arch
        info.pkg_info.name = self.name
        for a in self.actions:
            pa = info.actions.add()
            _preamble(pa.preamble, self.id_of(a.name), a.name)
            for i, prm in enumerate(a.params, start=1):
                pa.params.add(id=i, name=prm.name, bitwidth=prm.bitwidth)
        for t in self.tables:
            pt = info.tables.add()
            _preamble(pt.preamble, self.id_of(t.name), t.name)
            for i, mf in enumerate(t.keys, start=1):
                pt.match_fields.add(id=i, name=mf.name, bitwidth=mf.bitwidth, match_type=_MATCH_TYPES[mf.match_type])
            for a in t.actions:
                pt.action_refs.add(id=self.id_of(a))
            if t.const_default_action:
                pt.const_default_action_id = self.id_of(t.default_action)
            pt.size = t.size
        for c in self.counters:
            pc = info.counters.add()
            _preamble(pc.preamble, self.id_of(c.name), c.name)
            pc.spec.unit = _COUNTER_UNITS[c.unit]
            pc.size = c.size
        for m in self.meters:  # as p4c: spec.type left at its default, TWO_RATE_THREE_COLOR (v1model's meter)
            pm = info.meters.add()
            _preamble(pm.preamble, self.id_of(m.name), m.name)
            pm.spec.unit = _METER_UNITS[m.unit]
            pm.size = m.size
        for r in self.registers:
            pr = info.registers.add()
            _preamble(pr.preamble, self.id_of(r.name), r.name)
            pr.type_spec.bitstring.bit.bitwidth = r.bitwidth
            pr.size = r.size
        for h in self.controller_headers:  # as p4c: named by the annotation, metadata ids 1.. in field order
            ph = info.controller_packet_metadata.add()
            _preamble(ph.preamble, self.id_of(h.name), h.name)
            ph.preamble.annotations.append(f'@controller_header("{h.name}")')
            for i, (fname, width) in enumerate(h.fields, start=1):
                ph.metadata.add(id=i, name=fname, bitwidth=width)
        for d in self.digests:  # as p4c: type_spec names the struct, type_info holds its bit<W> members
            pd = info.digests.add()
            _preamble(pd.preamble, self.id_of(d.name), d.name)
            pd.type_spec.struct.name = d.name
            st = info.type_info.structs[d.name]
            for fname, width in d.fields:
                st.members.add(name=fname).type_spec.bitstring.bit.bitwidth = width
        return info


def _preamble(pre: p4i.Preamble, ident: int, name: str) -> None:
    pre.id = ident
    pre.name = name
    pre.alias = alias(name)
