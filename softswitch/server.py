"""P4Runtime v1 gRPC server of the softswitch (the role of BMv2's simple_switch_grpc).

Everything a controller does to a softswitch goes through here: client
arbitration on ``StreamChannel``, pipeline config, table writes, counter
and meter reads and writes.  Semantics follow the P4Runtime 1.4 specification; deliberate
differences are listed in :class:`P4RuntimeService`.

The softswitch runs one built-in :class:`~softswitch.program.Program`; a
pushed P4Info is accepted when it describes that same program (same names,
match kinds, bit widths, action sets) and its numeric ids are adopted, so a
controller can use softswitch's own P4Info or p4c's for ``p4src/``.  The
device config must be empty or softswitch's identity of that program
(:meth:`Program.device_config`); anything else (a BMv2 JSON, another
program's identity, garbage) is refused, since softswitch cannot run it.
What was accepted is kept and handed back by GetForwardingPipelineConfig.

Threading: gRPC handlers run on a thread pool.  ``_arb_lock`` guards
arbitration (held briefly); ``_cfg_lock`` serializes Write, Read and
SetForwardingPipelineConfig; ``state.lock`` is taken inside ``_cfg_lock``
for the actual data-plane access, so packets see each batch whole.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, NoReturn

import grpc
from finsy.proto import p4i, p4r, p4r_grpc, rpc_code, rpc_status
from google.protobuf import any_pb2

from softswitch.digests import DigestConfig, DigestConfigError, DigestEngine
from softswitch.program import Action, ControllerHeader, Counter, Digest, Meter, Param, Program, Register, Table
from softswitch.state import (
    CanonicalMatch,
    EntryExistsError,
    EntryNotFoundError,
    MeterConfig,
    SwitchState,
    TableEntry,
    TableFullError,
)

log = logging.getLogger("softswitch.server")

P4RUNTIME_API_VERSION = "1.4.0"
DEFAULT_GRPC_ADDR = "127.0.0.1:9559"
READ_CHUNK = 1000  # entities per ReadResponse message
MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # P4Info + BMv2 JSON can be large
PACKET_IN_BACKLOG = 4096  # per stream; further packet-ins are dropped

SC = grpc.StatusCode
_MATCH_KIND = {
    p4i.MatchField.EXACT: "exact",
    p4i.MatchField.LPM: "lpm",
    p4i.MatchField.TERNARY: "ternary",
    p4i.MatchField.RANGE: "range",
    p4i.MatchField.OPTIONAL: "optional",
}
_SCOPE_TABLE_ONLY = p4i.ActionRef.TABLE_ONLY
_SCOPE_DEFAULT_ONLY = p4i.ActionRef.DEFAULT_ONLY
_UNSUPPORTED_P4INFO = ("action_profiles", "direct_counters", "direct_meters", "value_sets", "externs")
_METER_UNIT = {p4i.MeterSpec.PACKETS: "packets", p4i.MeterSpec.BYTES: "bytes"}
MAX_METER_BURST = 0xFFFFFFFF  # BMv2 (PI) keeps bursts in 32 bits and refuses more with UNIMPLEMENTED; so do we
_CFG = p4r.SetForwardingPipelineConfigRequest
_GET = p4r.GetForwardingPipelineConfigRequest
_UPD = p4r.Update


class P4RuntimeError(Exception):
    """An error with its gRPC canonical code, for one RPC or one update of a batch."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _err(code: grpc.StatusCode, message: str) -> NoReturn:
    raise P4RuntimeError(code, message)


def _code_int(code: grpc.StatusCode) -> int:
    return int(code.value[0])


# -- bytestrings ------------------------------------------------------------------------
def decode_bytes(data: bytes, bitwidth: int, what: str) -> int:
    """A P4Runtime bytestring of a table entry as an unsigned int: big-endian, leading zero bytes allowed.

    Empty or too wide -> INVALID_ARGUMENT: the spec's Bytestrings section says
    OUT_OF_RANGE, but its table-entry sections (Match Format, Action
    Specification) say INVALID_ARGUMENT for a match or parameter value that
    does not conform, and that is what BMv2 answers for a too-wide value.
    (BMv2 accepts an empty value; the spec rejects it, and so do we.)
    """
    if not data:
        _err(SC.INVALID_ARGUMENT, f"{what}: empty bytestring")
    value = int.from_bytes(data, "big")
    if value >> bitwidth:
        _err(SC.INVALID_ARGUMENT, f"{what}: value {value:#x} does not fit in {bitwidth} bits")
    return value


def encode_bytes(value: int) -> bytes:
    """The canonical (shortest) bytestring of an unsigned int; 0 is one zero byte."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def _u128(v: p4r.Uint128) -> int:
    return (v.high << 64) | v.low


def _to_u128(value: int) -> p4r.Uint128:
    return p4r.Uint128(high=value >> 64, low=value & 0xFFFFFFFFFFFFFFFF)


# -- P4Info against the program -------------------------------------------------------------
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
            names = ", ".join(repr(x.preamble.name) for x in items)
            return f"P4Info has {fld} ({names}) that softswitch program {program.name!r} does not implement"
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


# -- ids of the P4Info in force ---------------------------------------------------------------
@dataclass
class TableIds:
    id: int
    table: Table
    field_index: dict[int, int]  # match field id -> index in table.keys
    field_ids: tuple[int, ...]  # index in table.keys -> match field id
    scopes: dict[int, int]  # action id -> ActionRef scope
    needs_priority: bool


@dataclass
class ActionIds:
    id: int
    action: Action
    params: dict[int, Param]  # param id -> Param
    param_ids: dict[str, int]


@dataclass
class IdMap:
    """Numeric ids of a validated P4Info, mapped onto the program's entities (by name)."""

    tables: dict[int, TableIds] = field(default_factory=dict)
    table_ids: dict[str, int] = field(default_factory=dict)
    actions: dict[int, ActionIds] = field(default_factory=dict)
    action_ids: dict[str, int] = field(default_factory=dict)
    counters: dict[int, Counter] = field(default_factory=dict)
    counter_ids: dict[str, int] = field(default_factory=dict)
    registers: dict[int, Register] = field(default_factory=dict)
    meters: dict[int, Meter] = field(default_factory=dict)
    meter_ids: dict[str, int] = field(default_factory=dict)
    digests: dict[int, Digest] = field(default_factory=dict)
    digest_ids: dict[str, int] = field(default_factory=dict)
    packet_out: dict[int, tuple[str, int]] = field(default_factory=dict)  # metadata id -> (name, bit width)

    @classmethod
    def build(cls, program: Program, info: p4i.P4Info) -> IdMap:
        """Only for a P4Info that :func:`p4info_mismatch` accepted."""
        m = cls()
        for pa in info.actions:
            a = program.action(pa.preamble.name)
            m.actions[pa.preamble.id] = ActionIds(
                pa.preamble.id, a, {p.id: a.param(p.name) for p in pa.params}, {p.name: p.id for p in pa.params}
            )
            m.action_ids[a.name] = pa.preamble.id
        for pt in info.tables:
            t = program.table(pt.preamble.name)
            by_name = {mf.name: mf.id for mf in pt.match_fields}
            fids = tuple(by_name[k.name] for k in t.keys)
            m.tables[pt.preamble.id] = TableIds(
                pt.preamble.id,
                t,
                {fid: i for i, fid in enumerate(fids)},
                fids,
                {ref.id: ref.scope for ref in pt.action_refs},
                any(k.match_type in ("ternary", "range", "optional") for k in t.keys),
            )
            m.table_ids[t.name] = pt.preamble.id
        for pc in info.counters:
            c = next(x for x in program.counters if x.name == pc.preamble.name)
            m.counters[pc.preamble.id] = c
            m.counter_ids[c.name] = pc.preamble.id
        for pr in info.registers:
            m.registers[pr.preamble.id] = next(x for x in program.registers if x.name == pr.preamble.name)
        for pm in info.meters:
            m.meters[pm.preamble.id] = program.meter(pm.preamble.name)
            m.meter_ids[pm.preamble.name] = pm.preamble.id
        for pd in info.digests:
            m.digests[pd.preamble.id] = program.digest(pd.preamble.name)
            m.digest_ids[pd.preamble.name] = pd.preamble.id
        for ph in info.controller_packet_metadata:
            if ph.preamble.name == PACKET_OUT:
                m.packet_out = {md.id: (md.name, md.bitwidth) for md in ph.metadata}
        return m


@dataclass
class PipelineConfig:
    """A forwarding pipeline config the server accepted."""

    p4info: p4i.P4Info
    device_config: bytes
    cookie: int | None
    ids: IdMap


PACKET_OUT = "packet_out"
"""The controller header a PacketOut's metadata fills (p4c: ``@controller_header("packet_out")``)."""


def packet_out_frame(program: Program, cfg: PipelineConfig, packet: p4r.PacketOut) -> bytes:
    """The bytes a PacketOut enters the pipeline with at the CPU port: its metadata serialized into the
    program's packet_out header (fields in order, big-endian bits; a field not given is 0), then the
    payload, as BMv2's P4Runtime server hands a packet-out to its ``--cpu-port``.

    P4RuntimeError (INVALID_ARGUMENT) for a metadata id the P4Info does not define or a value too wide;
    UNIMPLEMENTED when the program has no packet_out header.
    """
    try:
        header: ControllerHeader = program.controller_header(PACKET_OUT)
    except KeyError:
        _err(SC.UNIMPLEMENTED, f"program {program.name!r} has no packet_out header: it takes no packet-out")
    given: dict[str, int] = {}
    for md in packet.metadata:
        if md.metadata_id not in cfg.ids.packet_out:
            _err(SC.INVALID_ARGUMENT, f"packet-out metadata id {md.metadata_id} is not in the P4Info's packet_out")
        name, width = cfg.ids.packet_out[md.metadata_id]
        given[name] = decode_bytes(md.value, width, f"packet-out metadata {name!r}")
    bits = 0
    for name, width in header.fields:
        bits = (bits << width) | given.get(name, 0)
    return bits.to_bytes(header.bitwidth // 8, "big") + packet.payload


# -- arbitration --------------------------------------------------------------------------
_CLOSE = object()


@dataclass(eq=False)
class _Stream:
    """One StreamChannel: its identity once arbitrated and its outgoing queue."""

    out: queue.SimpleQueue[Any] = field(default_factory=queue.SimpleQueue)
    role: str | None = None  # None until the first arbitration update
    election_id: int | None = None  # None = unset (never primary)
    peer: str = ""


@dataclass
class _Role:
    streams: list[_Stream] = field(default_factory=list)
    highest: int | None = None  # highest election id ever seen (spec: election_id_past)
    primary: _Stream | None = None
    config: any_pb2.Any | None = None


@dataclass
class _Terminate:
    code: grpc.StatusCode
    message: str


class _Status(grpc.Status):
    def __init__(self, code: grpc.StatusCode, details: str, trailing_metadata: tuple[tuple[str, bytes], ...]) -> None:
        self.code = code
        self.details = details
        self.trailing_metadata = trailing_metadata


def _abort_with_details(context: grpc.ServicerContext, message: str, errors: list[p4r.Error]) -> NoReturn:
    """End an RPC the P4Runtime batch way: status UNKNOWN and one p4.v1.Error per item."""
    status = rpc_status.Status(code=rpc_code.UNKNOWN, message=message)
    for e in errors:
        status.details.add().Pack(e)
    context.abort_with_status(_Status(SC.UNKNOWN, message, (("grpc-status-details-bin", status.SerializeToString()),)))
    raise AssertionError("unreachable")  # abort_with_status raises


class P4RuntimeService(p4r_grpc.P4RuntimeServicer):
    """The P4Runtime service for one device.

    Deliberate limits and choices (as BMv2 where it matters):

    * RegisterEntry reads and writes are UNIMPLEMENTED; registers change only by packets.
    * Atomicity other than CONTINUE_ON_ERROR is UNIMPLEMENTED.
    * Roles are arbitrated independently, but ``role.config`` is stored, not enforced.
    * A failed Read returns no entities and ends with the code of the first entity
      that failed, without per-entity details (as BMv2: the spec has no batch
      errors for Read).
    * Error codes are BMv2's (tests/test_p4runtime_conformance.py holds both
      targets to one table); where BMv2's answer is a bug or unhelpful, the
      spec's code is kept and the place says so ("BMv2 differs").
    * Counters report only what their unit counts: a packets counter reads back
      ``packet_count`` alone (``byte_count`` 0), a bytes counter ``byte_count`` alone.
    * Meters (MeterEntry) read back exactly the rates written; BMv2 reads back
      ``int(rate / 1e6 * 1e6)`` in floating point, one less for some rates (249 -> 248).
      ``eburst`` and ``counter_data`` are ignored, as on BMv2.
    * Between VERIFY_AND_SAVE and COMMIT, Read/Write use a shadow state that
      COMMIT installs (the spec's "replay the writes since the save").

    Hooks for the runtime: :attr:`packet_out_handler`, :attr:`digest_ack_handler`,
    :meth:`send_packet_in`, :meth:`send_digest_list`, :attr:`on_commit`.
    """

    def __init__(self, state: SwitchState, device_id: int) -> None:
        if device_id <= 0:
            raise ValueError("device_id must be > 0 (P4Runtime reserves 0)")
        self.state = state
        self.program = state.program
        self.device_id = device_id
        self._arb_lock = threading.Lock()
        self._roles: dict[str, _Role] = {}
        self._cfg_lock = threading.RLock()
        self._committed: PipelineConfig | None = None
        self._saved: PipelineConfig | None = None
        self._shadow: SwitchState | None = None
        self.packet_out_handler: Callable[[p4r.PacketOut], None] | None = None
        self.digest_ack_handler: Callable[[p4r.DigestListAck], None] | None = None
        self.on_commit: Callable[[PipelineConfig, bool], None] | None = None
        self.packet_ins_dropped = 0
        self.digests = DigestEngine(self.program.digests, self.send_digest_list)
        self.digest_ack_handler = self._digest_ack

    # -- public view ----------------------------------------------------------------------------
    @property
    def committed(self) -> PipelineConfig | None:
        """The config packets are processed with (None: drop every packet)."""
        return self._committed

    def primary_election_id(self, role: str = "") -> int | None:
        with self._arb_lock:
            r = self._roles.get(role)
            return r.primary.election_id if r and r.primary else None

    # -- StreamChannel ----------------------------------------------------------------------------
    def StreamChannel(
        self, request_iterator: Iterator[p4r.StreamMessageRequest], context: grpc.ServicerContext
    ) -> Iterator[p4r.StreamMessageResponse]:
        stream = _Stream(peer=context.peer())
        context.add_callback(lambda: stream.out.put(_CLOSE))
        reader = threading.Thread(
            target=self._read_stream, args=(stream, request_iterator), name=f"p4rt-stream-{stream.peer}", daemon=True
        )
        reader.start()
        log.debug("stream opened by %s", stream.peer)
        try:
            while True:
                msg = stream.out.get()
                if msg is _CLOSE:
                    return
                if isinstance(msg, _Terminate):
                    log.info("closing stream of %s: %s %s", stream.peer, msg.code.name, msg.message)
                    context.abort(msg.code, msg.message)
                yield msg
        finally:
            self._drop_stream(stream)
            log.debug("stream of %s closed", stream.peer)

    def _read_stream(self, stream: _Stream, requests: Iterator[p4r.StreamMessageRequest]) -> None:
        try:
            for req in requests:
                kind = req.WhichOneof("update")
                if kind == "arbitration":
                    err = self._arbitrate(stream, req.arbitration)
                    if err is not None:
                        stream.out.put(err)
                        return
                elif kind == "packet":
                    self._on_packet_out(stream, req.packet)
                elif kind == "digest_ack":
                    self._on_digest_ack(stream, req.digest_ack)
                else:
                    stream.out.put(
                        p4r.StreamMessageResponse(
                            error=p4r.StreamError(
                                canonical_code=rpc_code.UNIMPLEMENTED,
                                message=f"stream message {kind!r} not supported",
                                other=p4r.StreamOtherError(),
                            )
                        )
                    )
        except grpc.RpcError:
            pass  # client went away
        except Exception:  # a bug here must not leave the stream hanging
            log.exception("stream reader of %s failed", stream.peer)
        finally:
            stream.out.put(_CLOSE)

    def _arbitrate(self, stream: _Stream, upd: p4r.MasterArbitrationUpdate) -> _Terminate | None:
        role_name = upd.role.name if upd.HasField("role") else ""
        eid = _u128(upd.election_id) if upd.HasField("election_id") else None
        with self._arb_lock:
            if stream.role is None:
                if upd.device_id != self.device_id:
                    return _Terminate(
                        SC.NOT_FOUND, f"device id {upd.device_id} not found (this is device {self.device_id})"
                    )
                role = self._roles.setdefault(role_name, _Role())
                if eid is not None and any(s.election_id == eid for s in role.streams):
                    return _Terminate(SC.INVALID_ARGUMENT, f"Election id {eid} is already used by another controller")
                stream.role = role_name
                role.streams.append(stream)
            else:
                if upd.device_id != self.device_id:
                    return _Terminate(SC.FAILED_PRECONDITION, "device id differs from the stream's")
                if role_name != stream.role:
                    return _Terminate(SC.FAILED_PRECONDITION, "role differs from the stream's; open a new stream")
                role = self._roles[role_name]
                if eid is not None and any(s.election_id == eid for s in role.streams if s is not stream):
                    return _Terminate(SC.INVALID_ARGUMENT, f"Election id {eid} is already used by another controller")
            stream.election_id = eid
            was_primary = role.primary is stream
            if eid is not None and (role.highest is None or eid >= role.highest):
                changed = role.primary is not stream
                role.highest = eid
                role.primary = stream
                role.config = upd.role.config if upd.role.HasField("config") else None
                if changed:
                    log.info("primary for role %r is now %s (election id %d)", role_name or "default", stream.peer, eid)
                self._notify(role_name, role, role.streams)
            elif was_primary:
                role.primary = None
                log.info("primary %s for role %r stepped down", stream.peer, role_name or "default")
                self._notify(role_name, role, role.streams)
            else:
                self._notify(role_name, role, [stream])
        return None

    def _notify(self, role_name: str, role: _Role, streams: Sequence[_Stream]) -> None:
        """Send each of ``streams`` the arbitration advisory (caller holds _arb_lock)."""
        for s in streams:
            upd = p4r.MasterArbitrationUpdate(device_id=self.device_id)
            if role_name or role.config is not None:
                upd.role.name = role_name
                if role.config is not None:
                    upd.role.config.CopyFrom(role.config)
            if role.highest is not None:
                upd.election_id.CopyFrom(_to_u128(role.highest))
            if role.primary is s:
                upd.status.code = rpc_code.OK
                upd.status.message = "primary"
            elif role.primary is not None:
                upd.status.code = rpc_code.ALREADY_EXISTS
                upd.status.message = "backup: another controller is primary"
            else:
                upd.status.code = rpc_code.NOT_FOUND
                upd.status.message = "no primary"
            s.out.put(p4r.StreamMessageResponse(arbitration=upd))

    def _drop_stream(self, stream: _Stream) -> None:
        with self._arb_lock:
            if stream.role is None:
                return
            role = self._roles[stream.role]
            if stream in role.streams:
                role.streams.remove(stream)
            if role.primary is stream:
                role.primary = None
                log.info("primary %s for role %r disconnected", stream.peer, stream.role or "default")
                self._notify(stream.role, role, role.streams)
            stream.role = None

    def _is_primary_stream(self, stream: _Stream) -> bool:
        with self._arb_lock:
            return stream.role is not None and self._roles[stream.role].primary is stream

    def _on_packet_out(self, stream: _Stream, packet: p4r.PacketOut) -> None:
        if not self._is_primary_stream(stream):
            code, msg = rpc_code.PERMISSION_DENIED, "only the primary controller may send packets"
        elif self.packet_out_handler is None:
            code, msg = rpc_code.UNIMPLEMENTED, "this pipeline has no packet-out support"
        else:
            try:
                self.packet_out_handler(packet)
                return
            except P4RuntimeError as e:
                code, msg = _code_int(e.code), e.message
            except Exception as e:
                log.exception("packet-out handler failed")
                code, msg = rpc_code.INTERNAL, f"packet-out failed: {e}"
        stream.out.put(
            p4r.StreamMessageResponse(
                error=p4r.StreamError(
                    canonical_code=code, message=msg, packet_out=p4r.PacketOutError(packet_out=packet)
                )
            )
        )

    def _on_digest_ack(self, stream: _Stream, ack: p4r.DigestListAck) -> None:
        if self.digest_ack_handler is not None and self._is_primary_stream(stream):
            self.digest_ack_handler(ack)

    def _send_to_primary(self, msg: p4r.StreamMessageResponse, role: str) -> bool:
        with self._arb_lock:
            r = self._roles.get(role)
            primary = r.primary if r else None
        if primary is None:
            return False
        if primary.out.qsize() >= PACKET_IN_BACKLOG:
            self.packet_ins_dropped += 1
            return False
        primary.out.put(msg)
        return True

    def send_packet_in(self, payload: bytes, metadata: Sequence[tuple[int, bytes]] = (), role: str = "") -> bool:
        """Hand a packet to the primary controller; False if none (or it lags too far)."""
        pkt = p4r.PacketIn(payload=payload)
        for mid, value in metadata:
            pkt.metadata.add(metadata_id=mid, value=value)
        return self._send_to_primary(p4r.StreamMessageResponse(packet=pkt), role)

    def _digest_ack(self, ack: p4r.DigestListAck) -> None:
        cfg = self._committed
        d = cfg.ids.digests.get(ack.digest_id) if cfg is not None else None
        if d is not None:  # an ack for an unknown digest or list is ignored, as BMv2
            self.digests.ack(d.name, ack.list_id)

    def send_digest_list(self, digest: p4r.DigestList, role: str = "") -> bool:
        """Hand a digest list to the primary controller; False if none."""
        return self._send_to_primary(p4r.StreamMessageResponse(digest=digest), role)

    # -- checks shared by the unary RPCs ------------------------------------------------------------
    def _check_device(self, device_id: int) -> None:
        if device_id != self.device_id:
            _err(SC.NOT_FOUND, f"device id {device_id} not found (this is device {self.device_id})")

    def _check_primary(self, role_name: str, election_id: p4r.Uint128 | None) -> None:
        with self._arb_lock:
            role = self._roles.get(role_name)
            if role is None and role_name:
                _err(SC.NOT_FOUND, f"role {role_name!r} not found")
            primary = role.primary if role else None
            eid = _u128(election_id) if election_id is not None else None
            if primary is None or eid is None or primary.election_id != eid:
                _err(
                    SC.PERMISSION_DENIED,
                    "not the primary controller "
                    f"(election id {eid}, primary {primary.election_id if primary else None})",
                )

    def _rw_target(self) -> tuple[PipelineConfig, SwitchState]:
        """The config and state Read/Write act on (the saved one after VERIFY_AND_SAVE)."""
        if self._saved is not None and self._shadow is not None:
            return self._saved, self._shadow
        if self._committed is None:
            _err(SC.FAILED_PRECONDITION, "No forwarding pipeline config set for this device")
        return self._committed, self.state

    # -- Capabilities ------------------------------------------------------------------------------------
    def Capabilities(self, request: p4r.CapabilitiesRequest, context: grpc.ServicerContext) -> p4r.CapabilitiesResponse:
        if request.device_id and request.device_id != self.device_id:
            context.abort(SC.NOT_FOUND, f"device id {request.device_id} not found")
        return p4r.CapabilitiesResponse(p4runtime_api_version=P4RUNTIME_API_VERSION)

    # -- pipeline config ---------------------------------------------------------------------------------
    def SetForwardingPipelineConfig(
        self, request: p4r.SetForwardingPipelineConfigRequest, context: grpc.ServicerContext
    ) -> p4r.SetForwardingPipelineConfigResponse:
        try:
            self._check_device(request.device_id)
            self._check_primary(request.role, request.election_id if request.HasField("election_id") else None)
            with self._cfg_lock:
                self._set_config(request)
        except P4RuntimeError as e:
            log.warning("SetForwardingPipelineConfig refused: %s %s", e.code.name, e.message)
            context.abort(e.code, e.message)
        return p4r.SetForwardingPipelineConfigResponse()

    def _verify(self, request: p4r.SetForwardingPipelineConfigRequest) -> PipelineConfig:
        if not request.HasField("config") or not request.config.HasField("p4info"):
            _err(SC.INVALID_ARGUMENT, "config with a P4Info is required")
        cfg = request.config
        diff = p4info_mismatch(self.program, cfg.p4info)
        if diff is not None:
            _err(SC.INVALID_ARGUMENT, f"P4Info does not match softswitch program {self.program.name!r}: {diff}")
        diff = device_config_mismatch(self.program, cfg.p4_device_config)
        if diff is not None:
            _err(SC.INVALID_ARGUMENT, diff)
        cookie = cfg.cookie.cookie if cfg.HasField("cookie") else None
        return PipelineConfig(cfg.p4info, cfg.p4_device_config, cookie, IdMap.build(self.program, cfg.p4info))

    def _set_config(self, request: p4r.SetForwardingPipelineConfigRequest) -> None:
        action = request.action
        if action == _CFG.VERIFY:
            self._verify(request)
        elif action == _CFG.VERIFY_AND_SAVE:
            self._saved = self._verify(request)
            self._shadow = SwitchState(self.program)
            log.info("pipeline config saved (not committed), cookie=%s", self._saved.cookie)
        elif action == _CFG.VERIFY_AND_COMMIT:
            self._commit(self._verify(request), None, reconcile=False)
        elif action == _CFG.COMMIT:
            if request.HasField("config"):
                _err(SC.INVALID_ARGUMENT, "COMMIT takes no config")
            if self._saved is None:
                _err(SC.NOT_FOUND, "no saved config to commit (VERIFY_AND_SAVE first)")
            self._commit(self._saved, self._shadow, reconcile=False)
        elif action == _CFG.RECONCILE_AND_COMMIT:
            # Same program by construction, so every entry and register survives; only ids change.
            self._commit(self._verify(request), None, reconcile=self._committed is not None)
        else:
            _err(SC.INVALID_ARGUMENT, f"unsupported SetForwardingPipelineConfig action {action}")

    def _commit(self, cfg: PipelineConfig, shadow: SwitchState | None, *, reconcile: bool) -> None:
        with self.state.lock:
            if not reconcile:
                self.state.reset()
            if shadow is not None:
                _copy_control_state(shadow, self.state)
            self._committed = cfg
            self._saved = None
            self._shadow = None
            if reconcile:
                self.digests.set_ids(cfg.ids.digest_ids)
            else:  # as BMv2: a new config forgets DigestEntries, list ids start again at 1
                self.digests.reset(cfg.ids.digest_ids)
        log.info(
            "pipeline config committed: program %r, cookie=%s, device config %d bytes%s",
            self.program.name,
            cfg.cookie,
            len(cfg.device_config),
            " (state kept)" if reconcile else "",
        )
        if self.on_commit is not None:
            self.on_commit(cfg, reconcile)

    def GetForwardingPipelineConfig(
        self, request: p4r.GetForwardingPipelineConfigRequest, context: grpc.ServicerContext
    ) -> p4r.GetForwardingPipelineConfigResponse:
        try:
            self._check_device(request.device_id)
            with self._cfg_lock:
                cfg = self._committed or self._saved
            if cfg is None:
                _err(SC.FAILED_PRECONDITION, "No forwarding pipeline config set for this device")
        except P4RuntimeError as e:
            context.abort(e.code, e.message)
        out = p4r.ForwardingPipelineConfig()
        rt = request.response_type
        if cfg.cookie is not None:
            out.cookie.cookie = cfg.cookie
        if rt in (_GET.ALL, _GET.P4INFO_AND_COOKIE):
            out.p4info.CopyFrom(cfg.p4info)
        if rt in (_GET.ALL, _GET.DEVICE_CONFIG_AND_COOKIE):
            out.p4_device_config = cfg.device_config
        return p4r.GetForwardingPipelineConfigResponse(config=out)

    def _batch(
        self, context: grpc.ServicerContext, items: Iterable[Any], apply: Callable[[IdMap, SwitchState, Any], object]
    ) -> tuple[list[p4r.Error], set[grpc.StatusCode]]:
        """Apply ``apply`` to every item of a Write or Read, each under the state lock.

        Returns one p4.v1.Error per item (OK or why not) and the set of failure codes; an item's failure
        never stops the others (CONTINUE_ON_ERROR), and a server bug becomes INTERNAL, not a crash.  The
        lock is taken per item, not for the batch: packets go on between items (a controller moving a
        spine's 500 partition buckets in one Write stopped a client leaf for the whole batch), and
        CONTINUE_ON_ERROR promises no atomicity; the configuration lock still keeps batches apart.
        """
        errors: list[p4r.Error] = []
        codes: set[grpc.StatusCode] = set()
        with self._cfg_lock:
            try:
                cfg, state = self._rw_target()
            except P4RuntimeError as e:
                context.abort(e.code, e.message)
            for item in items:
                try:
                    with state.lock:
                        apply(cfg.ids, state, item)
                    errors.append(p4r.Error(canonical_code=rpc_code.OK))
                except P4RuntimeError as e:
                    codes.add(e.code)
                    errors.append(p4r.Error(canonical_code=_code_int(e.code), message=e.message))
                except Exception as e:  # a server bug must not leave state half-written silently
                    log.exception("P4Runtime batch item failed")
                    codes.add(SC.INTERNAL)
                    errors.append(p4r.Error(canonical_code=rpc_code.INTERNAL, message=str(e)))
        return errors, codes

    # -- Write -------------------------------------------------------------------------------------------
    def Write(self, request: p4r.WriteRequest, context: grpc.ServicerContext) -> p4r.WriteResponse:
        try:
            self._check_device(request.device_id)
            self._check_primary(request.role, request.election_id if request.HasField("election_id") else None)
            if request.atomicity != p4r.WriteRequest.CONTINUE_ON_ERROR:
                _err(SC.UNIMPLEMENTED, "only CONTINUE_ON_ERROR atomicity is supported")
        except P4RuntimeError as e:
            context.abort(e.code, e.message)
        errors, codes = self._batch(context, request.updates, self._apply_update)
        failed = sum(e.canonical_code != rpc_code.OK for e in errors)
        if codes:
            log.debug("Write: %d of %d updates failed", failed, len(request.updates))
            _abort_with_details(context, f"Write failure: {failed} of {len(request.updates)} updates failed", errors)
        return p4r.WriteResponse()

    def _apply_update(self, ids: IdMap, state: SwitchState, upd: p4r.Update) -> None:
        if upd.type not in (_UPD.INSERT, _UPD.MODIFY, _UPD.DELETE):
            _err(SC.INVALID_ARGUMENT, "update type must be INSERT, MODIFY or DELETE")
        kind = upd.entity.WhichOneof("entity")
        if kind == "table_entry":
            self._write_table_entry(ids, state, upd.type, upd.entity.table_entry)
        elif kind == "counter_entry":
            self._write_counter_entry(ids, state, upd.type, upd.entity.counter_entry)
        elif kind == "meter_entry":
            self._write_meter_entry(ids, state, upd.type, upd.entity.meter_entry)
        elif kind == "digest_entry":
            self._write_digest_entry(ids, upd.type, upd.entity.digest_entry)
        elif kind == "register_entry":
            _err(
                SC.UNIMPLEMENTED,
                "RegisterEntry writes are not supported: registers change only by packets (as on BMv2)",
            )
        elif kind is None:  # BMv2 differs: UNKNOWN ("Incorrect entity type"); malformed is INVALID_ARGUMENT
            _err(SC.INVALID_ARGUMENT, "update has no entity")
        else:
            _err(SC.UNIMPLEMENTED, f"{kind} is not supported by softswitch")

    def _table_ids(self, ids: IdMap, table_id: int) -> TableIds:
        if table_id == 0:
            _err(SC.INVALID_ARGUMENT, "table_id 0 is not a table")
        t = ids.tables.get(table_id)
        if t is None:  # INVALID_ARGUMENT, as BMv2: an unknown id makes the entity malformed
            _err(SC.INVALID_ARGUMENT, f"unknown table id {table_id:#x}")
        return t

    def _write_table_entry(self, ids: IdMap, state: SwitchState, utype: int, te: p4r.TableEntry) -> None:
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
                out[i] = (decode_bytes(fm.exact.value, w, what), full)
            elif kind == "optional":
                out[i] = (decode_bytes(fm.optional.value, w, what), full)
            elif kind == "lpm":
                v, plen = decode_bytes(fm.lpm.value, w, what), fm.lpm.prefix_len
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
                v, mask = decode_bytes(fm.ternary.value, w, what), decode_bytes(fm.ternary.mask, w, what)
                if mask == 0:
                    _err(SC.INVALID_ARGUMENT, f"{what}: zero mask (omit the field for don't care)")
                if v & ~mask:
                    _err(SC.INVALID_ARGUMENT, f"{what}: value {v:#x} has bits outside mask {mask:#x}")
                out[i] = (v, mask)
            else:  # range
                lo, hi = decode_bytes(fm.range.low, w, what), decode_bytes(fm.range.high, w, what)
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
            params[prm.name] = decode_bytes(p.value, prm.bitwidth, f"action {ai.action.name} parameter {prm.name}")
        for prm in ai.action.params:
            if prm.name not in params:
                _err(SC.INVALID_ARGUMENT, f"action {ai.action.name}: parameter {prm.name} is missing")
        return ai.action.name, params

    def _counter(self, ids: IdMap, counter_id: int) -> Counter:
        c = ids.counters.get(counter_id)
        if c is None:  # INVALID_ARGUMENT, as BMv2 (see _table_ids)
            _err(SC.INVALID_ARGUMENT, f"unknown counter id {counter_id:#x}")
        return c

    def _write_counter_entry(self, ids: IdMap, state: SwitchState, utype: int, ce: p4r.CounterEntry) -> None:
        if utype != _UPD.MODIFY:
            _err(SC.INVALID_ARGUMENT, "counter entries can only be modified")
        if ce.counter_id == 0:
            _err(SC.INVALID_ARGUMENT, "counter_id 0 is not a counter")
        c = self._counter(ids, ce.counter_id)
        if not ce.HasField("data"):
            return
        arr = state.counters[c.name]
        if ce.HasField("index"):
            idx = ce.index.index
            if idx < 0:
                _err(SC.INVALID_ARGUMENT, f"negative counter index {idx}")
            if idx >= c.size:  # BMv2 differs: UNKNOWN ("Error when writing to counter"); the spec says this
                _err(SC.OUT_OF_RANGE, f"counter {c.name} index {idx} >= size {c.size}")
            arr.write(idx, ce.data.packet_count, ce.data.byte_count)
        else:
            for idx in range(c.size):
                arr.write(idx, ce.data.packet_count, ce.data.byte_count)

    def _meter(self, ids: IdMap, meter_id: int) -> Meter:
        m = ids.meters.get(meter_id)
        if m is None:  # INVALID_ARGUMENT, as BMv2 ("Invalid P4 id"), also for id 0
            _err(SC.INVALID_ARGUMENT, f"unknown meter id {meter_id:#x}")
        return m

    def _meter_index(self, m: Meter, index: int) -> int:
        if index < 0:  # as BMv2
            _err(SC.INVALID_ARGUMENT, f"negative meter index {index}")
        if index >= m.size:  # BMv2 differs: UNKNOWN ("Error when writing meter spec"); the spec says this
            _err(SC.OUT_OF_RANGE, f"meter {m.name} index {index} >= size {m.size}")
        return index

    def _write_meter_entry(self, ids: IdMap, state: SwitchState, utype: int, me: p4r.MeterEntry) -> None:
        m = self._meter(ids, me.meter_id)
        if utype != _UPD.MODIFY:  # as BMv2 (but BMv2 first answers UNIMPLEMENTED for a missing index)
            _err(SC.INVALID_ARGUMENT, "meter entries can only be modified")
        if me.HasField("index"):
            indexes: Sequence[int] = (self._meter_index(m, me.index.index),)
        else:  # BMv2 differs: UNIMPLEMENTED ("Wildcard write ..."); the spec defines it: every cell
            indexes = range(m.size)
        config = self._meter_config(m, me.config) if me.HasField("config") else None
        arr = state.meters[m.name]
        for i in indexes:
            arr.configure(i, config)

    @staticmethod
    def _meter_config(m: Meter, c: p4r.MeterConfig) -> MeterConfig | None:
        """A MeterEntry's config, validated; None (unconfigured, every packet GREEN) for the reset forms.

        No config resets the cell (the spec; BMv2 too).  All four values -1 resets it as well, as
        BMv2 accepts for backward compatibility; another negative value is INVALID_ARGUMENT (BMv2
        differs for a lone -1: it takes it as the largest unsigned value).  ``eburst`` (single-rate
        meters only) is ignored, as BMv2 does.
        """
        values = (c.cir, c.cburst, c.pir, c.pburst)
        if values == (-1, -1, -1, -1):
            return None
        for name, v in zip(("cir", "cburst", "pir", "pburst"), values, strict=True):
            if v < 0:
                _err(SC.INVALID_ARGUMENT, f"meter {m.name}: negative {name} {v}")
        if c.cburst > MAX_METER_BURST or c.pburst > MAX_METER_BURST:  # as BMv2
            _err(SC.UNIMPLEMENTED, f"meter {m.name}: burst larger than {MAX_METER_BURST}")
        if c.cir > c.pir:  # BMv2 differs: UNKNOWN ("Error when writing meter spec") and a half-written meter
            _err(SC.INVALID_ARGUMENT, f"meter {m.name}: cir {c.cir} > pir {c.pir}")
        return MeterConfig(c.cir, c.cburst, c.pir, c.pburst)

    def _read_meter(self, ids: IdMap, state: SwitchState, q: p4r.MeterEntry) -> list[p4r.Entity]:
        # meter_id 0: every meter, and an index applies to each of them (as BMv2)
        meters = list(ids.meters.items()) if q.meter_id == 0 else [(q.meter_id, self._meter(ids, q.meter_id))]
        out = []
        for mid, m in meters:
            arr = state.meters[m.name]
            if q.HasField("index"):
                indexes: Sequence[int] = (self._meter_index(m, q.index.index),)
            else:
                indexes = range(m.size)
            for i in indexes:
                # BMv2 differs: with an index it echoes the query (its meter_id 0, its config when the
                # cell is unconfigured); we answer the cell's own id, and its config only when configured
                me = p4r.MeterEntry(meter_id=mid)
                me.index.index = i
                cfg = arr.config(i)
                if cfg is not None:
                    me.config.cir, me.config.cburst = cfg.cir, cfg.cburst
                    me.config.pir, me.config.pburst = cfg.pir, cfg.pburst
                out.append(p4r.Entity(meter_entry=me))
        return out

    def _digest(self, ids: IdMap, digest_id: int) -> Digest:
        d = ids.digests.get(digest_id)
        if d is None:  # NOT_FOUND, as BMv2 ("... is not a valid digest id"), also for id 0
            _err(SC.NOT_FOUND, f"{digest_id} is not a valid digest id")
        return d

    def _write_digest_entry(self, ids: IdMap, utype: int, de: p4r.DigestEntry) -> None:
        d = self._digest(ids, de.digest_id)
        if self._saved is not None:
            _err(SC.UNAVAILABLE, "DigestEntry writes wait for the saved pipeline config to be committed")
        cfg = DigestConfig(de.config.max_timeout_ns, de.config.max_list_size, de.config.ack_timeout_ns)
        if min(cfg.max_timeout_ns, cfg.max_list_size, cfg.ack_timeout_ns) < 0:
            _err(SC.INVALID_ARGUMENT, f"digest {d.name!r}: negative value in config")
        try:
            self.digests.write(d.name, _UPD.Type.Name(utype), cfg)
        except DigestConfigError as e:
            _err(SC[e.code], e.message)

    def _read_digest(self, ids: IdMap, q: p4r.DigestEntry) -> list[p4r.Entity]:
        # digest_id 0 reads every configured digest (the spec); BMv2 differs: UNIMPLEMENTED
        wanted = [(q.digest_id, self._digest(ids, q.digest_id))] if q.digest_id else list(ids.digests.items())
        out = []
        for did, d in wanted:
            cfg = self.digests.config(d.name)
            if cfg is None:
                if q.digest_id:  # as BMv2
                    _err(SC.NOT_FOUND, f"digest {d.name!r} ({did}) not configured")
                continue
            de = p4r.DigestEntry(digest_id=did)
            de.config.max_timeout_ns = cfg.max_timeout_ns
            de.config.max_list_size = cfg.max_list_size
            de.config.ack_timeout_ns = cfg.ack_timeout_ns
            out.append(p4r.Entity(digest_entry=de))
        return out

    # -- Read --------------------------------------------------------------------------------------------
    def Read(self, request: p4r.ReadRequest, context: grpc.ServicerContext) -> Iterator[p4r.ReadResponse]:
        try:
            self._check_device(request.device_id)
        except P4RuntimeError as e:
            context.abort(e.code, e.message)
        results: list[p4r.Entity] = []
        errors, codes = self._batch(
            context, request.entities, lambda ids, state, ent: results.extend(self._read_one(ids, state, ent))
        )
        if codes:  # as BMv2: the first failure's code and message, nothing read, no per-entity details
            first = next(e for e in errors if e.canonical_code != rpc_code.OK)
            code = next(c for c in SC if _code_int(c) == first.canonical_code)
            context.abort(code, first.message)
        for i in range(0, len(results), READ_CHUNK):
            yield p4r.ReadResponse(entities=results[i : i + READ_CHUNK])

    def _read_one(self, ids: IdMap, state: SwitchState, ent: p4r.Entity) -> list[p4r.Entity]:
        kind = ent.WhichOneof("entity")
        if kind == "table_entry":
            return self._read_table(ids, state, ent.table_entry)
        if kind == "counter_entry":
            return self._read_counter(ids, state, ent.counter_entry)
        if kind == "meter_entry":
            return self._read_meter(ids, state, ent.meter_entry)
        if kind == "digest_entry":
            return self._read_digest(ids, ent.digest_entry)
        if kind == "register_entry":
            _err(SC.UNIMPLEMENTED, "RegisterEntry reads are not supported (as on BMv2)")
        if kind is None:  # BMv2 differs: UNKNOWN; malformed is INVALID_ARGUMENT
            _err(SC.INVALID_ARGUMENT, "read request entity is empty")
        _err(SC.UNIMPLEMENTED, f"{kind} is not supported by softswitch")

    def _read_table(self, ids: IdMap, state: SwitchState, q: p4r.TableEntry) -> list[p4r.Entity]:
        if q.table_id == 0:
            return [
                self._encode_entry(ids, t, e) for t in ids.tables.values() for e in state.tables[t.table.name].entries()
            ]
        t = self._table_ids(ids, q.table_id)
        ts = state.tables[t.table.name]
        if q.is_default_action:
            te = p4r.TableEntry(table_id=t.id, is_default_action=True)
            self._encode_action(ids, te, ts.default_action, ts.default_params)
            return [p4r.Entity(table_entry=te)]
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

    def _encode_entry(self, ids: IdMap, t: TableIds, e: TableEntry) -> p4r.Entity:
        te = p4r.TableEntry(
            table_id=t.id, priority=e.priority, controller_metadata=e.controller_metadata, metadata=e.metadata
        )
        for i, (mf, (a, b)) in enumerate(zip(t.table.keys, e.match, strict=True)):
            kind = mf.match_type
            full = (1 << mf.bitwidth) - 1
            if kind == "exact":
                te.match.add(field_id=t.field_ids[i]).exact.value = encode_bytes(a)
            elif kind == "range":
                if (a, b) != (0, full):
                    r = te.match.add(field_id=t.field_ids[i]).range
                    r.low, r.high = encode_bytes(a), encode_bytes(b)
            elif b == 0:
                continue  # don't care: omitted
            elif kind == "lpm":
                lpm = te.match.add(field_id=t.field_ids[i]).lpm
                lpm.value, lpm.prefix_len = encode_bytes(a), b.bit_count()
            elif kind == "ternary":
                tern = te.match.add(field_id=t.field_ids[i]).ternary
                tern.value, tern.mask = encode_bytes(a), encode_bytes(b)
            else:
                te.match.add(field_id=t.field_ids[i]).optional.value = encode_bytes(a)
        self._encode_action(ids, te, e.action, e.params)
        return p4r.Entity(table_entry=te)

    def _encode_action(self, ids: IdMap, te: p4r.TableEntry, name: str, params: dict[str, int]) -> None:
        aid = ids.action_ids[name]
        act = te.action.action
        act.action_id = aid
        ai = ids.actions[aid]
        for prm in ai.action.params:
            act.params.add(param_id=ai.param_ids[prm.name], value=encode_bytes(params.get(prm.name, 0)))

    def _read_counter(self, ids: IdMap, state: SwitchState, q: p4r.CounterEntry) -> list[p4r.Entity]:
        if q.counter_id == 0:
            if q.HasField("index"):
                _err(SC.INVALID_ARGUMENT, "an index needs a counter_id")
            counters = list(ids.counters.items())
        else:
            counters = [(q.counter_id, self._counter(ids, q.counter_id))]
        out = []
        for cid, c in counters:
            arr = state.counters[c.name]
            if q.HasField("index"):
                idx = q.index.index
                if idx < 0:
                    _err(SC.INVALID_ARGUMENT, f"negative counter index {idx}")
                if idx >= c.size:  # BMv2 differs: UNKNOWN ("Error when reading counter"); the spec says this
                    _err(SC.OUT_OF_RANGE, f"counter {c.name} index {idx} >= size {c.size}")
                indexes: Sequence[int] = (idx,)
            else:
                indexes = range(c.size)
            for idx in indexes:
                packets, nbytes = arr.read(idx)
                ce = p4r.CounterEntry(counter_id=cid)
                ce.index.index = idx
                ce.data.SetInParent()  # present even when zero, as BMv2
                if c.unit != "bytes":  # a packets counter has no byte count (BMv2 leaves it 0), and vice versa
                    ce.data.packet_count = packets
                if c.unit != "packets":
                    ce.data.byte_count = nbytes
                out.append(p4r.Entity(counter_entry=ce))
        return out


def _copy_control_state(src: SwitchState, dst: SwitchState) -> None:
    """Install what P4Runtime wrote into ``src`` (entries, defaults, counter values, meter configs) into ``dst``."""
    for name, st in src.tables.items():
        dt = dst.tables[name]
        for e in st.entries():
            dt.insert_canonical(
                e.match, e.action, e.params, e.priority, controller_metadata=e.controller_metadata, metadata=e.metadata
            )
        if st.default_modified:
            dt.set_default(st.default_action, st.default_params)
    for name, sc in src.counters.items():
        dc = dst.counters[name]
        for i in range(sc.size):
            p, b = sc.read(i)
            if p or b:
                dc.write(i, p, b)
    for name, sm in src.meters.items():
        dm = dst.meters[name]
        for i in range(sm.size):
            cfg = sm.config(i)
            if cfg is not None:
                dm.configure(i, cfg)


class P4RuntimeServer:
    """A gRPC server running :class:`P4RuntimeService` on one address."""

    def __init__(
        self, state: SwitchState, device_id: int, address: str = DEFAULT_GRPC_ADDR, max_workers: int = 32
    ) -> None:
        self.service = P4RuntimeService(state, device_id)
        self.requested_address = address
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="p4rt"),
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ],
        )
        p4r_grpc.add_P4RuntimeServicer_to_server(self.service, self._server)
        self.port = 0

    @property
    def address(self) -> str:
        """host:port actually bound (the port resolved if 0 was asked)."""
        host = self.requested_address.rsplit(":", 1)[0]
        return f"{host}:{self.port}"

    def start(self) -> None:
        """Bind and serve; raises RuntimeError if the address cannot be bound."""
        try:
            self.port = self._server.add_insecure_port(self.requested_address)
        except RuntimeError as e:
            raise RuntimeError(f"cannot bind gRPC address {self.requested_address}: {e}") from e
        if self.port == 0:
            raise RuntimeError(f"cannot bind gRPC address {self.requested_address}")
        self._server.start()
        self.service.digests.start()
        log.info("P4Runtime server for device %d on %s", self.service.device_id, self.address)

    def stop(self, grace: float | None = 1.0) -> None:
        """Stop serving; open streams are cancelled (clients see their stream end)."""
        self._server.stop(grace).wait()
        self.service.digests.stop()


__all__ = [
    "DEFAULT_GRPC_ADDR",
    "P4RUNTIME_API_VERSION",
    "IdMap",
    "P4RuntimeError",
    "P4RuntimeServer",
    "P4RuntimeService",
    "PipelineConfig",
    "decode_bytes",
    "encode_bytes",
    "p4info_mismatch",
]
