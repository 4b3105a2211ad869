"""TableEntry writes and reads (match kinds, priorities, default entries, action parameters)."""

from __future__ import annotations

from collections.abc import Mapping

from finsy.proto import p4r

from p4rt.codec import decode_checked, encode
from softswitch.server.codec import (
    _SCOPE_DEFAULT_ONLY,
    _SCOPE_TABLE_ONLY,
    _UPD,
    SC,
    _err,
)
from softswitch.server.ids import IdMap, TableIds
from softswitch.target import (
    CanonicalMatch,
    EntryExistsError,
    EntryNotFoundError,
    InstalledEntry,
    PipelineTarget,
    TableFullError,
)


class TableEntries:
    """The TableEntry handler of :class:`~softswitch.server.service.P4RuntimeService`."""

    def _table_ids(self, ids: IdMap, table_id: int) -> TableIds:
        if table_id == 0:
            _err(SC.INVALID_ARGUMENT, "table_id 0 is not a table")
        t = ids.tables.get(table_id)
        if t is None:  # INVALID_ARGUMENT, as BMv2: an unknown id makes the entity malformed
            _err(SC.INVALID_ARGUMENT, f"unknown table id {table_id:#x}")
        return t

    def _write_table_entry(self, ids: IdMap, state: PipelineTarget, utype: int, te: p4r.TableEntry) -> None:
        t = self._table_ids(ids, te.table_id)
        ts = state.tables[t.table.name]
        tname = t.table.name
        if te.is_const:  # BMv2 differs: ignores is_const; the spec says reject it
            _err(SC.INVALID_ARGUMENT, "is_const must be false in a write")
        if te.idle_timeout_ns:
            _err(SC.INVALID_ARGUMENT, f"{tname} does not support idle timeout")
        if te.HasField("counter_data") or te.HasField("meter_config") or te.HasField("meter_counter_data"):
            _err(SC.INVALID_ARGUMENT, f"{tname} has no direct counters or meters")
        if te.is_default_action:
            if utype != _UPD.MODIFY:
                _err(SC.INVALID_ARGUMENT, "the default entry can only be modified (not inserted or deleted)")
            if len(te.match) or te.priority:
                _err(SC.INVALID_ARGUMENT, "the default entry takes no match and priority 0")
            if t.table.const_default_action:
                _err(SC.PERMISSION_DENIED, f"{tname} has a const default action")
            if not te.HasField("action"):
                ts.reset_default()
                return
            name, params = self._parse_action(ids, t, te, default=True)
            ts.set_default(name, params)
            return
        if not t.table.keys:  # BMv2 differs: UNKNOWN ("Error when adding match entry to target")
            _err(SC.INVALID_ARGUMENT, f"{tname} has no key: only its default entry can be written")
        if t.needs_priority and te.priority <= 0:
            _err(SC.INVALID_ARGUMENT, f"{tname} has ternary/range/optional fields: priority must be > 0")
        if not t.needs_priority and te.priority != 0:
            _err(SC.INVALID_ARGUMENT, f"{tname} has only exact/lpm fields: priority must be 0")
        match = self._parse_match(t, te)
        try:
            if utype == _UPD.INSERT:
                name, params = self._parse_action(ids, t, te, default=False)
                ts.insert_canonical(
                    match, name, params, te.priority, controller_metadata=te.controller_metadata, metadata=te.metadata
                )
            elif utype == _UPD.MODIFY:
                cur = ts.get(match, te.priority)
                if cur is None:
                    raise EntryNotFoundError(f"{tname}: no such entry")
                # MODIFY has full-snapshot semantics: no action is malformed (INVALID_ARGUMENT, as BMv2),
                # not "keep the current one"; only the default entry may be reset that way.
                name, params = self._parse_action(ids, t, te, default=False)
                ts.modify_canonical(
                    match, name, params, te.priority, controller_metadata=te.controller_metadata, metadata=te.metadata
                )
            else:
                ts.delete_canonical(match, te.priority)
        except EntryExistsError as e:
            _err(SC.ALREADY_EXISTS, str(e))
        except EntryNotFoundError as e:
            _err(SC.NOT_FOUND, str(e))
        except TableFullError as e:
            _err(SC.RESOURCE_EXHAUSTED, str(e))

    def _parse_match(self, t: TableIds, te: p4r.TableEntry) -> CanonicalMatch:
        keys = t.table.keys
        out: list[tuple[int, int] | None] = [None] * len(keys)
        for fm in te.match:
            i = t.field_index.get(fm.field_id)
            if i is None:
                _err(SC.INVALID_ARGUMENT, f"{t.table.name}: unknown match field id {fm.field_id}")
            if out[i] is not None:
                _err(SC.INVALID_ARGUMENT, f"{t.table.name}: match field id {fm.field_id} given twice")
            mf = keys[i]
            kind = fm.WhichOneof("field_match_type")
            if kind != mf.match_type:
                _err(SC.INVALID_ARGUMENT, f"{t.table.name}: field {mf.name} is {mf.match_type}, not {kind}")
            w, full, what = mf.bitwidth, (1 << mf.bitwidth) - 1, f"{t.table.name} field {mf.name}"
            if kind == "exact":
                out[i] = (decode_checked(fm.exact.value, w, what), full)
            elif kind == "optional":
                out[i] = (decode_checked(fm.optional.value, w, what), full)
            elif kind == "lpm":
                v, plen = decode_checked(fm.lpm.value, w, what), fm.lpm.prefix_len
                if plen <= 0 or plen > w:
                    _err(
                        SC.INVALID_ARGUMENT,
                        f"{what}: prefix length {plen} not in 1..{w} (omit the field for don't care)",
                    )
                mask = full ^ ((1 << (w - plen)) - 1)
                if v & ~mask:
                    _err(SC.INVALID_ARGUMENT, f"{what}: value {v:#x} has bits set beyond prefix /{plen}")
                out[i] = (v, mask)
            elif kind == "ternary":
                v, mask = decode_checked(fm.ternary.value, w, what), decode_checked(fm.ternary.mask, w, what)
                if mask == 0:
                    _err(SC.INVALID_ARGUMENT, f"{what}: zero mask (omit the field for don't care)")
                if v & ~mask:
                    _err(SC.INVALID_ARGUMENT, f"{what}: value {v:#x} has bits outside mask {mask:#x}")
                out[i] = (v, mask)
            else:  # range
                lo, hi = decode_checked(fm.range.low, w, what), decode_checked(fm.range.high, w, what)
                if lo > hi:
                    _err(SC.INVALID_ARGUMENT, f"{what}: range low {lo} > high {hi}")
                if lo == 0 and hi == full:
                    _err(SC.INVALID_ARGUMENT, f"{what}: full range (omit the field for don't care)")
                out[i] = (lo, hi)
        result: list[tuple[int, int]] = []
        for i, mf in enumerate(keys):
            pair = out[i]
            if pair is None:
                if mf.match_type == "exact":
                    _err(SC.INVALID_ARGUMENT, f"{t.table.name}: exact field {mf.name} (id {t.field_ids[i]}) is missing")
                pair = (0, (1 << mf.bitwidth) - 1) if mf.match_type == "range" else (0, 0)
            result.append(pair)
        return tuple(result)

    def _parse_action(
        self, ids: IdMap, t: TableIds, te: p4r.TableEntry, *, default: bool
    ) -> tuple[str, dict[str, int]]:
        if not te.HasField("action"):
            _err(SC.INVALID_ARGUMENT, f"{t.table.name}: 'action' field must be set for non-default entries")
        if te.action.WhichOneof("type") != "action":
            _err(SC.INVALID_ARGUMENT, f"{t.table.name} is a direct table: give an action, not a profile member")
        a = te.action.action
        scope = t.scopes.get(a.action_id)
        if scope is None:
            _err(SC.INVALID_ARGUMENT, f"action id {a.action_id:#x} is not an action of {t.table.name}")
        if default and scope == _SCOPE_TABLE_ONLY:
            _err(SC.PERMISSION_DENIED, f"{ids.actions[a.action_id].action.name} cannot be a default action")
        if not default and scope == _SCOPE_DEFAULT_ONLY:
            _err(SC.PERMISSION_DENIED, f"{ids.actions[a.action_id].action.name} can only be a default action")
        ai = ids.actions[a.action_id]
        params: dict[str, int] = {}
        for p in a.params:
            prm = ai.params.get(p.param_id)
            if prm is None:
                _err(SC.INVALID_ARGUMENT, f"action {ai.action.name}: unknown parameter id {p.param_id}")
            if prm.name in params:
                _err(SC.INVALID_ARGUMENT, f"action {ai.action.name}: parameter {prm.name} given twice")
            params[prm.name] = decode_checked(p.value, prm.bitwidth, f"action {ai.action.name} parameter {prm.name}")
        for prm in ai.action.params:
            if prm.name not in params:
                _err(SC.INVALID_ARGUMENT, f"action {ai.action.name}: parameter {prm.name} is missing")
        return ai.action.name, params

    def _read_table(self, ids: IdMap, state: PipelineTarget, q: p4r.TableEntry) -> list[p4r.Entity]:
        if q.table_id == 0:  # every table: its default entry alone, or its non-default entries (as BMv2)
            if q.is_default_action:
                return [self._encode_default(ids, t, state) for t in ids.tables.values()]
            return [
                self._encode_entry(ids, t, e) for t in ids.tables.values() for e in state.tables[t.table.name].entries()
            ]
        t = self._table_ids(ids, q.table_id)
        ts = state.tables[t.table.name]
        if q.is_default_action:
            return [self._encode_default(ids, t, state)]
        if len(q.match):
            e = ts.get(self._parse_match(t, q), q.priority)
            found = [e] if e is not None else []
        else:
            found = [e for e in ts.entries() if not q.priority or e.priority == q.priority]
        want_action = q.action.action.action_id if q.HasField("action") and q.action.HasField("action") else 0
        out = []
        for e in found:
            if want_action and ids.action_ids.get(e.action) != want_action:
                continue
            if q.controller_metadata and e.controller_metadata != q.controller_metadata:
                continue
            if q.metadata and e.metadata != q.metadata:
                continue
            out.append(self._encode_entry(ids, t, e))
        return out

    def _encode_default(self, ids: IdMap, t: TableIds, state: PipelineTarget) -> p4r.Entity:
        """The default entry of ``t``: the spec's ``is_default_action`` read gives exactly one per table."""
        ts = state.tables[t.table.name]
        te = p4r.TableEntry(table_id=t.id, is_default_action=True)
        self._encode_action(ids, te, ts.default_action, ts.default_params)
        return p4r.Entity(table_entry=te)

    def _encode_entry(self, ids: IdMap, t: TableIds, e: InstalledEntry) -> p4r.Entity:
        te = p4r.TableEntry(
            table_id=t.id, priority=e.priority, controller_metadata=e.controller_metadata, metadata=e.metadata
        )
        for i, (mf, (a, b)) in enumerate(zip(t.table.keys, e.match, strict=True)):
            kind = mf.match_type
            full = (1 << mf.bitwidth) - 1
            if kind == "exact":
                te.match.add(field_id=t.field_ids[i]).exact.value = encode(a)
            elif kind == "range":
                if (a, b) != (0, full):
                    r = te.match.add(field_id=t.field_ids[i]).range
                    r.low, r.high = encode(a), encode(b)
            elif b == 0:
                continue  # don't care: omitted
            elif kind == "lpm":
                lpm = te.match.add(field_id=t.field_ids[i]).lpm
                lpm.value, lpm.prefix_len = encode(a), b.bit_count()
            elif kind == "ternary":
                tern = te.match.add(field_id=t.field_ids[i]).ternary
                tern.value, tern.mask = encode(a), encode(b)
            else:
                te.match.add(field_id=t.field_ids[i]).optional.value = encode(a)
        self._encode_action(ids, te, e.action, e.params)
        return p4r.Entity(table_entry=te)

    def _encode_action(self, ids: IdMap, te: p4r.TableEntry, name: str, params: Mapping[str, int]) -> None:
        aid = ids.action_ids[name]
        act = te.action.action
        act.action_id = aid
        ai = ids.actions[aid]
        for prm in ai.action.params:
            act.params.add(param_id=ai.param_ids[prm.name], value=encode(params.get(prm.name, 0)))
