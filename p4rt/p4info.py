"""A P4Info and the names in it: tables, actions, fields and externs by name, entries built and described by name.

Apart from the connection (:mod:`p4rt.client`), so that what only plans or describes entries (``p4rt.plan``,
the reconciler's diff) needs no gRPC client.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from finsy.proto import p4i, p4r
from google.protobuf import text_format

from p4rt.codec import P4RuntimeError, decode, encode


def load_p4info(path: str | Path) -> p4i.P4Info:
    """The P4Info in text format in ``path``; ValueError (one line) if it is not one."""
    info = p4i.P4Info()
    try:
        text_format.Parse(Path(path).read_text(), info)
    except (text_format.ParseError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not a P4Info in protobuf text format ({' '.join(str(e).split())})") from None
    if not info.tables:
        raise ValueError(f"{path} is not the P4Info of a pipeline: it declares no table")
    return info


@dataclass(frozen=True)
class Match:
    """A match value for one key field: exact ``value``; lpm ``value/prefix_len``;
    ternary ``value&&&mask``; range ``low..high``."""

    value: int
    prefix_len: int | None = None
    mask: int | None = None
    high: int | None = None


MatchValue = int | Match  # a key field's value: a plain int is an exact match


class P4Info:
    """Name-based access to a P4Info."""

    def __init__(self, info: p4i.P4Info) -> None:
        self.info = info
        self.tables = {t.preamble.name: t for t in info.tables}
        self.actions = {a.preamble.name: a for a in info.actions}
        self.counters = {c.preamble.name: c for c in info.counters}
        self.registers = {r.preamble.name: r for r in info.registers}
        self.digests = {d.preamble.name: d for d in info.digests}
        self.controller_headers = {h.preamble.name: h for h in info.controller_packet_metadata}
        self._digest_by_id = {d.preamble.id: d for d in info.digests}
        self._action_by_id = {a.preamble.id: a for a in info.actions}
        self._table_by_id = {t.preamble.id: t for t in info.tables}

    def table(self, name: str) -> p4i.Table:
        try:
            return self.tables[name]
        except KeyError:
            raise P4RuntimeError(f"P4Info has no table {name!r}", "NOT_FOUND") from None

    def action(self, name: str) -> p4i.Action:
        try:
            return self.actions[name]
        except KeyError:
            raise P4RuntimeError(f"P4Info has no action {name!r}", "NOT_FOUND") from None

    def counter(self, name: str) -> p4i.Counter:
        try:
            return self.counters[name]
        except KeyError:
            raise P4RuntimeError(f"P4Info has no counter {name!r}", "NOT_FOUND") from None

    def digest(self, name: str) -> p4i.Digest:
        try:
            return self.digests[name]
        except KeyError:
            raise P4RuntimeError(f"P4Info has no digest {name!r}", "NOT_FOUND") from None

    def controller_header(self, name: str) -> p4i.ControllerPacketMetadata:
        try:
            return self.controller_headers[name]
        except KeyError:
            raise P4RuntimeError(
                f"P4Info has no controller header {name!r} (the program takes no packet-out)", "NOT_FOUND"
            ) from None

    def packet_out(self, payload: bytes, metadata: dict[str, int]) -> p4r.PacketOut:
        """A PacketOut of ``payload`` with the ``packet_out`` header's fields by name (each one required)."""
        header = self.controller_header("packet_out")
        pkt = p4r.PacketOut(payload=payload)
        given = dict(metadata)
        for md in header.metadata:
            if md.name not in given:
                raise P4RuntimeError(f"packet-out needs metadata {md.name!r}", "INVALID_ARGUMENT")
            pkt.metadata.add(metadata_id=md.id, value=encode(given.pop(md.name), md.bitwidth))
        if given:
            raise P4RuntimeError(f"packet_out has no metadata {sorted(given)[0]!r}", "INVALID_ARGUMENT")
        return pkt

    def digest_fields(self, digest_id: int) -> tuple[str, list[str]]:
        """(digest name, member names in order) of a digest id."""
        d = self._digest_by_id[digest_id]
        struct = self.info.type_info.structs[d.type_spec.struct.name]
        return d.preamble.name, [m.name for m in struct.members]

    def action_name(self, action_id: int) -> str:
        return self._action_by_id[action_id].preamble.name

    def table_name(self, table_id: int) -> str:
        return self._table_by_id[table_id].preamble.name

    # -- building entities ----------------------------------------------------------
    def table_entry(
        self,
        table: str,
        match: dict[str, MatchValue],
        action: str,
        params: dict[str, int] | None = None,
        priority: int = 0,
        default: bool = False,
    ) -> p4r.TableEntry:
        entry = self.match_entry(table, match, priority, default)
        a = self.action(action)
        entry.action.action.action_id = a.preamble.id
        given = dict(params or {})
        for prm in a.params:
            if prm.name not in given:
                raise P4RuntimeError(f"action {action} needs parameter {prm.name!r}", "INVALID_ARGUMENT")
            entry.action.action.params.add(param_id=prm.id, value=encode(given.pop(prm.name), prm.bitwidth))
        if given:
            raise P4RuntimeError(f"action {action} has no parameters {sorted(given)}", "INVALID_ARGUMENT")
        return entry

    def match_entry(
        self, table: str, match: dict[str, MatchValue], priority: int = 0, default: bool = False
    ) -> p4r.TableEntry:
        """A table entry holding only the key: what DELETE needs."""
        t = self.table(table)
        entry = p4r.TableEntry(table_id=t.preamble.id, priority=priority, is_default_action=default)
        fields = {mf.name: mf for mf in t.match_fields}
        for name, m in match.items():
            if name not in fields:
                raise P4RuntimeError(
                    f"table {table} has no key field {name!r}; fields: {sorted(fields)}", "INVALID_ARGUMENT"
                )
            mf = fields[name]
            m = m if isinstance(m, Match) else Match(m)
            fm = entry.match.add(field_id=mf.id)
            kind = mf.match_type
            if kind == p4i.MatchField.EXACT:
                fm.exact.value = encode(m.value, mf.bitwidth)
            elif kind == p4i.MatchField.LPM:
                plen = mf.bitwidth if m.prefix_len is None else m.prefix_len
                fm.lpm.value = encode(m.value, mf.bitwidth)
                fm.lpm.prefix_len = plen
            elif kind == p4i.MatchField.TERNARY:
                fm.ternary.value = encode(m.value, mf.bitwidth)
                fm.ternary.mask = encode((1 << mf.bitwidth) - 1 if m.mask is None else m.mask, mf.bitwidth)
            elif kind == p4i.MatchField.RANGE:
                fm.range.low = encode(m.value, mf.bitwidth)
                fm.range.high = encode(m.value if m.high is None else m.high, mf.bitwidth)
            elif kind == p4i.MatchField.OPTIONAL:
                fm.optional.value = encode(m.value, mf.bitwidth)
        return entry

    def describe_entry(self, entry: p4r.TableEntry) -> tuple[str, dict[str, MatchValue], str, dict[str, int]]:
        """(table, match by field name, action, params by name) of a read-back entry."""
        t = self._table_by_id[entry.table_id]
        fields = {mf.id: mf for mf in t.match_fields}
        match: dict[str, MatchValue] = {}
        for fm in entry.match:
            which = fm.WhichOneof("field_match_type")
            sub = getattr(fm, which)
            if which == "lpm":
                match[fields[fm.field_id].name] = Match(decode(sub.value), prefix_len=sub.prefix_len)
            elif which == "ternary":
                match[fields[fm.field_id].name] = Match(decode(sub.value), mask=decode(sub.mask))
            elif which == "range":
                match[fields[fm.field_id].name] = Match(decode(sub.low), high=decode(sub.high))
            else:
                match[fields[fm.field_id].name] = decode(sub.value)
        act = self._action_by_id[entry.action.action.action_id]
        pnames = {p.id: p.name for p in act.params}
        params = {pnames[p.param_id]: decode(p.value) for p in entry.action.action.params}
        return t.preamble.name, match, act.preamble.name, params
