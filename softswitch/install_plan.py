"""Install a controller plan straight into a local :class:`SwitchState`, without gRPC.

For data-plane tests and benchmarks that drive the pipeline directly: the
entries are exactly those the controller writes over P4Runtime.
"""

from __future__ import annotations

from distcache import p4names
from p4rt.p4info import Match
from p4rt.plan import SwitchPlan
from softswitch.state import SwitchState


def install(state: SwitchState, plan: SwitchPlan) -> SwitchState:
    state.tables[p4names.SWITCH_CONFIG].set_default(p4names.SET_CONFIG, plan.config)
    for e in plan.defaults:
        state.tables[e.table].set_default(e.action, e.params_dict)
    for e in plan.entries:
        table = state.tables[e.table]
        match = e.match_dict
        spec = []
        for key in table.table.keys:
            v = match[key.name]
            if isinstance(v, Match):
                spec.append((v.value, v.prefix_len) if v.prefix_len is not None else v.value)
            else:
                spec.append(v)
        table.insert(spec, e.action, e.params_dict)
    return state
