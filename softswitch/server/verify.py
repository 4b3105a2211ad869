"""Whether a pushed P4Info and device config describe the program softswitch runs (SetForwardingPipelineConfig
refuses anything else: softswitch cannot run another program)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from finsy.proto import p4i

from softswitch.program import Action, Digest, Program, Table
from softswitch.server.codec import (
    _MATCH_KIND,
    _METER_UNIT,
    _UNSUPPORTED_P4INFO,
)


def p4info_mismatch(program: Program, info: p4i.P4Info) -> str | None:
    """The first way ``info`` does not describe ``program`` (None if it does).

    Compared: entity names per kind; action parameters (names, bit widths);
    tables' match fields (names, kinds, bit widths), action sets and const
    default action; register widths and sizes; counter sizes; meter sizes, units
    and type (two-rate three-colour, v1model's); digests (a struct
    type whose members' names and bit widths are the program's).  Ids only need to
    be non-zero and unique: they are the pushing client's choice.
    """
    for fld in _UNSUPPORTED_P4INFO:
        items = getattr(info, fld)
        if len(items):
            listed = ", ".join(repr(x.preamble.name) for x in items)
            return f"P4Info has {fld} ({listed}) that softswitch program {program.name!r} does not implement"
    seen_ids: dict[int, str] = {}
    groups: list[tuple[str, Sequence[Any], Sequence[Any]]] = [
        ("action", program.actions, info.actions),
        ("table", program.tables, info.tables),
        ("register", program.registers, info.registers),
        ("counter", program.counters, info.counters),
        ("meter", program.meters, info.meters),
        ("digest", program.digests, info.digests),
        ("controller header", program.controller_headers, info.controller_packet_metadata),
    ]
    for kind, ours, theirs in groups:
        names: set[str] = set()
        for it in theirs:
            pre = it.preamble
            if pre.id == 0:
                return f"{kind} {pre.name!r} has id 0"
            if pre.id in seen_ids:
                return f"id {pre.id:#x} is used by both {seen_ids[pre.id]} and {kind} {pre.name!r}"
            seen_ids[pre.id] = f"{kind} {pre.name!r}"
            if pre.name in names:
                return f"{kind} {pre.name!r} appears twice"
            names.add(pre.name)
        for o in ours:
            if o.name not in names:
                return f"{kind} {o.name!r} of program {program.name!r} is missing from the P4Info"
        our_names = {o.name for o in ours}
        for it in theirs:
            if it.preamble.name not in our_names:
                return f"P4Info has {kind} {it.preamble.name!r}, which program {program.name!r} does not declare"
    action_names = {a.preamble.id: a.preamble.name for a in info.actions}
    for pa in info.actions:
        diff = _params_mismatch(program.action(pa.preamble.name), pa)
        if diff:
            return diff
    for pt in info.tables:
        diff = _table_mismatch(program.table(pt.preamble.name), pt, action_names)
        if diff:
            return diff
    for pr in info.registers:
        r = next(x for x in program.registers if x.name == pr.preamble.name)
        if (
            pr.type_spec.WhichOneof("type_spec") != "bitstring"
            or pr.type_spec.bitstring.WhichOneof("type_spec") != "bit"
        ):
            return f"register {r.name!r}: only bit<W> registers are supported"
        width = pr.type_spec.bitstring.bit.bitwidth
        if width != r.bitwidth:
            return f"register {r.name!r} is bit<{width}> in the P4Info but bit<{r.bitwidth}> in the program"
        if pr.size != r.size:
            return f"register {r.name!r} has size {pr.size} in the P4Info but {r.size} in the program"
    for pc in info.counters:
        c = next(x for x in program.counters if x.name == pc.preamble.name)
        if pc.size != c.size:
            return f"counter {c.name!r} has size {pc.size} in the P4Info but {c.size} in the program"
    for pm in info.meters:
        m = program.meter(pm.preamble.name)
        if pm.size != m.size:
            return f"meter {m.name!r} has size {pm.size} in the P4Info but {m.size} in the program"
        unit = _METER_UNIT.get(pm.spec.unit, p4i.MeterSpec.Unit.Name(pm.spec.unit))
        if unit != m.unit:
            return f"meter {m.name!r} counts {unit} in the P4Info but {m.unit} in the program"
        if pm.spec.type != p4i.MeterSpec.TWO_RATE_THREE_COLOR:
            return (
                f"meter {m.name!r} is {p4i.MeterSpec.Type.Name(pm.spec.type)} in the P4Info "
                "but a two-rate three-colour meter in the program"
            )
    for pd in info.digests:
        diff = _digest_mismatch(program.digest(pd.preamble.name), pd, info)
        if diff:
            return diff
    for ph in info.controller_packet_metadata:
        h = program.controller_header(ph.preamble.name)
        theirs = [(m.name, m.bitwidth) for m in ph.metadata]
        if theirs != list(h.fields) or sorted(m.id for m in ph.metadata) != list(range(1, len(theirs) + 1)):
            return (
                f"controller header {h.name!r} has metadata {theirs} in the P4Info but {list(h.fields)} "
                "in the program (ids 1.. in order)"
            )
    return None


def _digest_mismatch(d: Digest, pd: p4i.Digest, info: p4i.P4Info) -> str | None:
    if pd.type_spec.WhichOneof("type_spec") != "struct":
        return f"digest {d.name!r}: only struct digests are supported (p4c's digest<T> with T a struct)"
    sname = pd.type_spec.struct.name
    if sname not in info.type_info.structs:
        return f"digest {d.name!r}: struct {sname!r} is not in the P4Info's type_info"
    members = info.type_info.structs[sname].members
    theirs: list[tuple[str, int]] = []
    for m in members:
        bs = m.type_spec.bitstring
        if m.type_spec.WhichOneof("type_spec") != "bitstring" or bs.WhichOneof("type_spec") != "bit":
            return f"digest {d.name!r}: member {m.name!r} is not a bit<W>"
        theirs.append((m.name, bs.bit.bitwidth))
    ours = list(d.fields)
    if theirs != ours:
        show = lambda fs: "{" + ", ".join(f"bit<{w}> {n}" for n, w in fs) + "}"  # noqa: E731
        return f"digest {d.name!r} is struct {show(theirs)} in the P4Info but {show(ours)} in the program"
    return None


def _params_mismatch(a: Action, pa: p4i.Action) -> str | None:
    theirs: dict[str, int] = {}
    ids: set[int] = set()
    for p in pa.params:
        if p.id == 0 or p.id in ids or p.name in theirs:
            return f"action {a.name!r}: parameter {p.name!r} has a zero or repeated id or name"
        ids.add(p.id)
        theirs[p.name] = p.bitwidth
    for prm in a.params:
        if prm.name not in theirs:
            return f"action {a.name!r}: parameter {prm.name!r} is missing from the P4Info"
        if theirs[prm.name] != prm.bitwidth:
            return (
                f"action {a.name!r}: parameter {prm.name!r} is bit<{theirs[prm.name]}> in the P4Info "
                f"but bit<{prm.bitwidth}> in the program"
            )
    extra = set(theirs) - {p.name for p in a.params}
    if extra:
        return f"action {a.name!r}: P4Info has parameter {sorted(extra)[0]!r}, which the program does not"
    return None


def _table_mismatch(t: Table, pt: p4i.Table, action_names: dict[int, str]) -> str | None:
    theirs: dict[str, tuple[str, int]] = {}
    ids: set[int] = set()
    for mf in pt.match_fields:
        if mf.id == 0 or mf.id in ids or mf.name in theirs:
            return f"table {t.name!r}: match field {mf.name!r} has a zero or repeated id or name"
        ids.add(mf.id)
        if mf.WhichOneof("match") != "match_type" or mf.match_type not in _MATCH_KIND:
            return f"table {t.name!r}: match field {mf.name!r} has a match kind softswitch does not support"
        theirs[mf.name] = (_MATCH_KIND[mf.match_type], mf.bitwidth)
    for k in t.keys:
        if k.name not in theirs:
            return f"table {t.name!r}: match field {k.name!r} is missing from the P4Info"
        kind, width = theirs[k.name]
        if kind != k.match_type:
            return f"table {t.name!r}: match field {k.name!r} is {kind} in the P4Info but {k.match_type} in the program"
        if width != k.bitwidth:
            return (
                f"table {t.name!r}: match field {k.name!r} is bit<{width}> in the P4Info "
                f"but bit<{k.bitwidth}> in the program"
            )
    extra = set(theirs) - {k.name for k in t.keys}
    if extra:
        return f"table {t.name!r}: P4Info has match field {sorted(extra)[0]!r}, which the program does not"
    refs: set[str] = set()
    for ref in pt.action_refs:
        if ref.id not in action_names:
            return f"table {t.name!r} refers to action id {ref.id:#x}, which the P4Info does not define"
        refs.add(action_names[ref.id])
    if refs != set(t.actions):
        missing = sorted(set(t.actions) - refs)
        if missing:
            return f"table {t.name!r}: action {missing[0]!r} is missing from its action refs in the P4Info"
        return f"table {t.name!r}: P4Info lists action {sorted(refs - set(t.actions))[0]!r}, which the program does not"
    if pt.implementation_id or len(pt.direct_resource_ids):
        return f"table {t.name!r}: action profiles and direct resources are not supported"
    const_default = action_names.get(pt.const_default_action_id) if pt.const_default_action_id else None
    ours = t.default_action if t.const_default_action else None
    if const_default != ours:
        return f"table {t.name!r}: const default action is {const_default!r} in the P4Info but {ours!r} in the program"
    return None


# -- device config -----------------------------------------------------------------------------
def device_config_mismatch(program: Program, blob: bytes) -> str | None:
    """Why softswitch cannot run ``blob`` as the device config of ``program`` (None if it can).

    Accepted: empty bytes (run the built-in program) or exactly the identity
    :meth:`Program.device_config` describes (target, program name, hash of the
    program's own P4Info).
    """
    if not blob:
        return None
    want = json.loads(program.device_config())
    accepts = (
        f"softswitch accepts an empty p4_device_config (run its built-in program {program.name!r}) "
        f"or its identity {program.device_config().decode()}"
    )
    try:
        doc = json.loads(blob)
    except ValueError:  # UnicodeDecodeError is a ValueError
        return f"p4_device_config ({len(blob)} bytes) is not JSON, so not a softswitch device config; {accepts}"
    if not isinstance(doc, dict) or doc.get("target") != want["target"]:
        what = (
            "a BMv2 JSON"
            if isinstance(doc, dict) and {"header_types", "pipelines"} & doc.keys()
            else "a JSON that is not a softswitch device config"
        )
        return f"p4_device_config is {what}: softswitch cannot run it; {accepts}"
    if doc.get("program") != want["program"]:
        return (
            f"p4_device_config is for program {doc.get('program')!r} but this softswitch runs "
            f"{program.name!r}; {accepts}"
        )
    if doc.get("p4info_sha256") != want["p4info_sha256"]:
        return (
            f"p4_device_config's p4info_sha256 {doc.get('p4info_sha256')!r} is not the hash of the P4Info of "
            f"the program this softswitch runs (another version of {program.name!r}?); {accepts}"
        )
    if doc != want:
        return f"p4_device_config has fields softswitch does not know: {sorted(set(doc) - set(want))}; {accepts}"
    return None
