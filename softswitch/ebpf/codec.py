"""P4Runtime's view of a table entry <-> the bytes of its BPF map entry, per table (layouts from
:mod:`softswitch.ebpf.layout`, tables from the program softswitch serves: the PSA build's P4Info is held equal
to it).

A match is in the server's canonical form (softswitch/target.py): one (value, mask) pair per key field,
exact or LPM here (p4c-ebpf makes an all-exact table a hash map and a table whose last field is LPM an LPM
trie; the program has no other kind).  Values are P4Runtime's: ports are translated by the caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from softswitch.ebpf.layout import Field, LayoutError, MapLayout, Struct, TableValue, c_name
from softswitch.ebpf.libbpf import lookup
from softswitch.program import Action, Program, Table
from softswitch.target import CanonicalMatch

PACKETS, BYTES = "packets", "bytes"  # a counter cell's members (either or both, by the counter's unit)
PREFIXLEN = "prefixlen"  # an LPM trie key's first member: how many bits after it the entry matches
BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_LPM_TRIE = 1, 2, 11


def _mask_len(mask: int, bitwidth: int) -> int:
    """The prefix length of an LPM mask (canonical: ``bitwidth`` ones shifted, 0 for "don't care")."""
    length = bin(mask).count("1")
    if mask != ((1 << length) - 1) << (bitwidth - length):
        raise ValueError(f"mask {mask:#x} is not a prefix of {bitwidth} bits")
    return length


@dataclass(frozen=True)
class TableCodec:
    """One table's entries and default entry as map bytes."""

    table: Table
    actions: dict[str, Action]  # the table's actions by P4Info name
    entries: MapLayout  # the table's own map (hash or LPM trie)
    default: MapLayout  # <table>_defaultAction: an array of one value

    @classmethod
    def of(cls, program: Program, table: str, layouts: dict[str, MapLayout]) -> TableCodec:
        t = program.table(table)
        name = c_name(table)
        try:
            entries, default = layouts[name], layouts[name + "_defaultAction"]
        except KeyError as e:
            raise LayoutError(f"the object has no map {e.args[0]} for table {table}") from None
        codec = cls(t, {a: program.action(a) for a in t.actions}, entries, default)
        codec._check()
        return codec

    # -- keys -----------------------------------------------------------------------------------------
    @property
    def lpm(self) -> bool:
        return self.entries.map_type == BPF_MAP_TYPE_LPM_TRIE

    def _key_fields(self) -> tuple[Field, ...]:
        assert isinstance(self.entries.key, Struct)
        return tuple(f for f in self.entries.key.fields if f.name != PREFIXLEN)

    def key(self, match: CanonicalMatch) -> bytes:
        """The map key of a canonical match (the padding zeros, as the datapath builds its look-up keys)."""
        assert isinstance(self.entries.key, Struct)
        buf = bytearray(self.entries.key.size)
        fields = self._key_fields()
        for i, (mf, f, (value, mask)) in enumerate(zip(self.table.keys, fields, match, strict=True)):
            last_lpm = self.lpm and i == len(fields) - 1
            f.pack(buf, value, network=True if last_lpm else None)  # the trie compares it in network order
            if last_lpm:
                bits = 8 * (f.offset - self.entries.key.field(PREFIXLEN).size) + _mask_len(mask, mf.bitwidth)
                self.entries.key.field(PREFIXLEN).pack(buf, bits)
        return bytes(buf)

    def match(self, key: bytes) -> CanonicalMatch:
        """The canonical match of a map key (read back from the map)."""
        assert isinstance(self.entries.key, Struct)
        fields = self._key_fields()
        out = []
        for i, (mf, f) in enumerate(zip(self.table.keys, fields, strict=True)):
            full = (1 << mf.bitwidth) - 1
            if self.lpm and i == len(fields) - 1:
                prefix = self.entries.key.field(PREFIXLEN)
                length = prefix.unpack(key) - 8 * (f.offset - prefix.size)
                mask = full ^ ((1 << (mf.bitwidth - length)) - 1)
                out.append((f.unpack(key, network=True) & mask, mask) if length else (0, 0))
            else:
                out.append((f.unpack(key), full))
        return tuple(out)

    # -- values ---------------------------------------------------------------------------------------
    @property
    def _value(self) -> TableValue:
        assert isinstance(self.entries.value, TableValue)
        return self.entries.value

    def value(self, action: str, params: dict[str, int]) -> bytes:
        """The map value of ``action`` with ``params`` (P4Info names, every parameter given)."""
        v = self._value
        member = v.by_name(c_name(action))
        buf = bytearray(v.size)
        v.action.pack(buf, member.id)
        for p in self.actions[action].params:
            f = member.params.field(p.name)
            f.pack(buf, params[p.name], base=v.union_offset)
        return bytes(buf)

    def action(self, value: bytes) -> tuple[str, dict[str, int]]:
        """(P4Info action name, parameters) of a map value; an action id the program does not have raises."""
        v = self._value
        ident = v.action.unpack(value)
        names = {c_name(a): a for a in self.actions}
        member = next((a for a in v.actions if a.id == ident), None)
        if member is None or member.name not in names:
            raise LayoutError(f"{self.table.name}: action id {ident} is none of {sorted(self.actions)}")
        name = names[member.name]
        params = self.actions[name].params
        return name, {p.name: member.params.field(p.name).unpack(value, base=v.union_offset) for p in params}

    def _check(self) -> None:
        """Every key field and action parameter of the P4Info has a member wide enough in the layout."""
        if self.entries.map_type not in (BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_LPM_TRIE):
            raise LayoutError(f"{self.table.name}: map type {self.entries.map_type} is neither a hash nor an LPM trie")
        if not isinstance(self.entries.key, Struct) or not isinstance(self.entries.value, TableValue):
            raise LayoutError(f"{self.table.name}: not a table's key and value")
        if self.default.value != self.entries.value:
            raise LayoutError(f"{self.table.name}: its default action's value differs from its entries'")
        fields = self._key_fields()
        if not self.table.keys:
            return  # a keyless table: p4c-ebpf gives it a map of one dummy key, never looked up; its default is all
        if len(fields) != len(self.table.keys):
            raise LayoutError(f"{self.table.name}: {len(fields)} key members for {len(self.table.keys)} key fields")
        for mf, f in zip(self.table.keys, fields, strict=True):
            if mf.bitwidth > 8 * f.size:
                raise LayoutError(f"{self.table.name}: {mf.name} ({mf.bitwidth} bits) in {f.size} bytes")
        for a in self.actions.values():
            member = self._value.by_name(c_name(a.name))
            for p in a.params:
                if p.bitwidth > 8 * member.params.field(p.name).size:
                    raise LayoutError(f"{a.name}: {p.name} ({p.bitwidth} bits) does not fit")


def counter_cells(fd: int, counter: MapLayout, indexes: Iterable[int]) -> dict[int, tuple[int, int]]:
    """(packets, bytes) of the cells ``indexes`` of a counter's array map ``fd`` (0 for a unit it does not
    count)."""
    if not isinstance(counter.value, Struct) or counter.map_type != BPF_MAP_TYPE_ARRAY:
        raise LayoutError(f"{counter.name} is not a counter's array")
    names = {f.name for f in counter.value.fields}
    if not names or not names <= {PACKETS, BYTES}:
        raise LayoutError(f"{counter.name}: a cell of {sorted(names)}, not packets and/or bytes")
    out = {}
    for i in indexes:
        cell = lookup(fd, i.to_bytes(4, "little"), counter.value_size) or bytes(counter.value_size)
        out[i] = tuple(counter.value.field(u).unpack(cell) if u in names else 0 for u in (PACKETS, BYTES))
    return out  # type: ignore[return-value]
