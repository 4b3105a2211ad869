"""Data-plane state of one softswitch: tables, registers, counters, meters.

The pipeline (softswitch/dataplane/) reads and writes this state while it
processes a packet; the P4Runtime server (softswitch/server/) writes tables
and reads counters and meters.  Both hold :attr:`SwitchState.lock` while they do, so a
packet sees every control-plane update either entirely or not at all (the
atomicity P4Runtime asks of a target).  The objects themselves do not lock:
taking one lock per packet is cheaper than one per access.

Names are the fully qualified P4Info names (``DcIngress.ipv4_lpm``); numeric
P4Runtime ids are the server's business, because a client may push a P4Info
whose ids differ from softswitch's own.

Table entries are kept in a canonical form per match field — a pair of ints
whose meaning depends on the match kind:

========== ===================== =========================
kind       pair                  "don't care"
========== ===================== =========================
exact      (value, full mask)    (never)
lpm        (value, prefix mask)  (0, 0)
ternary    (value, mask)         (0, 0)
optional   (value, full mask)    (0, 0)
range      (low, high)           (0, 2**bitwidth - 1)
========== ===================== =========================

so two entries are the same entry exactly when their canonical matches and
priorities are equal, which is P4Runtime's definition of an entry's key.
"""

from __future__ import annotations

import bisect
import threading
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from softswitch.program import Counter, Meter, Program, Register, Table

FieldSpec = int | tuple[int, int] | None
"""How a caller states one match field (see :meth:`TableState.canonical_match`)."""

CanonicalMatch = tuple[tuple[int, int], ...]


class TableError(Exception):
    """Base of the errors a table update can raise (the server maps them to P4Runtime codes)."""


class EntryExistsError(TableError):
    """INSERT of an entry whose match key and priority are already in the table."""


class EntryNotFoundError(TableError):
    """MODIFY or DELETE of an entry that is not in the table."""


class TableFullError(TableError):
    """INSERT into a table that already holds ``table.size`` entries."""


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


def _cells(bitwidth: int, size: int) -> array[int] | list[int]:
    """Zeroed storage: a typed array for widths up to 64 bits, else a list of ints."""
    for code in ("B", "H", "I", "L", "Q"):
        if array(code).itemsize * 8 >= bitwidth:
            return array(code, [0]) * size  # repetition allocates exactly
    return [0] * size  # one shared 0 object per cell until written: 8 bytes a cell


class RegisterArray:
    """A P4 register: ``size`` cells of ``bitwidth`` bits, zero at start and on reset."""

    __slots__ = ("_cells", "_mask", "bitwidth", "name", "size")

    def __init__(self, name: str, bitwidth: int, size: int) -> None:
        self.name = name
        self.bitwidth = bitwidth
        self.size = size
        self._mask = _full(bitwidth)
        self._cells = _cells(bitwidth, size)

    def read(self, index: int) -> int:
        """Cell value; an out-of-range index reads 0 (BMv2 logs an error and goes on)."""
        if 0 <= index < self.size:
            return self._cells[index]
        return 0

    def write(self, index: int, value: int) -> None:
        """Store ``value`` truncated to the bit width; an out-of-range index is ignored."""
        if 0 <= index < self.size:
            self._cells[index] = value & self._mask

    def clear(self) -> None:
        self._cells = _cells(self.bitwidth, self.size)


class CounterArray:
    """An indexed P4 counter: packets and bytes per cell (both kept whatever the unit)."""

    __slots__ = ("_bytes", "_packets", "name", "size", "unit")

    def __init__(self, name: str, size: int, unit: str = "packets") -> None:
        self.name = name
        self.size = size
        self.unit = unit
        self._packets = array("Q", [0]) * size
        self._bytes = array("Q", [0]) * size

    def count(self, index: int, nbytes: int = 0) -> None:
        """One more packet of ``nbytes`` bytes at ``index``; out of range is ignored."""
        if 0 <= index < self.size:
            self._packets[index] += 1
            self._bytes[index] += nbytes

    def read(self, index: int) -> tuple[int, int]:
        """(packets, bytes) at ``index``; (0, 0) out of range."""
        if 0 <= index < self.size:
            return self._packets[index], self._bytes[index]
        return 0, 0

    def write(self, index: int, packets: int, nbytes: int) -> None:
        """Set a cell (P4Runtime MODIFY of a CounterEntry); out of range is ignored."""
        if 0 <= index < self.size:
            self._packets[index] = packets
            self._bytes[index] = nbytes

    def clear(self) -> None:
        self._packets = array("Q", [0]) * self.size
        self._bytes = array("Q", [0]) * self.size


GREEN, YELLOW, RED = 0, 1, 2
"""Meter colours, as v1model's ``V1MODEL_METER_COLOR_*``."""


@dataclass(frozen=True, slots=True)
class MeterConfig:
    """A two-rate three-colour meter's configuration, as P4Runtime gives it.

    Rates in units (packets or bytes, the meter's unit) per second, bursts in units.
    """

    cir: int
    cburst: int
    pir: int
    pburst: int


class _Bucket:
    """One token bucket of a meter cell, kept as BMv2 keeps it (bm_sim/meters.cpp).

    Tokens are not refilled by the interval since the last packet but from one time
    origin (the switch's start, ``now_us`` 0): ``int(now_us * rate_per_us)`` tokens have
    accrued by ``now_us``, and a packet adds those accrued since the previous one, so
    fractions of a token are never lost.  The bucket starts full when configured.
    """

    __slots__ = ("accrued", "burst", "color", "rate_per_us", "tokens")

    def __init__(self, rate_per_s: int, burst: int, color: int) -> None:
        self.rate_per_us = rate_per_s / 1e6  # BMv2's division, so the same float
        self.burst = burst
        self.tokens = burst
        self.accrued = 0
        self.color = color  # what a packet is coloured when this bucket lacks its tokens


class MeterArray:
    """An indirect P4 meter: ``size`` two-rate three-colour meters (RFC 2698, as BMv2 runs them).

    A cell is unconfigured at start, after :meth:`clear` and after ``configure(i, None)``;
    an unconfigured cell colours every packet GREEN.  A configured cell checks its peak
    bucket first (too few tokens: RED, and the committed bucket is not touched), then its
    committed bucket (too few: YELLOW, the peak tokens stay taken), else GREEN, both taken.
    A packet takes one token from a packets meter and its length from a bytes meter.
    """

    __slots__ = ("_buckets", "_configs", "name", "size", "unit")

    def __init__(self, name: str, size: int, unit: str = "packets") -> None:
        self.name = name
        self.size = size
        self.unit = unit
        self._configs: list[MeterConfig | None] = [None] * size
        self._buckets: list[tuple[_Bucket, _Bucket] | None] = [None] * size  # (peak, committed)

    def execute(self, index: int, now_us: int, nbytes: int = 0) -> int:
        """The colour of one packet of ``nbytes`` bytes at ``now_us`` (us since the switch started).

        An out-of-range index colours GREEN (BMv2 does not check the index).
        """
        if not 0 <= index < self.size:
            return GREEN
        buckets = self._buckets[index]
        if buckets is None:
            return GREEN
        need = 1 if self.unit == "packets" else nbytes
        for b in buckets:
            accrued = int(now_us * b.rate_per_us)
            if accrued > b.accrued:  # (a clock that went back only delays the next refill)
                b.tokens = min(b.tokens + accrued - b.accrued, b.burst)
                b.accrued = accrued
            if b.tokens < need:
                return b.color
            b.tokens -= need
        return GREEN

    def configure(self, index: int, config: MeterConfig | None) -> None:
        """Set a cell's rates (its buckets start full), or make it unconfigured (None).

        Out of range is ignored; rates must be validated by the caller (``cir <= pir``).
        """
        if not 0 <= index < self.size:
            return
        self._configs[index] = config
        self._buckets[index] = (
            None
            if config is None
            else (_Bucket(config.pir, config.pburst, RED), _Bucket(config.cir, config.cburst, YELLOW))
        )

    def config(self, index: int) -> MeterConfig | None:
        """A cell's configuration; None if unconfigured or out of range."""
        if 0 <= index < self.size:
            return self._configs[index]
        return None

    def clear(self) -> None:
        self._configs = [None] * self.size
        self._buckets = [None] * self.size


class SwitchState:
    """All data-plane state of one switch for one :class:`Program`."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.tables: dict[str, TableState] = {t.name: TableState(t) for t in program.tables}
        self.registers: dict[str, RegisterArray] = {
            r.name: RegisterArray(r.name, r.bitwidth, r.size) for r in program.registers
        }
        self.counters: dict[str, CounterArray] = {
            c.name: CounterArray(c.name, c.size, c.unit) for c in program.counters
        }
        self.meters: dict[str, MeterArray] = {m.name: MeterArray(m.name, m.size, m.unit) for m in program.meters}
        self.lock = threading.RLock()
        self.pending_digests: list[tuple[str, tuple[int, ...]]] = []

    def emit_digest(self, name: str, values: tuple[int, ...]) -> None:
        """v1model ``digest(receiver, data)``: queue one digest message (struct field values in order).

        The runtime drains :attr:`pending_digests` after each packet and hands the messages to
        the P4Runtime server, which batches them into DigestLists for the primary controller.
        """
        self.pending_digests.append((name, values))

    def reset(self) -> None:
        """Forget everything (a new pipeline config was committed).

        Clears in place, so objects a pipeline looked up once (``state.tables[...]``)
        stay valid.
        """
        with self.lock:
            for t in self.tables.values():
                t.clear()
            for r in self.registers.values():
                r.clear()
            for c in self.counters.values():
                c.clear()
            for m in self.meters.values():
                m.clear()


class Pipeline(Protocol):
    """What the runtime needs of a packet-processing pipeline.

    ``process`` runs with ``state.lock`` held, gets the ingress port, the frame
    and the microseconds since the switch started (BMv2's
    ``ingress_global_timestamp``), and returns the frames to send as
    (egress port, bytes); an empty list drops the packet.  An exception drops
    the packet too: the runtime logs and counts it and goes on.
    """

    program: Program

    def process(self, state: SwitchState, ingress_port: int, packet: bytes, now_us: int) -> list[tuple[int, bytes]]: ...


__all__ = [
    "GREEN",
    "RED",
    "YELLOW",
    "CanonicalMatch",
    "Counter",
    "CounterArray",
    "EntryExistsError",
    "EntryNotFoundError",
    "FieldSpec",
    "Meter",
    "MeterArray",
    "MeterConfig",
    "Pipeline",
    "Register",
    "RegisterArray",
    "SwitchState",
    "TableEntry",
    "TableError",
    "TableFullError",
    "TableState",
]
