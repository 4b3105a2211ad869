"""The byte layouts of a p4c-ebpf program's maps, read from the object's BTF -- never assumed.

What a P4Runtime server over these maps must know to write a table entry or read a counter, a register cell
or a digest: each map's kind, key and value, and inside them every field's offset, size and byte order.
p4c-ebpf writes them as C structs (``backends/ebpf/ebpfType.cpp``, ``ebpfTable.cpp``); clang records them in
BTF; ``bpftool btf dump -j`` gives them here as JSON.  The rules the structs follow:

* a field of up to 64 bits is an unsigned integer in host order (little-endian here); a wider one is an array of
  bytes in network order, most significant first -- the P4Runtime bytes themselves;
* a table's key is ``{field0, field1, ...}`` in the P4 key's order; an LPM table's starts with ``prefixlen``,
  and its LPM field (the last) is stored in network order (the datapath swaps it with ``bpf_htonl``);
* a table's value is ``{action, u}``: ``u`` a union of one struct per action, the action's parameters in order;
  an action's number is its position in the union (0 is NoAction);
* a table's default entry is the value at index 0 of ``<table>_defaultAction``, an array of one;
* a counter cell is ``{packets}`` or ``{bytes, packets}``, a register cell a bare integer or byte array.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

BPFTOOL = "bpftool"


class LayoutError(RuntimeError):
    """The object's BTF is missing or does not have the shape p4c-ebpf gives its maps."""


@dataclass(frozen=True)
class Field:
    """One member: ``size`` bytes at ``offset``; ``network`` when it is a byte array (network order)."""

    name: str
    offset: int
    size: int
    network: bool = False

    def pack(self, buf: bytearray, value: int, network: bool | None = None, base: int = 0) -> None:
        """Write ``value`` at ``base`` + offset of ``buf`` (OverflowError if it does not fit); ``network``
        overrides the field's byte order."""
        order: Literal["big", "little"] = "big" if (self.network if network is None else network) else "little"
        start = base + self.offset
        buf[start : start + self.size] = value.to_bytes(self.size, order)

    def unpack(self, buf: bytes, network: bool | None = None, base: int = 0) -> int:
        order: Literal["big", "little"] = "big" if (self.network if network is None else network) else "little"
        start = base + self.offset
        return int.from_bytes(buf[start : start + self.size], order)


_T = TypeVar("_T", "Field", "Action")


def _named(items: tuple[_T, ...], name: str, what: str) -> _T:
    found = [x for x in items if x.name == name]
    if not found:
        raise LayoutError(f"no {what} {name!r} in {[x.name for x in items]}")
    return found[0]


@dataclass(frozen=True)
class Struct:
    """A struct's members in order, and its size."""

    size: int
    fields: tuple[Field, ...]

    def field(self, name: str) -> Field:
        return _named(self.fields, name, "member")


@dataclass(frozen=True)
class Action:
    """One member of a table value's union: the action's id (its position) and its parameters."""

    name: str  # the C name: the action's P4Info name with dots turned into underscores
    id: int
    params: Struct


@dataclass(frozen=True)
class TableValue:
    """``{action, u}`` of a table (and of its default entry)."""

    size: int
    action: Field
    union_offset: int
    actions: tuple[Action, ...]

    def by_name(self, c_name: str) -> Action:
        return _named(self.actions, c_name, "action")


@dataclass(frozen=True)
class MapLayout:
    """A map's kind (``BPF_MAP_TYPE_*`` number), size, and its key and value: a :class:`Struct`, a
    :class:`TableValue` or a bare :class:`Field` (a register cell, an array index)."""

    name: str
    map_type: int
    max_entries: int
    key: Struct | Field | None
    value: Struct | TableValue | Field

    @property
    def key_size(self) -> int:
        return 0 if self.key is None else self.key.size

    @property
    def value_size(self) -> int:
        return self.value.size


def bpftool() -> str:
    """The bpftool binary (Debian puts it in /usr/sbin, which a user's PATH may lack)."""
    found = shutil.which(BPFTOOL) or shutil.which(BPFTOOL, path="/usr/sbin:/sbin")
    if found is None:
        raise LayoutError("bpftool is not installed: `make deps` installs it (Debian package bpftool)")
    return found


def read_btf(object_file: Path) -> list[dict]:
    """The BTF types of ``object_file``, as bpftool dumps them."""
    res = subprocess.run(
        [bpftool(), "btf", "dump", "file", str(object_file), "-j"], capture_output=True, text=True, check=False
    )
    if res.returncode != 0:
        raise LayoutError(f"bpftool could not read the BTF of {object_file}: {res.stderr.strip()}")
    return json.loads(res.stdout)["types"]


class _Types:
    def __init__(self, types: list[dict]) -> None:
        self.by_id = {t["id"]: t for t in types}
        self.types = types

    def resolve(self, type_id: int) -> dict:
        """Through typedefs and qualifiers to the type itself."""
        t = self.by_id[type_id]
        while t["kind"] in ("TYPEDEF", "VOLATILE", "CONST", "RESTRICT"):
            t = self.by_id[t["type_id"]]
        return t

    def size(self, type_id: int) -> int:
        t = self.resolve(type_id)
        if t["kind"] == "ARRAY":
            return self.size(t["type_id"]) * t["nr_elems"]
        if "size" not in t:
            raise LayoutError(f"type {t} has no size")
        return int(t["size"])

    def field(self, name: str, offset: int, type_id: int) -> Field:
        t = self.resolve(type_id)
        if t["kind"] == "INT":
            return Field(name, offset, int(t["size"]))
        if t["kind"] == "ARRAY" and self.size(t["type_id"]) == 1:
            return Field(name, offset, t["nr_elems"], network=True)
        raise LayoutError(f"{name}: neither an integer nor a byte array ({t['kind']})")

    def struct(self, type_id: int) -> Struct:
        """A struct's members; a nested struct's are flattened (``value.pir_period``), and any other member
        (an array of wider integers, a union) is kept as opaque bytes (``network``: copied as they are)."""
        t = self.resolve(type_id)
        if t["kind"] != "STRUCT":
            raise LayoutError(f"expected a struct, found {t['kind']} {t.get('name')}")
        return Struct(int(t["size"]), tuple(self._members(t, 0, "")))

    def _members(self, t: dict, base: int, prefix: str) -> list[Field]:
        out = []
        for m in t["members"]:
            if m.get("bitfield_size"):
                raise LayoutError(f"{t.get('name')}.{m['name']} is a bit field")
            name, offset, mt = prefix + m["name"], base + m["bits_offset"] // 8, self.resolve(m["type_id"])
            if mt["kind"] == "STRUCT":
                out.extend(self._members(mt, offset, name + "."))
            elif mt["kind"] == "INT" or (mt["kind"] == "ARRAY" and self.size(mt["type_id"]) == 1):
                out.append(self.field(name, offset, m["type_id"]))
            else:
                out.append(Field(name, offset, self.size(m["type_id"]), network=True))
        return out

    def table_value(self, type_id: int) -> TableValue:
        t = self.resolve(type_id)
        members = {m["name"]: m for m in t.get("members", [])}
        if t["kind"] != "STRUCT" or set(members) != {"action", "u"}:
            raise LayoutError(f"{t.get('name')} is not a table value {{action, u}}")
        union = self.resolve(members["u"]["type_id"])
        actions = tuple(
            Action(m["name"], i, self.struct(m["type_id"]) if self.size(m["type_id"]) else Struct(0, ()))
            for i, m in enumerate(union["members"])
        )
        action = self.field("action", members["action"]["bits_offset"] // 8, members["action"]["type_id"])
        return TableValue(int(t["size"]), action, members["u"]["bits_offset"] // 8, actions)

    def key_or_value(self, type_id: int) -> Struct | TableValue | Field:
        t = self.resolve(type_id)
        if t["kind"] == "STRUCT":
            names = {m["name"] for m in t["members"]}
            return self.table_value(type_id) if names == {"action", "u"} else self.struct(type_id)
        return self.field("", 0, type_id)


def map_layouts(types: list[dict]) -> dict[str, MapLayout]:
    """Every map the object defines (its ``.maps`` section), by name."""
    ts = _Types(types)
    sections = [t for t in types if t["kind"] == "DATASEC" and t["name"] == ".maps"]
    if not sections:
        raise LayoutError("no .maps section in the BTF: was the object built with -g -DBTF?")
    out = {}
    for v in sections[0]["vars"]:
        var = ts.by_id[v["type_id"]]
        members = {m["name"]: m["type_id"] for m in ts.resolve(var["type_id"])["members"]}

        def number(member: str, members: dict[str, int] = members) -> int:
            # __uint(name, N) is a pointer to an array of N ints
            return int(ts.resolve(ts.by_id[members[member]]["type_id"])["nr_elems"])

        def pointee(member: str, members: dict[str, int] = members) -> int:
            return int(ts.by_id[members[member]]["type_id"])

        if "value" not in members:
            continue  # a map of maps' outer map (clone sessions, multicast groups): not the program's state
        key = ts.key_or_value(pointee("key")) if "key" in members else None
        if isinstance(key, TableValue):
            raise LayoutError(f"{var['name']}: a key shaped like a table value")
        out[var["name"]] = MapLayout(
            var["name"], number("type"), number("max_entries"), key, ts.key_or_value(pointee("value"))
        )
    return out


def load(object_file: Path) -> dict[str, MapLayout]:
    """The maps of a BPF object built by :mod:`softswitch.ebpf.build`, by name."""
    return map_layouts(read_btf(object_file))


def c_name(p4info_name: str) -> str:
    """The name p4c-ebpf gives the map or action of a P4Info name: the external name with dots turned into
    underscores (``DcIngress.cache.cache_lookup`` -> ``DcIngress_cache_cache_lookup``).  A P4Info name without
    a dot is a top-level one (``@name(".dc_stats")``, ``NoAction``, a digest's type), whose external name
    starts with the dot P4Info leaves out: ``_dc_stats``."""
    return p4info_name.replace(".", "_") if "." in p4info_name else "_" + p4info_name
