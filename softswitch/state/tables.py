"""Match-action tables of softswitch's state: entries in canonical form, default entries, look-ups.

The pipeline (softswitch/dataplane/) looks tables up for every packet; the P4Runtime server writes
and reads them through :class:`softswitch.target.TableTarget`, which :class:`TableState` is.  The
canonical form of a match (one pair of ints per key field) is described in softswitch/target.py.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from softswitch.program import Table
from softswitch.target import CanonicalMatch, EntryExistsError, EntryNotFoundError, TableFullError

FieldSpec = int | tuple[int, int] | None
"""How a caller states one match field (see :meth:`TableState.canonical_match`)."""


@dataclass(slots=True)
class TableEntry:
    """One installed entry.  ``params`` is shared with lookups: treat it as read-only."""

    match: CanonicalMatch
    priority: int
    action: str
    params: dict[str, int]
    controller_metadata: int = 0
    metadata: bytes = b""
    seq: int = field(default=0, compare=False)  # insertion order, breaks priority ties

    @property
    def key(self) -> tuple[CanonicalMatch, int]:
        """The identity of the entry within its table (P4Runtime: match + priority)."""
        return (self.match, self.priority)


def _full(bitwidth: int) -> int:
    return (1 << bitwidth) - 1


def _prefix_mask(bitwidth: int, prefix_len: int) -> int:
    return _full(bitwidth) ^ _full(bitwidth - prefix_len)


class TableState:
    """Entries and default action of one match-action table.

    Look-up structures depend on the table's key so that the hot path stays
    cheap: exact-only tables use one dict; tables with one LPM field (plus
    exact fields) use one dict per prefix length, probed longest first;
    tables with ternary/range/optional fields scan a list kept in priority
    order (highest first, then insertion order).
    """

    def __init__(self, table: Table) -> None:
        self.table = table
        self._kinds = tuple(k.match_type for k in table.keys)
        self._widths = tuple(k.bitwidth for k in table.keys)
        self.needs_priority = any(k in ("ternary", "range", "optional") for k in self._kinds)
        lpm = [i for i, k in enumerate(self._kinds) if k == "lpm"]
        if self.needs_priority or len(lpm) > 1:
            self._shape = "scan"
        elif lpm:
            self._shape = "lpm"
        else:
            self._shape = "exact"
        self._lpm_index = lpm[0] if lpm and self._shape == "lpm" else -1
        self._is_range = tuple(k == "range" for k in self._kinds)
        self._entries: dict[tuple[CanonicalMatch, int], TableEntry] = {}
        self._exact: dict[object, TableEntry] = {}
        self._by_plen: dict[int, dict[object, TableEntry]] = {}
        self._plens_desc: list[tuple[int, int]] = []  # (prefix_len, mask), longest first
        self._scan: list[TableEntry] = []
        self._scan_keys: list[tuple[int, int]] = []  # (-priority, seq), parallel to _scan
        self._seq = 0
        self.default_action = table.default_action
        self.default_params: dict[str, int] = dict(table.default_params)
        self.default_modified = False

    # -- data-plane path ------------------------------------------------------------
    def lookup(self, *values: int) -> tuple[str, dict[str, int], bool]:
        """Match ``values`` (ints, in ``table.keys`` order); return (action, params, hit)."""
        if not values:  # a keyless table (no entry can be inserted): its default action, every packet
            return self.default_action, self.default_params, False
        shape = self._shape
        if shape == "exact":
            e = self._exact.get(values[0] if len(values) == 1 else values)
        elif shape == "lpm":
            e = self._lookup_lpm(values)
        else:
            e = self._lookup_scan(values)
        if e is None:
            return self.default_action, self.default_params, False
        return e.action, e.params, True

    def _lookup_lpm(self, values: tuple[int, ...]) -> TableEntry | None:
        i = self._lpm_index
        if len(values) == 1:
            v = values[0]
            for plen, mask in self._plens_desc:
                e = self._by_plen[plen].get(v & mask)
                if e is not None:
                    return e
            return None
        for plen, mask in self._plens_desc:
            key = (*values[:i], values[i] & mask, *values[i + 1 :])
            e = self._by_plen[plen].get(key)
            if e is not None:
                return e
        return None

    def _lookup_scan(self, values: tuple[int, ...]) -> TableEntry | None:
        is_range = self._is_range
        for e in self._scan:
            for v, (a, b), rng in zip(values, e.match, is_range, strict=True):
                if rng:
                    if not a <= v <= b:
                        break
                elif v & b != a:
                    break
            else:
                return e
        return None

    # -- control-plane path ---------------------------------------------------------
    def canonical_match(self, match: Sequence[FieldSpec]) -> CanonicalMatch:
        """Turn a caller's match (one spec per key field, in key order) into canonical form.

        Per kind: exact ``int``; lpm ``(value, prefix_len)``; ternary ``(value, mask)``;
        range ``(low, high)``; optional ``int``.  ``None`` is "don't care" (not for
        exact).  Raises ValueError for values wider than the field, host bits set
        under an LPM prefix or a ternary mask, or low > high.
        """
        if len(match) != len(self._kinds):
            raise ValueError(f"{self.table.name}: expected {len(self._kinds)} match fields, got {len(match)}")
        out: list[tuple[int, int]] = []
        for spec, kind, width, key in zip(match, self._kinds, self._widths, self.table.keys, strict=True):
            full = _full(width)
            if spec is None:
                if kind == "exact":
                    raise ValueError(f"{self.table.name}: exact field {key.name} cannot be don't-care")
                out.append((0, full) if kind == "range" else (0, 0))
                continue
            if kind in ("exact", "optional"):
                if not isinstance(spec, int):
                    raise ValueError(f"{key.name}: {kind} match takes an int")
                _check_width(spec, width, key.name)
                out.append((spec, full))
                continue
            if not isinstance(spec, tuple) or len(spec) != 2:
                raise ValueError(f"{key.name}: {kind} match takes a pair")
            a, b = spec
            if kind == "lpm":
                _check_width(a, width, key.name)
                if not 0 <= b <= width:
                    raise ValueError(f"{key.name}: prefix length {b} not in 0..{width}")
                mask = _prefix_mask(width, b)
                if a & ~mask:
                    raise ValueError(f"{key.name}: value {a:#x} has bits set beyond prefix /{b}")
                out.append((a, mask))
            elif kind == "ternary":
                _check_width(a, width, key.name)
                _check_width(b, width, key.name)
                if a & ~b:
                    raise ValueError(f"{key.name}: value {a:#x} has bits set outside mask {b:#x}")
                out.append((a, b))
            else:  # range
                _check_width(a, width, key.name)
                _check_width(b, width, key.name)
                if a > b:
                    raise ValueError(f"{key.name}: range low {a} > high {b}")
                out.append((a, b))
        return tuple(out)

    def insert(
        self,
        match: Sequence[FieldSpec],
        action: str,
        params: Mapping[str, int] | None = None,
        priority: int = 0,
        *,
        controller_metadata: int = 0,
        metadata: bytes = b"",
    ) -> TableEntry:
        """Add an entry; raises EntryExistsError, TableFullError, or ValueError for bad input."""
        cm = self.canonical_match(match)
        return self.insert_canonical(
            cm,
            action,
            self._check_action(action, params),
            priority,
            controller_metadata=controller_metadata,
            metadata=metadata,
        )

    def insert_canonical(
        self,
        match: CanonicalMatch,
        action: str,
        params: dict[str, int],
        priority: int = 0,
        *,
        controller_metadata: int = 0,
        metadata: bytes = b"",
    ) -> TableEntry:
        """Add an already validated entry (the P4Runtime server validates with its own error codes)."""
        if not self._kinds:
            raise ValueError(f"{self.table.name} has no key: set its default action instead")
        if self.needs_priority and priority <= 0:
            raise ValueError(f"{self.table.name}: ternary/range/optional tables need priority > 0")
        if not self.needs_priority and priority != 0:
            raise ValueError(f"{self.table.name}: exact/lpm tables take priority 0")
        key = (match, priority)
        if key in self._entries:
            raise EntryExistsError(f"{self.table.name}: entry already exists")
        if len(self._entries) >= self.table.size:
            raise TableFullError(f"{self.table.name}: table full ({self.table.size} entries)")
        self._seq += 1
        e = TableEntry(match, priority, action, params, controller_metadata, metadata, self._seq)
        self._entries[key] = e
        self._index(e)
        return e

    def modify(
        self,
        match: Sequence[FieldSpec],
        action: str,
        params: Mapping[str, int] | None = None,
        priority: int = 0,
        *,
        controller_metadata: int = 0,
        metadata: bytes = b"",
    ) -> TableEntry:
        """Replace the action of an existing entry; raises EntryNotFoundError."""
        return self.modify_canonical(
            self.canonical_match(match),
            action,
            self._check_action(action, params),
            priority,
            controller_metadata=controller_metadata,
            metadata=metadata,
        )

    def modify_canonical(
        self,
        match: CanonicalMatch,
        action: str,
        params: dict[str, int],
        priority: int = 0,
        *,
        controller_metadata: int = 0,
        metadata: bytes = b"",
    ) -> TableEntry:
        e = self._entries.get((match, priority))
        if e is None:
            raise EntryNotFoundError(f"{self.table.name}: no such entry")
        # In place: the look-up structures hold this same object.
        e.action, e.params = action, params
        e.controller_metadata, e.metadata = controller_metadata, metadata
        return e

    def delete(self, match: Sequence[FieldSpec], priority: int = 0) -> TableEntry:
        """Remove an entry; raises EntryNotFoundError."""
        return self.delete_canonical(self.canonical_match(match), priority)

    def delete_canonical(self, match: CanonicalMatch, priority: int = 0) -> TableEntry:
        e = self._entries.pop((match, priority), None)
        if e is None:
            raise EntryNotFoundError(f"{self.table.name}: no such entry")
        self._unindex(e)
        return e

    def get(self, match: CanonicalMatch, priority: int = 0) -> TableEntry | None:
        """The entry with this canonical match and priority, if installed."""
        return self._entries.get((match, priority))

    def entries(self) -> Iterator[TableEntry]:
        """Installed entries in insertion order (the default entry is not among them)."""
        return iter(list(self._entries.values()))

    def __len__(self) -> int:
        return len(self._entries)

    def set_default(self, action: str, params: Mapping[str, int] | None = None) -> None:
        """Change the action run on a miss."""
        p = self._check_action(action, params)
        self.default_action, self.default_params = action, p
        self.default_modified = True

    def reset_default(self) -> None:
        """Back to the P4 program's default action (P4Runtime: MODIFY default with no action)."""
        self.default_action = self.table.default_action
        self.default_params = dict(self.table.default_params)
        self.default_modified = False

    def clear(self) -> None:
        """Remove all entries and restore the program's default action."""
        self._entries.clear()
        self._exact.clear()
        self._by_plen.clear()
        self._plens_desc.clear()
        self._scan.clear()
        self._scan_keys.clear()
        self.reset_default()

    # -- internals ------------------------------------------------------------------
    def _check_action(self, action: str, params: Mapping[str, int] | None) -> dict[str, int]:
        if action not in self.table.actions:
            raise ValueError(f"{self.table.name}: action {action!r} is not one of {self.table.actions}")
        return dict(params or {})

    def _index(self, e: TableEntry) -> None:
        if self._shape == "exact":
            vals = tuple(v for v, _ in e.match)
            self._exact[vals[0] if len(vals) == 1 else vals] = e
        elif self._shape == "lpm":
            i = self._lpm_index
            _value, mask = e.match[i]
            plen = mask.bit_count()
            d = self._by_plen.get(plen)
            if d is None:
                d = self._by_plen[plen] = {}
                self._plens_desc.append((plen, mask))
                self._plens_desc.sort(reverse=True)
            d[self._lpm_key(e)] = e
        else:
            k = (-e.priority, e.seq)
            pos = bisect.bisect(self._scan_keys, k)
            self._scan_keys.insert(pos, k)
            self._scan.insert(pos, e)

    def _lpm_key(self, e: TableEntry) -> object:
        vals = tuple(v for v, _ in e.match)
        return vals[0] if len(vals) == 1 else vals

    def _unindex(self, e: TableEntry) -> None:
        if self._shape == "exact":
            vals = tuple(v for v, _ in e.match)
            del self._exact[vals[0] if len(vals) == 1 else vals]
        elif self._shape == "lpm":
            plen = e.match[self._lpm_index][1].bit_count()
            d = self._by_plen[plen]
            del d[self._lpm_key(e)]
            if not d:
                del self._by_plen[plen]
                self._plens_desc = [pm for pm in self._plens_desc if pm[0] != plen]
        else:
            pos = bisect.bisect_left(self._scan_keys, (-e.priority, e.seq))
            del self._scan_keys[pos]
            del self._scan[pos]


def _check_width(value: int, width: int, what: str) -> None:
    if value < 0 or value >> width:
        raise ValueError(f"{what}: value {value:#x} does not fit in {width} bits")
