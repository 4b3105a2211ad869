"""DcCache (p4src/include/control/cache.p4): cache lookup, and the reply to a read that hits.

The switch the client rack chose (target) may answer, and so may the storage
leaf a read targeted at a spine reaches (the spine did not answer it).
cache_meter bounds the reads answered here: a valid hit the meter colours RED is
counted (HIT_METERED, and READ_MISS) and goes on to the server unchanged.
The value is read between two reads of the slot's write version (cache_inval_seq), as the P4 does against
torn values on a target that runs packets on several CPUs; here one thread runs every packet, so the two
always agree, but the reads are the P4's, in its order.
"""

from __future__ import annotations

from distcache import p4names
from distcache.cluster import MAX_SPINES as MAX_SPINE_ID
from distcache.cluster import Role
from distcache.p4names import Stat
from distcache.wire import CHUNK_LEN, HEADER_LEN, Flag, Op, Status
from softswitch.dataplane.actions import dc_reflect
from softswitch.dataplane.header import (
    DC_DIGEST,
    DC_FLAGS,
    DC_KLEN,
    DC_NCHUNKS,
    DC_OP,
    DC_SERVED_BY,
    DC_STATUS,
    DC_TARGET,
    DC_VLEN,
    IP_TOTAL_LEN,
    IPV4_LEN,
    UDP_LEN,
    UDP_LENGTH,
    Headers,
    Meta,
)
from softswitch.program import Action, Counter, MatchField, Meter, Param, Table
from softswitch.state import RED, SwitchState

ACTIONS = (
    Action(p4names.CACHE_HIT, (Param("slot", 16), Param("version", 16))),
    Action(p4names.CACHE_MISS),
    Action(p4names.SET_CACHE_EPOCH, (Param("epoch", 32),)),
)
TABLES = (
    Table(
        p4names.CACHE_LOOKUP,
        (MatchField(p4names.KEY_DC_KEY, 128, "exact"),),
        (p4names.CACHE_HIT, p4names.CACHE_MISS),
        p4names.CACHE_MISS,
        size=p4names.CACHE_SLOTS,
    ),
    Table(
        p4names.CACHE_EPOCH,
        (),
        (p4names.SET_CACHE_EPOCH,),
        p4names.SET_CACHE_EPOCH,
        default_params=(("epoch", 0),),
        size=1,
    ),
)
COUNTERS = (Counter(p4names.CACHE_HITS, p4names.CACHE_SLOTS, "packets"),)
METERS = (Meter(p4names.CACHE_METER, 1, "packets"),)

OP_GET, OP_GET_REPLY = int(Op.GET), int(Op.GET_REPLY)
ROLE_STORAGE_LEAF = int(Role.STORAGE_LEAF)
FLAG_CACHED, STATUS_OK = int(Flag.CACHED), int(Status.OK)
# dc_stats indexes as plain ints: an IntEnum member costs an attribute look-up and slower indexing per packet
READ_HIT, READ_MISS, HIT_METERED = int(Stat.READ_HIT), int(Stat.READ_MISS), int(Stat.HIT_METERED)
READ_TORN = int(Stat.READ_TORN)


def tag(m: Meta) -> int:
    """The entry's tag, ``cache_epoch ++ version`` (48 bits), as cache_valid and cache_inval hold it."""
    return (m.cache_epoch << 16) | m.version


def apply(state: SwitchState, h: Headers, m: Meta) -> None:
    dc = h.dc
    m.cache_epoch = state.tables[p4names.CACHE_EPOCH].lookup()[1]["epoch"]
    action, p, _ = state.tables[p4names.CACHE_LOOKUP].lookup(int.from_bytes(dc[DC_DIGEST], "big"))
    if action == p4names.CACHE_HIT:
        m.cache_hit, m.slot, m.version = True, p["slot"], p["version"]
    target = dc[DC_TARGET]
    spine_missed = m.role == ROLE_STORAGE_LEAF and 0 < target <= MAX_SPINE_ID  # the spine did not answer it
    if not (m.op == OP_GET and (target == m.switch_id or spine_missed)):
        return
    regs, stats = state.registers, state.counters[p4names.DC_STATS]
    seq_before = regs[p4names.CACHE_INVAL_SEQ].read(m.slot) if m.cache_hit else 0
    valid = regs[p4names.CACHE_VALID].read(m.slot) if m.cache_hit else 0
    if not (m.cache_hit and valid != 0 and valid == tag(m)):
        stats.count(READ_MISS, m.packet_length)
        return
    if state.meters[p4names.CACHE_METER].execute(0, m.ingress_global_timestamp, m.packet_length) == RED:
        stats.count(HIT_METERED, m.packet_length)
        stats.count(READ_MISS, m.packet_length)
        return
    # ---- the value, read between two reads of the write version ----
    vlen = regs[p4names.CACHE_VLEN].read(m.slot)
    nchunks = ((vlen + 15) >> 4) & 0xFF
    base = m.slot * p4names.MAX_CHUNKS
    values = regs[p4names.CACHE_VALUE]
    h.vals = [values.read(base + i).to_bytes(CHUNK_LEN, "big") for i in range(min(nchunks, p4names.MAX_CHUNKS))]
    if regs[p4names.CACHE_INVAL_SEQ].read(m.slot) != seq_before:  # a write began: on as sent, less any value
        dc[DC_VLEN], dc[DC_NCHUNKS], h.vals = 0, 0, []
        _set_lengths(h, dc, 0)
        stats.count(READ_TORN, m.packet_length)
        stats.count(READ_MISS, m.packet_length)
        return
    # ---- hit: the request becomes the reply ----
    dc[DC_OP], dc[DC_STATUS], dc[DC_FLAGS] = OP_GET_REPLY, STATUS_OK, dc[DC_FLAGS] | FLAG_CACHED
    dc[DC_SERVED_BY], dc[DC_VLEN], dc[DC_NCHUNKS] = m.switch_id, vlen, nchunks
    _set_lengths(h, dc, nchunks)
    dc_reflect(h)
    m.served = True
    state.counters[p4names.CACHE_HITS].count(m.slot, m.packet_length)
    stats.count(READ_HIT, m.packet_length)


def _set_lengths(h: Headers, dc: list, nchunks: int) -> None:
    """A GET carries no value and no arguments (DcValidation): only its key rides behind the chunks."""
    h.udp[UDP_LENGTH] = (UDP_LEN + HEADER_LEN + (nchunks << 4) + dc[DC_KLEN]) & 0xFFFF
    h.ipv4[IP_TOTAL_LEN] = (IPV4_LEN + h.udp[UDP_LENGTH]) & 0xFFFF
