"""DcForwarding (p4src/include/control/forwarding.p4): next hop, or the longest-prefix route."""

from __future__ import annotations

from distcache import p4names as n
from distcache.p4names import DropReason
from softswitch.dataplane.header import IP_DST, IP_TTL, Headers, Meta
from softswitch.program import Action, MatchField, Param, Table
from softswitch.state import SwitchState

ACTIONS = (
    Action(n.SET_NHOP, (Param("dmac", 48), Param("port", 9))),
    Action(n.DROP),
)
TABLES = (
    Table(n.IPV4_LPM, (MatchField(n.KEY_IPV4_DST, 32, "lpm"),), (n.SET_NHOP, n.DROP), n.DROP, size=n.MAX_ROUTES),
)


def apply(state: SwitchState, h: Headers, m: Meta) -> None:
    if not m.routed:
        action, p, _ = state.tables[n.IPV4_LPM].lookup(int.from_bytes(h.ipv4[IP_DST], "big"))
        if action == n.SET_NHOP:
            m.routed, m.nhop_dmac, m.nhop_port = True, p["dmac"], p["port"]
    if m.routed:
        m.egress_spec = m.nhop_port
        h.eth[1] = h.eth[0]
        h.eth[0] = m.nhop_dmac.to_bytes(6, "big")
        h.ipv4[IP_TTL] = (h.ipv4[IP_TTL] - 1) & 0xFF
    else:
        state.counters[n.DC_DROPS].count(DropReason.NO_ROUTE, m.packet_length)
        m.dropped = True
