"""DcRouting (p4src/include/control/routing.p4): the client-rack leaf's power of two choices, and where a
client's retry goes instead (its attempt number in flags: the other cache, then no cache at all); a spine the
leaf found dead (DcLiveness) is no candidate."""

from __future__ import annotations

from distcache import p4names
from distcache.cluster import Mechanism, PortKind
from distcache.hashing import h0
from distcache.p4names import Stat
from distcache.wire import Op, attempt_of
from softswitch.dataplane.header import DC_DIGEST, DC_FLAGS, DC_SEQ, DC_TARGET, IP_DST, Headers, Meta
from softswitch.dataplane.liveness import spine_excluded
from softswitch.program import Action, MatchField, Param, Table
from softswitch.state import SwitchState

ACTIONS = (
    Action(p4names.SET_SPINE_CANDIDATE, (Param("spine_id", 8),)),
    Action(p4names.SET_REPLICA_SPINES, (Param("spine_id", 8), Param("alt_spine_id", 8))),
    Action(p4names.REPLICATE),
    Action(p4names.SET_LEAF_CANDIDATE, (Param("leaf_id", 8),)),
    Action(p4names.ROUTE_TO_CACHE, (Param("dmac", 48), Param("port", 9))),
)
TABLES = (
    Table(
        p4names.SPINE_PARTITION,
        (MatchField(p4names.KEY_BUCKET, 16, "exact"),),
        (p4names.SET_SPINE_CANDIDATE, p4names.NO_ACTION),
        p4names.NO_ACTION,
        size=p4names.SPINE_BUCKETS,
    ),
    Table(
        p4names.REPLICA_SPINE,
        (MatchField(p4names.KEY_REPLICA_SLOT, 8, "exact"),),
        (p4names.SET_REPLICA_SPINES, p4names.NO_ACTION),
        p4names.NO_ACTION,
        size=p4names.REPLICA_SLOTS,
    ),
    Table(
        p4names.REPLICATED_KEYS,
        (MatchField(p4names.KEY_DC_KEY, 128, "exact"),),
        (p4names.REPLICATE, p4names.NO_ACTION),
        p4names.NO_ACTION,
        size=p4names.MAX_REPLICATED_KEYS,
    ),
    Table(
        p4names.STORAGE_RACK,
        (MatchField(p4names.KEY_IPV4_DST, 32, "lpm"),),
        (p4names.SET_LEAF_CANDIDATE, p4names.NO_ACTION),
        p4names.NO_ACTION,
        size=p4names.MAX_SWITCHES,
    ),
    Table(
        p4names.CACHE_ROUTE,
        (MatchField(p4names.KEY_DC_TARGET, 8, "exact"),),
        (p4names.ROUTE_TO_CACHE, p4names.NO_ACTION),
        p4names.NO_ACTION,
        size=p4names.MAX_SWITCHES,
    ),
)

OP_GET, PORT_CLIENT = int(Op.GET), int(PortKind.CLIENT)
READ_REROUTED, ROUTED_SPINE, ROUTED_LEAF = int(Stat.READ_REROUTED), int(Stat.ROUTED_SPINE), int(Stat.ROUTED_LEAF)
MECH_NOCACHE, MECH_DISTCACHE, MECH_PARTITION, MECH_REPLICATION, MECH_HYBRID = (
    int(Mechanism.NOCACHE),
    int(Mechanism.DISTCACHE),
    int(Mechanism.PARTITION),
    int(Mechanism.REPLICATION),
    int(Mechanism.HYBRID),
)


def apply(state: SwitchState, h: Headers, m: Meta) -> None:
    if not (m.op == OP_GET and m.port_kind == PORT_CLIENT):
        return
    tables, regs = state.tables, state.registers
    dc = h.dc
    attempt = attempt_of(dc[DC_FLAGS])
    dc[DC_TARGET] = 0
    mech = m.mechanism
    if mech == MECH_REPLICATION:
        m.replicated = True
    elif mech == MECH_HYBRID:
        m.replicated = (
            tables[p4names.REPLICATED_KEYS].lookup(int.from_bytes(dc[DC_DIGEST], "big"))[0] == p4names.REPLICATE
        )
    bucket = h0(dc[DC_DIGEST]) if mech != MECH_NOCACHE else 0  # crc32(key) % SPINE_BUCKETS
    if m.replicated:
        m.replica_slot = (bucket + (dc[DC_SEQ] & 0xFFFF) + attempt) & (p4names.REPLICA_SLOTS - 1)
        action, p, _ = tables[p4names.REPLICA_SPINE].lookup(m.replica_slot)
        if action == p4names.SET_REPLICA_SPINES:
            m.spine_cand, m.replica_alt = p["spine_id"], p["alt_spine_id"]
    elif mech in (MECH_DISTCACHE, MECH_PARTITION, MECH_HYBRID):
        action, p, _ = tables[p4names.SPINE_PARTITION].lookup(bucket)
        if action == p4names.SET_SPINE_CANDIDATE:
            m.spine_cand = p["spine_id"]
    if not m.replicated and (mech in (MECH_DISTCACHE, MECH_HYBRID)):
        action, p, _ = tables[p4names.STORAGE_RACK].lookup(int.from_bytes(h.ipv4[IP_DST], "big"))
        if action == p4names.SET_LEAF_CANDIDATE:
            m.leaf_cand = p["leaf_id"]
    stats = state.counters[p4names.DC_STATS]
    if m.spine_cand != 0:
        now = m.ingress_global_timestamp
        if spine_excluded(state, m.spine_cand, now, m):
            instead = 0  # another live replica spine, else no spine at all
            if m.replicated and m.replica_alt != 0 and not spine_excluded(state, m.replica_alt, now, m):
                instead = m.replica_alt
            m.spine_cand = instead
            stats.count(READ_REROUTED, m.packet_length)
    loads, epochs = regs[p4names.PEER_LOAD], regs[p4names.PEER_LOAD_EPOCH]

    def fresh_load(sid: int) -> int:
        """The recorded load of ``sid`` if recorded in this or the previous window, else 0."""
        return loads.read(sid) if ((m.epoch - epochs.read(sid)) & 0xFFFFFFFF) <= 1 else 0

    spine_load = fresh_load(m.spine_cand) if m.spine_cand else 0
    leaf_load = fresh_load(m.leaf_cand) if m.leaf_cand else 0
    chosen = other = 0  # the power of two choices' pick, and the candidate it did not pick (if two)
    if m.spine_cand and m.leaf_cand:
        if spine_load < leaf_load or (spine_load == leaf_load and dc[DC_SEQ] & 1 == 0):
            chosen, other = m.spine_cand, m.leaf_cand
        else:
            chosen, other = m.leaf_cand, m.spine_cand
    elif m.spine_cand:
        chosen = m.spine_cand
    elif m.leaf_cand:
        chosen = m.leaf_cand
    if attempt == 0 or (attempt == 1 and m.replicated):
        dc[DC_TARGET] = chosen  # a replicated key's retry: already the next replica slot's spine
    elif attempt == 1:
        dc[DC_TARGET] = other
    # attempt 2 and later: no cache, straight to the storage server
    if dc[DC_TARGET] != 0 and dc[DC_TARGET] == m.spine_cand:
        action, p, _ = tables[p4names.CACHE_ROUTE].lookup(dc[DC_TARGET])
        if action == p4names.ROUTE_TO_CACHE:
            m.routed, m.nhop_dmac, m.nhop_port = True, p["dmac"], p["port"]
        stats.count(ROUTED_SPINE, m.packet_length)
    elif dc[DC_TARGET] != 0:
        stats.count(ROUTED_LEAF, m.packet_length)
