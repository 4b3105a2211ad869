"""DcLiveness (p4src/include/control/liveness.p4): which spines a leaf hears from, and which it leaves out.

Per spine id: ``spine_heard`` (last packet from it), ``spine_asked`` (oldest unanswered probe to it),
``spine_hold`` (excluded while heard < hold: the end of the hold time of its last death),
``spine_gap``/``spine_gapvar`` (the smoothed wait for an answer x 8 and its deviation x 4) and
``spine_peak``/``spine_peak_at`` (the longest recent wait, decaying, and when it ended).  A spine is dead
when asked > heard and now - asked > its threshold (the larger of smoothed wait + 4 x deviation and 1.5 x
the decayed peak, kept within [dead_after, dead_after_max]); see the P4 file for why only probes ask, why
the threshold adapts by both, and why the hysteresis needs no register for the moment a spine was found
dead.
"""

from __future__ import annotations

from distcache import p4names
from distcache.cluster import Role
from softswitch.dataplane.header import Headers, Meta
from softswitch.program import Action, Counter, Digest, MatchField, Param, Register, Table
from softswitch.state import SwitchState

ACTIONS = (
    Action(p4names.SET_PORT_SPINE, (Param("spine_id", 8),)),
    Action(
        p4names.SET_LIVENESS,
        (
            Param("dead_after", 32),
            Param("dead_after_max", 32),
            Param("hold", 32),
            Param("peak_decay_shift", 8),
            Param("probe_skip", 32),
            Param("fenced", 64),
        ),
    ),
)
TABLES = (
    # a leaf's ports to the spines
    Table(
        p4names.PORT_SPINE,
        (MatchField(p4names.KEY_INGRESS_PORT, 9, "exact"),),
        (p4names.SET_PORT_SPINE, p4names.NO_ACTION),
        p4names.NO_ACTION,
        size=p4names.MAX_PORTS,
    ),
    Table(
        p4names.LIVENESS_CONFIG,
        (),
        (p4names.SET_LIVENESS,),
        p4names.SET_LIVENESS,
        default_params=(
            ("dead_after", p4names.DEAD_AFTER_US),
            ("dead_after_max", p4names.DEAD_AFTER_MAX_US),
            ("hold", p4names.HOLD_US),
            ("peak_decay_shift", p4names.PEAK_DECAY_SHIFT),
            ("probe_skip", p4names.PROBE_SKIP_US),
            ("fenced", 0),
        ),
        size=1,
    ),
)
# declared at the top level in P4: written here and by DcProbe, read by DcRouting and DcForwarding
REGISTERS = (
    Register(p4names.SPINE_HEARD, 48, p4names.LIVENESS_SPINES),
    Register(p4names.SPINE_ASKED, 48, p4names.LIVENESS_SPINES),
    Register(p4names.SPINE_HOLD, 48, p4names.LIVENESS_SPINES),
    Register(p4names.SPINE_GAP, 32, p4names.LIVENESS_SPINES),
    Register(p4names.SPINE_GAPVAR, 32, p4names.LIVENESS_SPINES),
    Register(p4names.SPINE_PEAK, 32, p4names.LIVENESS_SPINES),
    Register(p4names.SPINE_PEAK_AT, 48, p4names.LIVENESS_SPINES),
)

COUNTERS = (Counter(p4names.SPINE_DEATHS, p4names.LIVENESS_SPINES, "packets"),)  # deaths that ended, per spine
DIGESTS = (Digest(p4names.SPINE_DEATH_DIGEST, p4names.SPINE_DEATH_FIELDS),)

MASK48 = (1 << 48) - 1
MASK32 = (1 << 32) - 1
LEAVES = frozenset({int(Role.STORAGE_LEAF), int(Role.CLIENT_LEAF)})


def spine_peak_now(state: SwitchState, spine: int, at: int, shift: int) -> int:
    """``spine_peak`` of ``spine`` as it stands at time ``at`` (the P4 action of the same name)."""
    regs = state.registers
    peak, peak_at = regs[p4names.SPINE_PEAK].read(spine), regs[p4names.SPINE_PEAK_AT].read(spine)
    lost = (at - peak_at) >> shift if at > peak_at else 0
    return 0 if lost >= peak else peak - lost


def spine_threshold(state: SwitchState, spine: int, asked: int, dead_after: int, dead_max: int, shift: int) -> int:
    """How long ``spine`` may leave the probe it was asked at ``asked`` unanswered before it is dead (the P4
    action of the same name)."""
    regs = state.registers
    rto = ((regs[p4names.SPINE_GAP].read(spine) >> 3) + regs[p4names.SPINE_GAPVAR].read(spine)) & MASK32
    peak = spine_peak_now(state, spine, asked, shift)
    t = max((peak + (peak >> 1)) & MASK32, rto)
    return max(min(t, dead_max), dead_after)


def spine_excluded(state: SwitchState, spine: int, now: int, m: Meta) -> bool:
    """Whether routing must leave ``spine`` out now (the P4 control DcSpineExcluded)."""
    if m.fenced >> spine & 1:
        return True
    regs = state.registers
    heard = regs[p4names.SPINE_HEARD].read(spine)
    asked = regs[p4names.SPINE_ASKED].read(spine)
    # (asked > heard and now > asked + threshold) or heard < hold; the threshold (six register reads) only
    # when a probe is unanswered, which it rarely is: forwarding asks this of two spines per transit packet
    if asked > heard:
        threshold = spine_threshold(state, spine, asked, m.dead_after, m.dead_after_max, m.peak_decay_shift)
        if now > asked + threshold:
            return True
    return heard < regs[p4names.SPINE_HOLD].read(spine)


def apply(state: SwitchState, _h: Headers, m: Meta) -> None:
    """Every packet at a leaf, before DcValidation may drop it: what comes in by a spine's port is heard
    (whatever its headers, so they are not read)."""
    if m.role not in LEAVES:
        return
    tables = state.tables
    _, p, _ = tables[p4names.LIVENESS_CONFIG].lookup()
    m.dead_after, m.dead_after_max, m.hold = p["dead_after"], p["dead_after_max"], p["hold"]
    m.peak_decay_shift, m.probe_skip, m.fenced = p["peak_decay_shift"], p["probe_skip"], p["fenced"]
    action, p, hit = tables[p4names.PORT_SPINE].lookup(m.ingress_port)
    if action == p4names.SET_PORT_SPINE:
        m.from_spine = p["spine_id"]
    s = m.from_spine
    if not (hit and s != 0):
        return
    regs, now = state.registers, m.ingress_global_timestamp
    heard_reg = regs[p4names.SPINE_HEARD]
    heard, asked = heard_reg.read(s), regs[p4names.SPINE_ASKED].read(s)
    if asked > heard and now > asked:  # a wait ends (only then is the threshold needed; see the P4 file)
        threshold = spine_threshold(state, s, asked, m.dead_after, m.dead_after_max, m.peak_decay_shift)
        waited = (now - asked) & MASK48
        if waited > threshold:
            # it was dead until now: held until hold time after it was found dead
            regs[p4names.SPINE_HOLD].write(s, (asked + threshold + m.hold) & MASK48)
            state.counters[p4names.SPINE_DEATHS].count(s, m.packet_length)
            if m.role == int(Role.CLIENT_LEAF):  # reported to the controller, its primary (see the P4 file)
                detect, silent = (asked + threshold - heard) & MASK48, (now - heard) & MASK48
                state.emit_digest(p4names.SPINE_DEATH_DIGEST, (m.switch_id, s, detect & MASK32, silent & MASK32))
        # the wait is a sample of how fast s answers
        w = min(waited, m.dead_after_max)
        gap8, var4 = regs[p4names.SPINE_GAP].read(s), regs[p4names.SPINE_GAPVAR].read(s)
        smoothed = gap8 >> 3
        regs[p4names.SPINE_GAP].write(s, (gap8 - smoothed + w) & MASK32)
        regs[p4names.SPINE_GAPVAR].write(s, (var4 - (var4 >> 2) + abs(w - smoothed)) & MASK32)
        # and, unless it was a death of dead_after_max or more, of the recent peak
        if waited < m.dead_after_max and waited >= spine_peak_now(state, s, now, m.peak_decay_shift):
            regs[p4names.SPINE_PEAK].write(s, waited)
            regs[p4names.SPINE_PEAK_AT].write(s, now)
    heard_reg.write(s, max(now, heard))  # never back in time (stamps out of order: the P4 file)
