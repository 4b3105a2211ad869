"""The control-plane view of ``p4src/distcache.p4``, as softswitch declares it.

This is the pipeline description softswitch produces its P4Info from; the
parity test holds it against the P4 source (and against p4c's P4Info when
``p4c-bm2-ss`` is installed).
"""

from __future__ import annotations

from distcache import p4names as n
from softswitch.program import Action, Counter, MatchField, Param, Program, Register, Table

ACTIONS = (
    Action(n.NO_ACTION),
    Action(n.DROP),
    Action(n.SET_CONFIG, (Param("switch_id", 8), Param("role", 8), Param("mechanism", 8))),
    Action(n.SET_PORT_KIND, (Param("kind", 8),)),
    Action(n.SET_NHOP, (Param("dmac", 48), Param("port", 9))),
    Action(n.CACHE_HIT, (Param("slot", 16), Param("version", 16))),
    Action(n.CACHE_MISS),
    Action(n.SET_SPINE_CANDIDATE, (Param("spine_id", 8),)),
    Action(n.SET_LEAF_CANDIDATE, (Param("leaf_id", 8),)),
)

TABLES = (
    Table(n.SWITCH_CONFIG, (), (n.SET_CONFIG, n.NO_ACTION), n.NO_ACTION, size=1),
    Table(n.PORT_KIND, (MatchField(n.KEY_INGRESS_PORT, 9, "exact"),),
          (n.SET_PORT_KIND, n.NO_ACTION), n.NO_ACTION, size=n.MAX_PORTS),
    Table(n.IPV4_LPM, (MatchField(n.KEY_IPV4_DST, 32, "lpm"),),
          (n.SET_NHOP, n.DROP), n.DROP, size=n.MAX_ROUTES),
    Table(n.CACHE_ROUTE, (MatchField(n.KEY_DC_TARGET, 8, "exact"),),
          (n.SET_NHOP, n.NO_ACTION), n.NO_ACTION, size=n.MAX_SWITCHES),
    Table(n.CACHE_LOOKUP, (MatchField(n.KEY_DC_KEY, 128, "exact"),),
          (n.CACHE_HIT, n.CACHE_MISS), n.CACHE_MISS, size=n.CACHE_SLOTS),
    Table(n.SPINE_PARTITION, (MatchField(n.KEY_BUCKET, 16, "exact"),),
          (n.SET_SPINE_CANDIDATE, n.NO_ACTION), n.NO_ACTION, size=n.SPINE_BUCKETS),
    Table(n.STORAGE_RACK, (MatchField(n.KEY_IPV4_DST, 32, "lpm"),),
          (n.SET_LEAF_CANDIDATE, n.NO_ACTION), n.NO_ACTION, size=n.MAX_SWITCHES),
)

REGISTERS = (
    Register(n.CACHE_VALID, 16, n.CACHE_SLOTS),
    Register(n.CACHE_SEQ, 32, n.CACHE_SLOTS),
    Register(n.CACHE_VLEN, 16, n.CACHE_SLOTS),
    Register(n.CACHE_VALUE, 128, n.CACHE_SLOTS * n.MAX_CHUNKS),
    Register(n.LOAD_COUNT, 32, 1),
    Register(n.LOAD_EPOCH, 32, 1),
    Register(n.PEER_LOAD, 32, n.MAX_SWITCHES),
    Register(n.PEER_LOAD_EPOCH, 32, n.MAX_SWITCHES),
)

COUNTERS = (
    Counter(n.CACHE_HITS, n.CACHE_SLOTS, "packets"),
    Counter(n.DC_DROPS, n.N_DROP_REASONS, "packets"),
    Counter(n.DC_STATS, n.N_STATS, "packets"),
)

PROGRAM = Program("distcache", ACTIONS, TABLES, REGISTERS, COUNTERS)
