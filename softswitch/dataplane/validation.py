"""DcValidation (p4src/include/control/validation.p4): malformed input, trust (probes too), expired TTLs,
valley-free routing."""

from __future__ import annotations

from distcache import p4names as n
from distcache.cluster import MAX_SPINES, PortKind, Role
from distcache.p4names import DropReason
from distcache.wire import MAX_CACHEABLE, MAX_VALUE_LEN, Op
from softswitch.dataplane.header import IP_DST, IP_SRC, IP_TTL, Headers, Meta
from softswitch.dataplane.parser import DC_BAD_CHUNKS, DC_BAD_VERSION, NO_ERROR, PACKET_TOO_SHORT
from softswitch.program import Action, MatchField, Table
from softswitch.state import SwitchState

ACTIONS = (Action(n.SOURCE_OK, ()), Action(n.DEST_OK, ()))

TABLES = (
    Table(
        n.CLIENT_SOURCE,
        (MatchField(n.KEY_INGRESS_PORT, 9, "exact"), MatchField(n.KEY_IPV4_SRC, 32, "lpm")),
        (n.SOURCE_OK, n.NO_ACTION),
        n.NO_ACTION,
        size=n.CLIENT_SOURCES,
    ),
    # a leaf's hosts: what may come down to it from a spine
    Table(
        n.RACK_HOSTS,
        (MatchField(n.KEY_IPV4_DST, 32, "exact"),),
        (n.DEST_OK, n.NO_ACTION),
        n.NO_ACTION,
        size=n.MAX_PORTS,
    ),
)

KNOWN_OPS = frozenset(int(o) for o in Op)
COHERENCE_OPS = frozenset({int(Op.INVALIDATE), int(Op.UPDATE)})
# what only switches and servers send: nothing entering from a client port may carry these
FROM_FABRIC_ONLY = frozenset(
    {int(Op.INVALIDATE_ACK), int(Op.UPDATE_ACK), int(Op.GET_REPLY), int(Op.PUT_REPLY), int(Op.DELETE_REPLY)}
)
PORT_FABRIC, PORT_CLIENT, PORT_STORAGE = int(PortKind.FABRIC), int(PortKind.CLIENT), int(PortKind.STORAGE)
LEAVES = frozenset({int(Role.STORAGE_LEAF), int(Role.CLIENT_LEAF)})
ROLE_SPINE = int(Role.SPINE)
OP_PROBE, OP_PROBE_REPLY = int(Op.PROBE), int(Op.PROBE_REPLY)


def apply(state: SwitchState, h: Headers, m: Meta) -> None:
    from_cpu = h.packet_out is not None  # the controller's packet-out
    leaf = m.role in LEAVES
    m.dropped = True
    perr, dc = m.parser_error, h.dc
    if perr == PACKET_TOO_SHORT:
        reason = DropReason.TRUNCATED
    elif perr == DC_BAD_VERSION:
        reason = DropReason.BAD_VERSION
    elif perr == DC_BAD_CHUNKS:
        reason = DropReason.BAD_CHUNKS
    elif perr != NO_ERROR:
        reason = DropReason.PARSER_OTHER
    elif h.ipv4 is None:
        reason = DropReason.NOT_IPV4
    elif from_cpu and not (leaf and dc is not None and dc["op"] == OP_PROBE):
        reason = DropReason.PROBE  # what a controller sends into the data plane is a probe, through a leaf
    elif (
        m.port_kind == PORT_CLIENT
        and not state.tables[n.CLIENT_SOURCE].lookup(m.ingress_port, int.from_bytes(h.ipv4[IP_SRC], "big"))[2]
    ):
        reason = DropReason.SPOOFED
    elif dc is None:
        m.dropped = False  # plain IPv4: routed by DcForwarding
    else:
        op = m.op = dc["op"]
        vlen = dc["vlen"]
        want_chunks = (vlen + 15) >> 4 if vlen <= MAX_CACHEABLE else 0
        probe_ok = (
            (leaf and from_cpu and op == OP_PROBE and 0 < h.packet_out <= MAX_SPINES)
            or (leaf and not from_cpu and op == OP_PROBE_REPLY and m.from_spine != 0)
            or (m.role == ROLE_SPINE and not from_cpu and op == OP_PROBE)
        )
        if h.ipv4_options is not None:
            reason = DropReason.IP_OPTIONS
        elif op not in KNOWN_OPS:
            reason = DropReason.UNKNOWN_OP
        elif vlen > MAX_VALUE_LEN or dc["nchunks"] != want_chunks:
            reason = DropReason.BAD_CHUNKS
        elif (op in (OP_PROBE, OP_PROBE_REPLY)) and not probe_ok:
            reason = DropReason.PROBE
        elif (op in COHERENCE_OPS and m.port_kind != PORT_STORAGE) or (
            op in FROM_FABRIC_ONLY and m.port_kind == PORT_CLIENT
        ):
            reason = DropReason.UNTRUSTED
        else:
            m.dropped = False
    if not m.dropped:  # a sound packet (what is wrong with it is counted first): where it is going
        if h.ipv4[IP_TTL] <= 1:  # forwarding would take it to 0: dropped before anything counts it
            reason = DropReason.TTL_EXPIRED
        elif (
            leaf
            and m.port_kind == PORT_FABRIC
            and not from_cpu
            and m.op != OP_PROBE_REPLY
            and not state.tables[n.RACK_HOSTS].lookup(int.from_bytes(h.ipv4[IP_DST], "big"))[2]
        ):
            reason = DropReason.LOOP  # down from a spine for no host of the rack: never back up (valley-free)
        else:
            return
        m.dropped = True
    state.counters[n.DC_DROPS].count(reason, m.packet_length)
