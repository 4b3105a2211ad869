"""DcForwarding (p4src/include/control/forwarding.p4): next hop, the longest-prefix route, or transit (ECMP;
a client's retry one slot further per attempt; the slot's other spine if its own is dead); nothing forwarded
out of the port it came in by, TTL less one."""

from __future__ import annotations

from distcache import p4names
from distcache.cluster import PortKind
from distcache.hashing import h0
from distcache.p4defines import IPV4_MIN_IHL
from distcache.p4names import DropReason, Stat
from distcache.wire import attempt_of
from softswitch.dataplane.header import (
    DC_DIGEST,
    DC_FLAGS,
    DC_OP,
    IP_CSUM,
    IP_DST,
    IP_PROTO,
    IP_TTL,
    IP_VER_IHL,
    Headers,
    Meta,
)
from softswitch.dataplane.liveness import spine_excluded
from softswitch.program import Action, MatchField, Param, Table
from softswitch.state import SwitchState

ACTIONS = (
    Action(p4names.SET_NHOP, (Param("dmac", 48), Param("port", 9))),
    Action(
        p4names.SET_TRANSIT,
        (
            Param("spine_id", 8),
            Param("dmac", 48),
            Param("port", 9),
            Param("alt_spine_id", 8),
            Param("alt_dmac", 48),
            Param("alt_port", 9),
        ),
    ),
    Action(p4names.DROP),
    Action(p4names.TRANSIT),
)
TABLES = (
    Table(
        p4names.IPV4_LPM,
        (MatchField(p4names.KEY_IPV4_DST, 32, "lpm"),),
        (p4names.SET_NHOP, p4names.TRANSIT, p4names.DROP),
        p4names.DROP,
        size=p4names.MAX_ROUTES,
    ),
    Table(
        p4names.TRANSIT_SPINE,
        (MatchField(p4names.KEY_TRANSIT_SLOT, 8, "exact"),),
        (p4names.SET_TRANSIT, p4names.DROP),
        p4names.DROP,
        size=p4names.TRANSIT_SLOTS,
    ),
)


PORT_CLIENT = int(PortKind.CLIENT)
TRANSIT_REROUTED, DROP_LOOP, DROP_NO_ROUTE = int(Stat.TRANSIT_REROUTED), int(DropReason.LOOP), int(DropReason.NO_ROUTE)


def apply(state: SwitchState, h: Headers, m: Meta) -> None:
    ip, dc = h.ipv4, h.dc
    if not m.routed:
        action, p, _ = state.tables[p4names.IPV4_LPM].lookup(int.from_bytes(ip[IP_DST], "big"))
        if action == p4names.SET_NHOP:
            m.routed, m.nhop_dmac, m.nhop_port = True, p["dmac"], p["port"]
        elif action == p4names.TRANSIT:
            m.transit = True
    if m.transit:
        bucket = h0(dc[DC_DIGEST]) if dc is not None else 0
        if dc is not None and m.port_kind == PORT_CLIENT:  # a client's retry: through another spine
            bucket += attempt_of(dc[DC_FLAGS])
        m.transit_slot = bucket & (p4names.TRANSIT_SLOTS - 1)
        action, p, _ = state.tables[p4names.TRANSIT_SPINE].lookup(m.transit_slot)
        if action == p4names.SET_TRANSIT:
            m.routed, m.nhop_dmac, m.nhop_port = True, p["dmac"], p["port"]
            m.transit_id, m.alt_id, m.alt_dmac, m.alt_port = (
                p["spine_id"],
                p["alt_spine_id"],
                p["alt_dmac"],
                p["alt_port"],
            )
        if m.routed and m.transit_id != 0 and m.alt_id != 0:
            now = m.ingress_global_timestamp
            if spine_excluded(state, m.transit_id, now, m) and not spine_excluded(state, m.alt_id, now, m):
                m.nhop_dmac, m.nhop_port = m.alt_dmac, m.alt_port
                state.counters[p4names.DC_STATS].count(TRANSIT_REROUTED, m.packet_length)
    # an answer (a cache hit, a reflected coherence message: its op gained the reply bit here) is this
    # switch's own packet and goes back the way its request came; no other packet leaves by its ingress port
    answered = dc is not None and dc[DC_OP] != m.op
    if m.routed and m.nhop_port == m.ingress_port and not answered:
        state.counters[p4names.DC_DROPS].count(DROP_LOOP, m.packet_length)
        m.dropped = True
    elif m.routed:
        m.egress_spec = m.nhop_port
        eth = h.eth
        eth[1] = eth[0]
        eth[0] = m.nhop_dmac.to_bytes(6, "big")
        # bit<8> arithmetic as in P4; never wraps: validation passes TTL >= 2 only, an answer starts from 64
        ttl_word = ip[IP_TTL] << 8 | ip[IP_PROTO]
        ip[IP_TTL] = (ip[IP_TTL] - 1) & 0xFF
        if ip[IP_VER_IHL] & 0x0F != IPV4_MIN_IHL:  # options are payload: the deparser leaves this checksum alone
            ip[IP_CSUM] = ttl_checksum(ip[IP_CSUM], ttl_word, ip[IP_TTL] << 8 | ip[IP_PROTO])
    else:
        state.counters[p4names.DC_DROPS].count(DROP_NO_ROUTE, m.packet_length)
        m.dropped = True


def ttl_checksum(checksum: int, old_word: int, new_word: int) -> int:
    """An IPv4 header checksum after one 16-bit word of the header changed: HC' = ~(~HC + ~m + m')
    (RFC 1624, eqn. 3), as forwarding.p4 computes it in 32 bits with two folds."""
    s = (~checksum & 0xFFFF) + (~old_word & 0xFFFF) + new_word
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF
