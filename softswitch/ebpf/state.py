"""The PSA build's pipeline state, its BPF maps, behind softswitch's target interface (softswitch/target.py), so
softswitch's P4Runtime server serves the kernel target unchanged: tables and their default entries, counters
and meters are read from and written to the maps the program pinned under its root, nowhere else.

What the maps cannot hold is kept beside them: an entry's controller metadata and metadata (P4Runtime's, never
the data plane's).  Port numbers are P4Runtime's on the server's side and the Linux interface indexes the
program sees on the map's (:class:`Ports`).
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from math import gcd
from pathlib import Path

from softswitch.ebpf import libbpf
from softswitch.ebpf.codec import BYTES, PACKETS, TableCodec, counter_cells
from softswitch.ebpf.layout import LayoutError, MapLayout, Struct, c_name
from softswitch.program import Program
from softswitch.state import SwitchState
from softswitch.state.tables import TableEntry
from softswitch.target import (
    CanonicalMatch,
    EntryExistsError,
    EntryNotFoundError,
    MeterConfig,
    TableFullError,
)

# the match fields and action parameters that carry a port (translated between P4Runtime and ifindex)
PORT_FIELDS = frozenset({"ingress_port"})
PORT_PARAMS = frozenset({"port", "alt_port"})
BPF_NOEXIST, BPF_EXIST = 1, 2
NS_PER_S = 1_000_000_000
UNCONNECTED = 0xFF00  # ifindex stand-ins for ports without an interface: none exists, so a redirect drops


class Ports:
    """P4Runtime port numbers <-> the interface indexes of the switch's interfaces.

    A port the switch has no interface for is written as ``UNCONNECTED + port`` (no such interface: the
    program's redirect there fails and the frame is dropped, as a switch drops what it sends to an
    unconnected port) and reads back as the same port.
    """

    def __init__(self, ifindex: Mapping[int, int]) -> None:
        self._to_if = dict(ifindex)
        self._to_port = {i: p for p, i in self._to_if.items()}
        if len(self._to_port) != len(self._to_if) or any(i >= UNCONNECTED for i in self._to_port):
            raise ValueError(f"ports {self._to_if}: interface indexes must be distinct and below {UNCONNECTED:#x}")

    def ifindex(self, port: int) -> int:
        return self._to_if.get(port, UNCONNECTED + port)

    def port(self, ifindex: int) -> int:
        if ifindex in self._to_port:
            return self._to_port[ifindex]
        return ifindex - UNCONNECTED if ifindex >= UNCONNECTED else ifindex


@dataclass
class _Pinned:
    """A pinned map, opened once."""

    layout: MapLayout
    fd: int

    @classmethod
    def open(cls, root: Path, layout: MapLayout) -> _Pinned:
        return cls(layout, libbpf.map_get(root / layout.name))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass
class MapTable:
    """One table: its entries in its hash map or LPM trie, its default entry in ``<table>_defaultAction``."""

    codec: TableCodec
    entries_map: _Pinned
    default_map: _Pinned
    ports: Ports
    _extra: dict[tuple[CanonicalMatch, int], tuple[int, bytes]] = field(default_factory=dict)

    # -- translation ----------------------------------------------------------------------------------
    def _dp_match(self, match: CanonicalMatch) -> CanonicalMatch:
        return tuple(
            (self.ports.ifindex(v), m) if k.name in PORT_FIELDS else (v, m)
            for k, (v, m) in zip(self.codec.table.keys, match, strict=True)
        )

    def _rt_match(self, match: CanonicalMatch) -> CanonicalMatch:
        return tuple(
            (self.ports.port(v), m) if k.name in PORT_FIELDS else (v, m)
            for k, (v, m) in zip(self.codec.table.keys, match, strict=True)
        )

    def _dp_value(self, action: str, params: Mapping[str, int]) -> bytes:
        p = {k: self.ports.ifindex(v) if k in PORT_PARAMS else v for k, v in params.items()}
        return self.codec.value(action, p)

    def _rt_action(self, value: bytes) -> tuple[str, dict[str, int]]:
        action, params = self.codec.action(value)
        return action, {k: self.ports.port(v) if k in PORT_PARAMS else v for k, v in params.items()}

    def _key(self, match: CanonicalMatch) -> bytes:
        return self.codec.key(self._dp_match(match))

    def _entry(self, key: bytes, value: bytes) -> TableEntry:
        match = self._rt_match(self.codec.match(key))
        action, params = self._rt_action(value)
        cm, md = self._extra.get((match, 0), (0, b""))
        return TableEntry(match, 0, action, params, cm, md)

    # -- TableTarget ----------------------------------------------------------------------------------
    @property
    def default_action(self) -> str:
        return self._default()[0]

    @property
    def default_params(self) -> Mapping[str, int]:
        return self._default()[1]

    @property
    def default_modified(self) -> bool:
        t = self.codec.table
        return self._default() != (t.default_action, dict(t.default_params))

    def _default(self) -> tuple[str, dict[str, int]]:
        value = libbpf.lookup(self.default_map.fd, bytes(4), self.default_map.layout.value_size)
        return self._rt_action(value or bytes(self.default_map.layout.value_size))

    def get(self, match: CanonicalMatch, priority: int = 0) -> TableEntry | None:
        if priority or not self.codec.table.keys:
            return None
        key = self._key(match)
        value = libbpf.lookup(self.entries_map.fd, key, self.entries_map.layout.value_size)
        return None if value is None else self._entry(key, value)

    def entries(self) -> Iterator[TableEntry]:
        if not self.codec.table.keys:
            return
        size = self.entries_map.layout.value_size
        for key in list(libbpf.keys(self.entries_map.fd, self.entries_map.layout.key_size)):
            value = libbpf.lookup(self.entries_map.fd, key, size)
            if value is not None:
                yield self._entry(key, value)

    def _write(
        self, match: CanonicalMatch, action: str, params: dict[str, int], flags: int, cm: int, md: bytes
    ) -> TableEntry:
        key = self._key(match)
        try:
            libbpf.update(self.entries_map.fd, key, self._dp_value(action, params), flags)
        except libbpf.LibbpfError as e:
            if e.errno == errno.EEXIST:
                raise EntryExistsError(f"{self.codec.table.name}: entry exists") from None
            if e.errno == errno.ENOENT:
                raise EntryNotFoundError(f"{self.codec.table.name}: no such entry") from None
            if e.errno in (errno.E2BIG, errno.ENOSPC, errno.ENOMEM):
                raise TableFullError(f"{self.codec.table.name}: full ({self.codec.table.size} entries)") from None
            raise
        self._extra[(match, 0)] = (cm, md)
        return TableEntry(match, 0, action, dict(params), cm, md)

    def insert_canonical(
        self,
        match: CanonicalMatch,
        action: str,
        params: dict[str, int],
        priority: int = 0,  # noqa: ARG002 - exact and LPM entries have none (the server checks it is 0)
        *,
        controller_metadata: int = 0,
        metadata: bytes = b"",
    ) -> TableEntry:
        return self._write(match, action, params, BPF_NOEXIST, controller_metadata, metadata)

    def modify_canonical(
        self,
        match: CanonicalMatch,
        action: str,
        params: dict[str, int],
        priority: int = 0,  # noqa: ARG002 - exact and LPM entries have none (the server checks it is 0)
        *,
        controller_metadata: int = 0,
        metadata: bytes = b"",
    ) -> TableEntry:
        return self._write(match, action, params, BPF_EXIST, controller_metadata, metadata)

    def delete_canonical(self, match: CanonicalMatch, priority: int = 0) -> TableEntry:
        old = self.get(match, priority)
        if old is None or not libbpf.delete(self.entries_map.fd, self._key(match)):
            raise EntryNotFoundError(f"{self.codec.table.name}: no such entry")
        self._extra.pop((match, 0), None)
        return old

    def set_default(self, action: str, params: Mapping[str, int] | None = None) -> None:
        libbpf.update(self.default_map.fd, bytes(4), self._dp_value(action, dict(params or {})))

    def reset_default(self) -> None:
        t = self.codec.table
        self.set_default(t.default_action, dict(t.default_params))

    def clear(self) -> None:
        """No entries; the program's default entry."""
        for key in list(libbpf.keys(self.entries_map.fd, self.entries_map.layout.key_size)):
            libbpf.delete(self.entries_map.fd, key)
        self._extra.clear()
        self.reset_default()


@dataclass
class MapCounter:
    """An indexed counter: its array map, one cell per index."""

    cells: _Pinned

    @property
    def size(self) -> int:
        return self.cells.layout.max_entries

    def read(self, index: int) -> tuple[int, int]:
        return counter_cells(self.cells.fd, self.cells.layout, [index])[index]

    def write(self, index: int, packets: int, nbytes: int) -> None:
        value = self.cells.layout.value
        assert isinstance(value, Struct)
        buf = bytearray(value.size)
        for f in value.fields:
            f.pack(buf, (packets if f.name == PACKETS else nbytes) & ((1 << (8 * f.size)) - 1))
        libbpf.update(self.cells.fd, index.to_bytes(4, "little"), bytes(buf))

    def clear(self) -> None:
        libbpf.zero_array(self.cells.fd, self.size, self.cells.layout.value_size)


def _per_period(rate: int) -> tuple[int, int]:
    """(period in ns, units per period) of ``rate`` units per second, exactly (p4c-ebpf's meters refill
    ``units`` tokens every ``period`` ns)."""
    g = gcd(rate, NS_PER_S) or NS_PER_S
    return NS_PER_S // g, rate // g


@dataclass
class MapMeter:
    """An indirect meter: one two-rate three-colour meter per index in a hash map (absent: unconfigured, every
    packet GREEN, as P4Runtime says)."""

    cells: _Pinned
    size: int

    def _fields(self) -> Struct:
        value = self.cells.layout.value
        if not isinstance(value, Struct):
            raise LayoutError(f"{self.cells.layout.name}: not a meter's cells")
        return value

    def configure(self, index: int, config: MeterConfig | None) -> None:
        key = index.to_bytes(4, "little")
        if config is None:
            libbpf.delete(self.cells.fd, key)
            return
        s = self._fields()
        buf = bytearray(s.size)
        now = time.monotonic_ns()  # bpf_ktime_get_ns's clock: the program's packet timestamps
        pir_period, pir_units = _per_period(config.pir)
        cir_period, cir_units = _per_period(config.cir)
        for name, v in (
            ("pir_period", pir_period), ("pir_unit_per_period", pir_units), ("cir_period", cir_period),
            ("cir_unit_per_period", cir_units), ("pbs", config.pburst), ("cbs", config.cburst),
            ("pbs_left", config.pburst), ("cbs_left", config.cburst), ("time_p", now), ("time_c", now),
        ):  # fmt: skip
            s.field("value." + name).pack(buf, v)
        libbpf.update(self.cells.fd, key, bytes(buf))

    def config(self, index: int) -> MeterConfig | None:
        s = self._fields()
        buf = libbpf.lookup(self.cells.fd, index.to_bytes(4, "little"), s.size)
        if buf is None:
            return None

        def get(name: str) -> int:
            return s.field("value." + name).unpack(buf)

        if get("pir_period") == 0:
            return None
        return MeterConfig(
            cir=get("cir_unit_per_period") * NS_PER_S // get("cir_period"),
            cburst=get("cbs"),
            pir=get("pir_unit_per_period") * NS_PER_S // get("pir_period"),
            pburst=get("pbs"),
        )

    def clear(self) -> None:
        for i in range(self.size):
            self.configure(i, None)


class EbpfState:
    """softswitch's :class:`~softswitch.target.PipelineTarget` over the maps pinned under ``root``."""

    def __init__(self, program: Program, layouts: dict[str, MapLayout], root: Path, ports: Ports) -> None:
        self._program, self.root, self.ports = program, root, ports
        self._lock = threading.RLock()
        self._open: list[_Pinned] = []

        def pinned(name: str) -> _Pinned:
            try:
                p = _Pinned.open(root, layouts[name])
            except KeyError:
                raise LayoutError(f"the program has no map {name}") from None
            self._open.append(p)
            return p

        self._tables: dict[str, MapTable] = {}
        for t in program.tables:
            codec = TableCodec.of(program, t.name, layouts)
            self._tables[t.name] = MapTable(codec, pinned(codec.entries.name), pinned(codec.default.name), ports)
        self._counters = {c.name: MapCounter(pinned(c_name(c.name))) for c in program.counters}
        self._registers = [pinned(c_name(r.name)) for r in program.registers]
        self._meters = {m.name: MapMeter(pinned(c_name(m.name)), m.size) for m in program.meters}
        for c in program.counters:
            units = {f.name for f in self._counters[c.name].cells.layout.value.fields}  # type: ignore[union-attr]
            want = {"packets": {PACKETS}, "bytes": {BYTES}, "both": {PACKETS, BYTES}}[c.unit]
            if units != want:
                raise LayoutError(f"counter {c.name} counts {sorted(units)} in the program, {sorted(want)} in P4Info")

    @property
    def program(self) -> Program:
        return self._program

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    @property
    def tables(self) -> Mapping[str, MapTable]:
        return self._tables

    @property
    def counters(self) -> Mapping[str, MapCounter]:
        return self._counters

    @property
    def meters(self) -> Mapping[str, MapMeter]:
        return self._meters

    def reset(self) -> None:
        """No entries, the program's defaults, counters at zero, meters unconfigured, every register cell 0:
        a new pipeline config starts from nothing, as on BMv2 and softswitch."""
        with self._lock:
            for t in self._tables.values():
                t.clear()
            for c in self._counters.values():
                c.clear()
            for m in self._meters.values():
                m.clear()
            for r in self._registers:
                libbpf.zero_array(r.fd, r.layout.max_entries, r.layout.value_size)

    def empty(self) -> SwitchState:
        """The shadow a VERIFY_AND_SAVE writes into: softswitch's own state of the same program, in memory
        (COMMIT copies what was written there into the maps)."""
        return SwitchState(self._program)

    def close(self) -> None:
        for p in self._open:
            p.close()
        self._open.clear()
