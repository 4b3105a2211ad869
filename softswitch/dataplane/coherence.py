"""DcCoherence (p4src/include/control/coherence.p4): INVALIDATE and UPDATE on cache switches.

cache_inval[slot] is ``tag << 1 | armed`` and cache_inval_seq[slot] the seq of the newest INVALIDATE
the slot's entry has seen (tag = cache_epoch ++ version); see the P4 file for
why an UPDATE must match both and find the record armed, why only an entry's
own populate arms a new tenure, and why other INVALIDATEs still set its floor.
"""

from __future__ import annotations

from distcache import p4names
from distcache.p4names import Stat
from distcache.wire import MAX_CACHEABLE, Flag, Op
from softswitch.dataplane.actions import dc_reflect
from softswitch.dataplane.cache import tag as entry_tag
from softswitch.dataplane.header import (
    DC_FLAGS,
    DC_LEAF_LOAD,
    DC_NCHUNKS,
    DC_OP,
    DC_SEQ,
    DC_SPINE_LOAD,
    DC_TARGET,
    DC_VLEN,
    Headers,
    Meta,
)
from softswitch.program import Register
from softswitch.state import SwitchState

REGISTERS = (
    Register(p4names.CACHE_INVAL, 49, p4names.CACHE_SLOTS),
)  # cache_inval_seq is shared with DcCache (shared.py)

OP_INVALIDATE, OP_UPDATE, OP_REPLY_BIT = int(Op.INVALIDATE), int(Op.UPDATE), 0x80
FLAG_POPULATE = int(Flag.POPULATE)
STAT_INVALIDATE, STAT_INVALIDATE_STALE = int(Stat.INVALIDATE), int(Stat.INVALIDATE_STALE)  # plain ints (see cache.py)
STAT_UPDATE, STAT_UPDATE_STALE, STAT_REFLECTED = int(Stat.UPDATE), int(Stat.UPDATE_STALE), int(Stat.REFLECTED)


def apply(state: SwitchState, h: Headers, m: Meta) -> None:
    op = m.op
    if op != OP_INVALIDATE and op != OP_UPDATE:
        return
    dc = h.dc
    stats = state.counters[p4names.DC_STATS]
    if m.cache_hit:
        regs = state.registers
        slot, seq = m.slot, dc[DC_SEQ]
        tag = entry_tag(m)
        last, last_seq = regs[p4names.CACHE_INVAL].read(slot), regs[p4names.CACHE_INVAL_SEQ].read(slot)
        same_tenure = (last >> 1) == tag
        armed = bool(last & 1)
        if op == OP_INVALIDATE:
            regs[p4names.CACHE_VALID].write(slot, 0)
            ahead = (seq - last_seq) & 0xFFFFFFFFFFFFFFFF  # seq >= last_seq in serial arithmetic (64-bit)
            own_populate = (
                dc[DC_FLAGS] & FLAG_POPULATE
                and dc[DC_TARGET] == m.switch_id
                and dc[DC_SPINE_LOAD] == m.cache_epoch
                and dc[DC_LEAF_LOAD] == m.version
            )
            if not same_tenure or not ahead >> 63:
                arm = bool(own_populate) or (same_tenure and armed)
                regs[p4names.CACHE_INVAL].write(slot, (tag << 1) | arm)
                regs[p4names.CACHE_INVAL_SEQ].write(slot, seq)
                stats.count(STAT_INVALIDATE, m.packet_length)
            else:
                stats.count(STAT_INVALIDATE_STALE, m.packet_length)
        elif same_tenure and armed and last_seq == seq and dc[DC_VLEN] <= MAX_CACHEABLE:
            base = slot * p4names.MAX_CHUNKS
            regs[p4names.CACHE_VLEN].write(slot, dc[DC_VLEN])
            values = regs[p4names.CACHE_VALUE]
            for i, chunk in enumerate(h.vals[: dc[DC_NCHUNKS]]):
                values.write(base + i, int.from_bytes(chunk, "big"))
            regs[p4names.CACHE_VALID].write(slot, tag)
            stats.count(STAT_UPDATE, m.packet_length)
        else:
            stats.count(STAT_UPDATE_STALE, m.packet_length)
    if dc[DC_TARGET] == m.switch_id:
        dc[DC_OP] = op | OP_REPLY_BIT
        dc_reflect(h)
        stats.count(STAT_REFLECTED, m.packet_length)
