"""Read the control-plane-visible declarations out of p4src/ without p4c.

A deliberately small reader for the subset of P4_16 our program uses: it
expands ``#include`` and ``#define``, resolves typedefs, header and struct
field widths, and collects the tables, actions, registers, counters and meters of a
control block in the shape p4c puts into a P4Info (names qualified by the
control's name; only actions that some table references are visible; the externs
as the shared controls declare them, through the macros of p4src/<arch>/arch.p4:
``DC_REGISTER``, ``DC_COUNTER``, ``DC_METER``), and the
digests: each ``DC_DIGEST(T, ...)`` call is a digest p4c names ``T``, whose fields
are struct T's members; and the ``@controller_header("name")`` headers (P4Info
``controller_packet_metadata``: the header's fields, named by the annotation).  The
parity test compares the result with softswitch's own declarations.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

V1MODEL_STANDARD_METADATA = {"ingress_port": 9, "egress_spec": 9, "egress_port": 9, "packet_length": 32}


@dataclass
class Decls:
    tables: dict[str, dict] = field(default_factory=dict)  # name -> {keys, actions, default, size}
    actions: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # name -> [(param, width)]
    registers: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (width, size)
    counters: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (size, unit)
    meters: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (size, unit)
    header_fields: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # type -> fields
    digests: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # struct name -> members
    controller_headers: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # annotation -> fields


def _preprocess(path: Path, seen: set[Path] | None = None) -> str:
    seen = seen if seen is not None else set()
    if path in seen:
        return ""
    seen.add(path)
    out = []
    for line in path.read_text().splitlines():
        m = re.match(r'\s*#include\s+"([^"]+)"', line)
        if m:
            out.append(_preprocess(path.parent / m.group(1), seen))
        elif re.match(r"\s*#include\s+<", line):
            continue
        else:
            out.append(line)
    return "\n".join(out)


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _block(text: str, start: int) -> tuple[str, int]:
    """The text between the brace at or after ``start`` and its partner."""
    i = text.index("{", start)
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j], j + 1
    raise ValueError("unbalanced braces")


def _int(expr: str, defines: dict[str, str]) -> int:
    expr = expr.strip()
    while expr in defines:
        expr = defines[expr].strip()
    expr = re.sub(r"\b([A-Z_][A-Z0-9_]*)\b", lambda m: defines.get(m.group(1), m.group(1)), expr)
    if not re.fullmatch(r"[0-9xXa-fA-F\s*+()-]+", expr):
        raise ValueError(f"cannot evaluate {expr!r}")
    return int(eval(expr, {"__builtins__": {}}))


def parse(main: Path, control: str = "DcIngress") -> Decls:
    raw = re.sub(r"\\\n", " ", _strip_comments(_preprocess(main)))  # a macro's continued lines: one #define line
    defines = dict(re.findall(r"^[ \t]*#define[ \t]+(\w+)[ \t]+(\S.*?)[ \t]*$", raw, flags=re.M))
    text = "\n".join(ln for ln in raw.splitlines() if not ln.strip().startswith("#"))
    d = Decls()
    typedefs = {name: int(w) for w, name in re.findall(r"typedef\s+bit<(\d+)>\s+(\w+)\s*;", text)}

    def width(t: str) -> int:
        t = t.strip()
        m = re.fullmatch(r"bit<(\w+)>", t)
        if m:
            return _int(m.group(1), defines)
        if t in typedefs:
            return typedefs[t]
        raise ValueError(f"unknown type {t}")

    for kind, name in re.findall(r"\b(header|struct)\s+(\w+)\s*\{", text):
        body, _ = _block(text, text.index(f"{kind} {name}"))
        fields = []
        for ftype, fname in re.findall(r"([\w<>]+)\s+(\w+)\s*;", body):
            try:
                fields.append((fname, width(ftype)))
            except ValueError:
                fields.append((fname, -1))  # a header or stack, not a bit field
        d.header_fields[name] = fields
    # resolve "hdr.x.y" / "meta.y" / "standard_metadata.y" to a width
    struct_of = {}
    for sname, fields in d.header_fields.items():
        for fname, _ in fields:
            struct_of.setdefault(sname, set()).add(fname)
    member_types: dict[str, dict[str, str]] = {}
    for name in re.findall(r"\bstruct\s+(\w+)\s*\{", text):
        body, _ = _block(text, text.index(f"struct {name}"))
        member_types[name] = {fname: ftype for ftype, fname in re.findall(r"([\w<>\[\]]+)\s+(\w+)\s*;", body)}

    controls: dict[str, tuple[str, str]] = {}  # name -> (parameter list, body)
    spans: list[tuple[int, int]] = []
    # control Name(params) [(constructor params)] {
    for cm in re.finditer(r"\bcontrol\s+(\w+)\s*\((.*?)\)\s*(?:\([^{]*?\)\s*)?\{", text, flags=re.S):
        cbody, end = _block(text, cm.start())
        controls[cm.group(1)] = (cm.group(2), cbody)
        spans.append((cm.start(), end))
    if control not in controls:
        raise ValueError(f"no control {control}")
    outside = text
    for a, b in reversed(spans):
        outside = outside[:a] + outside[b:]

    _externs(d, outside, "", defines)  # top-level instances: p4c names them without a prefix

    def collect(name: str, q: str) -> None:
        plist, body = controls[name]
        params = {pname: ptype for ptype, pname in re.findall(r"(?:inout|in|out)?\s*(\w+)\s+(\w+)\s*(?:,|$)", plist)}
        for ctype, inst in re.findall(r"\b(\w+)\s*\([^;{}]*\)\s*(\w+)\s*;", body):  # Type(args) name;
            if ctype in controls:
                collect(ctype, f"{q}{inst}.")
        _collect_control(d, body, q, params, member_types, defines, width)

    collect(control, f"{control}.")
    for cname, htype in re.findall(r'@controller_header\(\s*"(\w+)"\s*\)\s*header\s+(\w+)', text):
        d.controller_headers[cname] = d.header_fields[htype]
    for sname in re.findall(r"\bDC_DIGEST\s*\(\s*(\w+)\s*,", text):  # DC_DIGEST(T, receiver, data)
        if sname not in d.header_fields:
            raise ValueError(f"DC_DIGEST({sname}, ...): no struct {sname}")
        d.digests[sname] = d.header_fields[sname]
    return d


def _externs(d: Decls, body: str, q: str, defines: dict[str, str]) -> None:
    """Registers, counters and meters instantiated in ``body`` (names prefixed with ``q``, unless an
    ``@name(".x")`` makes the name global: ``x``)."""
    named = r'(?:@name\(\s*"([\w.]+)"\s*\)\s*)?'

    def full(annotated: str, name: str) -> str:
        if annotated.startswith("."):
            return annotated[1:]
        return q + (annotated or name)

    for a, w, size, name in re.findall(named + r"\bDC_REGISTER\s*\(\s*bit<(\w+)>\s*,([^)]+)\)\s*(\w+)\s*;", body):
        d.registers[full(a, name)] = (_int(w, defines), _int(size, defines))
    for a, size, name in re.findall(named + r"\bDC_COUNTER\s*\(([^)]+)\)\s*(\w+)\s*;", body):
        d.counters[full(a, name)] = (_int(size, defines), "packets")
    for a, size, name in re.findall(named + r"\bDC_METER\s*\(([^)]+)\)\s*(\w+)\s*;", body):
        d.meters[full(a, name)] = (_int(size, defines), "packets")


def _collect_control(
    d: Decls,
    body: str,
    q: str,
    params: dict[str, str],
    member_types: dict[str, dict[str, str]],
    defines: dict[str, str],
    width: Callable[[str], int],
) -> None:
    """Tables, actions and externs declared directly in one control body (names prefixed with ``q``)."""

    def key_width(expr: str) -> int:
        parts = expr.split(".")
        ptype = params[parts[0]]
        if ptype == "standard_metadata_t":
            return V1MODEL_STANDARD_METADATA[parts[1]]
        t = ptype
        for p in parts[1:-1]:
            t = member_types[t][p]
        return dict(d.header_fields[t])[parts[-1]]

    _externs(d, body, q, defines)
    all_actions: dict[str, list[tuple[str, int]]] = {"NoAction": []}
    for name, plist in re.findall(r"\baction\s+(\w+)\s*\(([^)]*)\)", body):
        ps = []
        for p in filter(None, (x.strip() for x in plist.split(","))):
            ptype, pname = p.rsplit(None, 1)
            ps.append((pname, width(ptype)))
        all_actions[q + name] = ps
    for tm in re.finditer(r"\btable\s+(\w+)\s*\{", body):
        tbody, _ = _block(body, tm.start())
        keys = []
        km = re.search(r"\bkey\s*=\s*\{", tbody)
        if km:
            kbody, _ = _block(tbody, km.start())
            # a key's P4Info name is its @name annotation (p4src/ gives every key one), else its expression
            for expr, kind, name in re.findall(r'([\w.]+)\s*:\s*(\w+)\s*(?:@name\(\s*"([\w.]+)"\s*\))?\s*;', kbody):
                keys.append((name or expr, key_width(expr), kind))
        am = re.search(r"\bactions\s*=\s*\{", tbody)
        abody, _ = _block(tbody, am.start())
        acts = [a if a == "NoAction" else q + a for a in re.findall(r"(\w+)\s*(?:\(\s*\))?\s*;", abody)]
        dm = re.search(r"\bdefault_action\s*=\s*(\w+)\s*\(([^)]*)\)", tbody)
        sm = re.search(r"\bsize\s*=\s*([^;]+);", tbody)
        default = dm.group(1) if dm else "NoAction"
        default = default if default == "NoAction" else q + default
        dargs = [_int(a, defines) for a in dm.group(2).split(",") if a.strip()] if dm else []
        d.tables[q + tm.group(1)] = {
            "keys": keys,
            "actions": acts,
            "default": default,
            "default_params": tuple(zip((pn for pn, _ in all_actions[default]), dargs, strict=True)),
            "size": _int(sm.group(1), defines) if sm else 1024,
        }
        for a in acts:
            d.actions[a] = all_actions[a]
