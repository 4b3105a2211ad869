"""DcCoherence (p4src/include/control/coherence.p4): INVALIDATE and UPDATE on cache switches.

cache_inval[slot] is ``tag << 1 | armed`` and cache_inval_seq[slot] the seq of the newest INVALIDATE
the slot's entry has seen (tag = cache_epoch ++ version); see the P4 file for
why an UPDATE must match both and find the record armed, why only an entry's
own populate arms a new tenure, and why other INVALIDATEs still set its floor.
"""

from __future__ import annotations

from distcache import p4names as n
from distcache.p4names import Stat
from distcache.wire import MAX_CACHEABLE, Flag, Op
from softswitch.dataplane.actions import dc_reflect
from softswitch.dataplane.cache import tag as entry_tag
from softswitch.dataplane.header import Headers, Meta
from softswitch.program import Register
from softswitch.state import SwitchState

REGISTERS = (Register(n.CACHE_INVAL, 49, n.CACHE_SLOTS), Register(n.CACHE_INVAL_SEQ, 32, n.CACHE_SLOTS))

OP_INVALIDATE, OP_UPDATE, OP_REPLY_BIT = int(Op.INVALIDATE), int(Op.UPDATE), 0x80
FLAG_POPULATE = int(Flag.POPULATE)


def apply(state: SwitchState, h: Headers, m: Meta) -> None:
    op = m.op
    if op != OP_INVALIDATE and op != OP_UPDATE:
        return
    dc = h.dc
    stats = state.counters[n.DC_STATS]
    if m.cache_hit:
        regs = state.registers
        slot, seq = m.slot, dc["seq"]
        tag = entry_tag(m)
        last, last_seq = regs[n.CACHE_INVAL].read(slot), regs[n.CACHE_INVAL_SEQ].read(slot)
        same_tenure = (last >> 1) == tag
        armed = bool(last & 1)
        if op == OP_INVALIDATE:
            regs[n.CACHE_VALID].write(slot, 0)
            ahead = (seq - last_seq) & 0xFFFFFFFF  # seq >= last_seq in serial arithmetic
            own_populate = (
                dc["flags"] & FLAG_POPULATE
                and dc["target"] == m.switch_id
                and dc["spine_load"] == m.cache_epoch
                and dc["leaf_load"] == m.version
            )
            if not same_tenure or not ahead >> 31:
                arm = bool(own_populate) or (same_tenure and armed)
                regs[n.CACHE_INVAL].write(slot, (tag << 1) | arm)
                regs[n.CACHE_INVAL_SEQ].write(slot, seq)
                stats.count(Stat.INVALIDATE, m.packet_length)
            else:
                stats.count(Stat.INVALIDATE_STALE, m.packet_length)
        elif same_tenure and armed and last_seq == seq and dc["vlen"] <= MAX_CACHEABLE:
            base = slot * n.MAX_CHUNKS
            regs[n.CACHE_VLEN].write(slot, dc["vlen"])
            values = regs[n.CACHE_VALUE]
            for i, chunk in enumerate(h.vals[: dc["nchunks"]]):
                values.write(base + i, int.from_bytes(chunk, "big"))
            regs[n.CACHE_VALID].write(slot, tag)
            stats.count(Stat.UPDATE, m.packet_length)
        else:
            stats.count(Stat.UPDATE_STALE, m.packet_length)
    if dc["target"] == m.switch_id:
        dc["op"] = op | OP_REPLY_BIT
        dc_reflect(h)
        stats.count(Stat.REFLECTED, m.packet_length)
