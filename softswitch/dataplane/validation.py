"""DcValidation (p4src/include/control/validation.p4): malformed input, trust (probes too), expired TTLs,
valley-free routing."""

from __future__ import annotations

from distcache import p4names
from distcache.cluster import MAX_SPINES, PortKind, Role
from distcache.p4names import DropReason
from distcache.wire import MAX_CACHEABLE, MAX_VALUE, Op
from softswitch.dataplane.header import DC_ALEN, DC_NCHUNKS, DC_OP, DC_VLEN, IP_DST, IP_SRC, IP_TTL, Headers, Meta
from softswitch.dataplane.parser import DC_BAD_CHUNKS, DC_BAD_VERSION, NO_ERROR, PACKET_TOO_SHORT
from softswitch.program import Action, MatchField, Table
from softswitch.state import SwitchState

ACTIONS = (Action(p4names.SOURCE_OK, ()), Action(p4names.DEST_OK, ()))

TABLES = (
    Table(
        p4names.CLIENT_SOURCE,
        (MatchField(p4names.KEY_INGRESS_PORT, 9, "exact"), MatchField(p4names.KEY_IPV4_SRC, 32, "lpm")),
        (p4names.SOURCE_OK, p4names.NO_ACTION),
        p4names.NO_ACTION,
        size=p4names.CLIENT_SOURCES,
    ),
    # a leaf's hosts: what may come down to it from a spine
    Table(
        p4names.RACK_HOSTS,
        (MatchField(p4names.KEY_IPV4_DST, 32, "exact"),),
        (p4names.DEST_OK, p4names.NO_ACTION),
        p4names.NO_ACTION,
        size=p4names.MAX_PORTS,
    ),
)

KNOWN_OPS = frozenset(int(o) for o in Op)
COHERENCE_OPS = frozenset({int(Op.INVALIDATE), int(Op.UPDATE)})
# what only switches and servers send: nothing entering from a client port may carry these
FROM_FABRIC_ONLY = frozenset(
    {
        int(Op.INVALIDATE_ACK),
        int(Op.UPDATE_ACK),
        int(Op.GET_REPLY),
        int(Op.PUT_REPLY),
        int(Op.DELETE_REPLY),
        int(Op.EXEC_REPLY),
    }
)
PORT_FABRIC, PORT_CLIENT, PORT_STORAGE = int(PortKind.FABRIC), int(PortKind.CLIENT), int(PortKind.STORAGE)
LEAVES = frozenset({int(Role.STORAGE_LEAF), int(Role.CLIENT_LEAF)})
ROLE_SPINE = int(Role.SPINE)
OP_PROBE, OP_PROBE_REPLY, OP_GET = int(Op.PROBE), int(Op.PROBE_REPLY), int(Op.GET)
# dc_drops indexes as plain ints: an IntEnum member costs an attribute look-up and slower indexing per packet
DROP_TRUNCATED, DROP_BAD_VERSION, DROP_BAD_CHUNKS, DROP_PARSER_OTHER = (
    int(DropReason.TRUNCATED),
    int(DropReason.BAD_VERSION),
    int(DropReason.BAD_CHUNKS),
    int(DropReason.PARSER_OTHER),
)
DROP_NOT_IPV4, DROP_PROBE, DROP_SPOOFED = (
    int(DropReason.NOT_IPV4),
    int(DropReason.PROBE),
    int(DropReason.SPOOFED),
)
DROP_UNKNOWN_OP, DROP_UNTRUSTED, DROP_TTL_EXPIRED, DROP_LOOP = (
    int(DropReason.UNKNOWN_OP),
    int(DropReason.UNTRUSTED),
    int(DropReason.TTL_EXPIRED),
    int(DropReason.LOOP),
)


def apply(state: SwitchState, h: Headers, m: Meta) -> None:
    from_cpu = h.packet_out is not None  # the controller's packet-out
    leaf = m.role in LEAVES
    m.dropped = True
    perr, dc = m.parser_error, h.dc
    if perr != NO_ERROR:  # (tested first: most packets parse)
        if perr == PACKET_TOO_SHORT:
            reason = DROP_TRUNCATED
        elif perr == DC_BAD_VERSION:
            reason = DROP_BAD_VERSION
        elif perr == DC_BAD_CHUNKS:
            reason = DROP_BAD_CHUNKS
        else:
            reason = DROP_PARSER_OTHER
    elif h.ipv4 is None:
        reason = DROP_NOT_IPV4
    elif from_cpu and not (leaf and dc is not None and dc[DC_OP] == OP_PROBE):
        reason = DROP_PROBE  # what a controller sends into the data plane is a probe, through a leaf
    elif (
        m.port_kind == PORT_CLIENT
        and not state.tables[p4names.CLIENT_SOURCE].lookup(m.ingress_port, int.from_bytes(h.ipv4[IP_SRC], "big"))[2]
    ):
        reason = DROP_SPOOFED
    elif dc is None:
        m.dropped = False  # plain IPv4: routed by DcForwarding
    else:
        op = m.op = dc[DC_OP]
        vlen = dc[DC_VLEN]
        want_chunks = (vlen + 15) >> 4 if vlen <= MAX_CACHEABLE else 0
        if op not in KNOWN_OPS:
            reason = DROP_UNKNOWN_OP
        elif vlen > MAX_VALUE or dc[DC_NCHUNKS] != want_chunks or (op == OP_GET and (vlen or dc[DC_ALEN])):
            # the lengths do not add up; a GET carries only its key (a hit's reply length counts on it)
            reason = DROP_BAD_CHUNKS
        elif op in (OP_PROBE, OP_PROBE_REPLY) and not (  # where a probe (reply) may come from
            (leaf and from_cpu and op == OP_PROBE and 0 < h.packet_out <= MAX_SPINES)
            or (leaf and not from_cpu and op == OP_PROBE_REPLY and m.from_spine != 0)
            or (m.role == ROLE_SPINE and not from_cpu and op == OP_PROBE)
        ):
            reason = DROP_PROBE
        elif (op in COHERENCE_OPS and m.port_kind != PORT_STORAGE) or (
            op in FROM_FABRIC_ONLY and m.port_kind == PORT_CLIENT
        ):
            reason = DROP_UNTRUSTED
        else:
            m.dropped = False
    if not m.dropped:  # a sound packet (what is wrong with it is counted first): where it is going
        if h.ipv4[IP_TTL] <= 1:  # forwarding would take it to 0: dropped before anything counts it
            reason = DROP_TTL_EXPIRED
        elif (
            leaf
            and m.port_kind == PORT_FABRIC
            and not from_cpu
            and m.op != OP_PROBE_REPLY
            and not state.tables[p4names.RACK_HOSTS].lookup(int.from_bytes(h.ipv4[IP_DST], "big"))[2]
        ):
            reason = DROP_LOOP  # down from a spine for no host of the rack: never back up (valley-free)
        else:
            return
        m.dropped = True
    state.counters[p4names.DC_DROPS].count(reason, m.packet_length)
