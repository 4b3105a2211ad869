"""DcConfig (p4src/include/control/config.p4): role, id, mechanism, port kinds, load window."""

from __future__ import annotations

from distcache import p4names
from softswitch.dataplane.header import Headers, Meta
from softswitch.program import Action, MatchField, Param, Table
from softswitch.state import SwitchState

ACTIONS = (
    Action(p4names.SET_CONFIG, (Param("switch_id", 8), Param("role", 8), Param("mechanism", 8))),
    Action(p4names.SET_PORT_KIND, (Param("kind", 8),)),
    Action(p4names.SET_LOAD_WINDOW, (Param("shift", 8),)),
)

TABLES = (
    Table(p4names.SWITCH_CONFIG, (), (p4names.SET_CONFIG, p4names.NO_ACTION), p4names.NO_ACTION, size=1),
    Table(
        p4names.PORT_KIND,
        (MatchField(p4names.KEY_INGRESS_PORT, 9, "exact"),),
        (p4names.SET_PORT_KIND, p4names.NO_ACTION),
        p4names.NO_ACTION,
        size=p4names.MAX_PORTS,
    ),
    Table(
        p4names.LOAD_WINDOW,
        (),
        (p4names.SET_LOAD_WINDOW,),
        p4names.SET_LOAD_WINDOW,
        default_params=(("shift", p4names.LOAD_WINDOW_SHIFT),),
        size=1,
    ),
)


def apply(state: SwitchState, _h: Headers, m: Meta) -> None:
    """Every packet, first: what this switch is and which port the packet came by (reads no header)."""
    tables = state.tables
    action, p, _ = tables[p4names.SWITCH_CONFIG].lookup()
    if action == p4names.SET_CONFIG:
        m.switch_id, m.role, m.mechanism = p["switch_id"], p["role"], p["mechanism"]
    action, p, _ = tables[p4names.PORT_KIND].lookup(m.ingress_port)
    if action == p4names.SET_PORT_KIND:
        m.port_kind = p["kind"]
    m.window_shift = shift = tables[p4names.LOAD_WINDOW].lookup()[1]["shift"]
    m.epoch = (m.ingress_global_timestamp >> shift) & 0xFFFFFFFF
