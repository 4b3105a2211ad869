"""DcProbe (p4src/include/control/probe.p4): a leaf sends its controller's probes (not those for a spine
heard from within probe_skip), a spine reflects them, the leaf counts the replies (probes_sent,
probes_answered: per spine id)."""

from __future__ import annotations

from distcache import p4names
from distcache.p4names import Stat
from distcache.wire import Op
from softswitch.dataplane.actions import dc_reflect
from softswitch.dataplane.header import DC_OP, DC_SPINE_ID, DC_TARGET, Headers, Meta
from softswitch.program import Counter
from softswitch.state import SwitchState

COUNTERS = (
    Counter(p4names.PROBES_SENT, p4names.LIVENESS_SPINES, "packets"),  # a leaf's probes, per spine
    Counter(p4names.PROBES_ANSWERED, p4names.LIVENESS_SPINES, "packets"),  # their replies, per spine (of the port)
)

OP_PROBE, OP_PROBE_REPLY = int(Op.PROBE), int(Op.PROBE_REPLY)
PROBE_REFLECTED, PROBE_SKIPPED = int(Stat.PROBE_REFLECTED), int(Stat.PROBE_SKIPPED)  # plain ints (see cache.py)


def apply(state: SwitchState, h: Headers, m: Meta) -> None:
    if m.op == OP_PROBE and h.packet_out is not None:
        # a leaf: its controller's probe for one spine
        spine, h.packet_out = h.packet_out, None
        h.dc[DC_TARGET] = spine
        regs = state.registers
        heard, now = regs[p4names.SPINE_HEARD].read(spine), m.ingress_global_timestamp
        if regs[p4names.SPINE_ASKED].read(spine) <= heard:
            if heard != 0 and heard <= now < heard + m.probe_skip:
                # heard from lately, no wait going on: its traffic answered already; no ask starts
                state.counters[p4names.DC_STATS].count(PROBE_SKIPPED, m.packet_length)
                m.consumed = True
                return
            regs[p4names.SPINE_ASKED].write(spine, now)
        state.counters[p4names.PROBES_SENT].count(spine, m.packet_length)
    elif m.op == OP_PROBE:
        # a spine: back to the leaf, out of the port it came in by
        h.dc[DC_OP] = OP_PROBE_REPLY
        h.dc[DC_SPINE_ID] = m.switch_id
        dc_reflect(h)
        m.routed, m.nhop_port, m.nhop_dmac = True, m.ingress_port, int.from_bytes(h.eth[1], "big")
        state.counters[p4names.DC_STATS].count(PROBE_REFLECTED, m.packet_length)
    elif m.op == OP_PROBE_REPLY:
        # a leaf: a spine's answer, counted under the spine of the port it came in by
        state.counters[p4names.PROBES_ANSWERED].count(m.from_spine, m.packet_length)
        m.consumed = True
