"""DcConfig (p4src/include/control/config.p4): role, id, mechanism, port kinds, load window."""

from __future__ import annotations

from distcache import p4names as n
from softswitch.dataplane.header import Headers, Meta
from softswitch.program import Action, MatchField, Param, Table
from softswitch.state import SwitchState

ACTIONS = (
    Action(n.SET_CONFIG, (Param("switch_id", 8), Param("role", 8), Param("mechanism", 8))),
    Action(n.SET_PORT_KIND, (Param("kind", 8),)),
    Action(n.SET_LOAD_WINDOW, (Param("shift", 8),)),
)

TABLES = (
    Table(n.SWITCH_CONFIG, (), (n.SET_CONFIG, n.NO_ACTION), n.NO_ACTION, size=1),
    Table(
        n.PORT_KIND,
        (MatchField(n.KEY_INGRESS_PORT, 9, "exact"),),
        (n.SET_PORT_KIND, n.NO_ACTION),
        n.NO_ACTION,
        size=n.MAX_PORTS,
    ),
    Table(
        n.LOAD_WINDOW,
        (),
        (n.SET_LOAD_WINDOW,),
        n.SET_LOAD_WINDOW,
        default_params=(("shift", n.LOAD_WINDOW_SHIFT),),
        size=1,
    ),
)


def apply(state: SwitchState, _h: Headers, m: Meta) -> None:
    """Every packet, first: what this switch is and which port the packet came by (reads no header)."""
    tables = state.tables
    action, p, _ = tables[n.SWITCH_CONFIG].lookup()
    if action == n.SET_CONFIG:
        m.switch_id, m.role, m.mechanism = p["switch_id"], p["role"], p["mechanism"]
    action, p, _ = tables[n.PORT_KIND].lookup(m.ingress_port)
    if action == n.SET_PORT_KIND:
        m.port_kind = p["kind"]
    m.window_shift = shift = tables[n.LOAD_WINDOW].lookup()[1]["shift"]
    m.epoch = (m.ingress_global_timestamp >> shift) & 0xFFFFFFFF
