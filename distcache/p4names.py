"""P4Info names of the DistCache pipeline: the one list every part uses.

The controller, agents and tests address entities by these names; the
softswitch pipeline declares them (softswitch/distcache_program.py) and the
parity test holds them against ``p4src/distcache.p4``.
"""

from __future__ import annotations

from enum import IntEnum

# tables
SWITCH_CONFIG = "DcIngress.switch_config"
PORT_KIND = "DcIngress.port_kind"
IPV4_LPM = "DcIngress.ipv4_lpm"
CACHE_ROUTE = "DcIngress.cache_route"
CACHE_LOOKUP = "DcIngress.cache_lookup"
SPINE_PARTITION = "DcIngress.spine_partition"
STORAGE_RACK = "DcIngress.storage_rack"

# actions
NO_ACTION = "NoAction"
DROP = "DcIngress.drop"
SET_CONFIG = "DcIngress.set_config"
SET_PORT_KIND = "DcIngress.set_port_kind"
SET_NHOP = "DcIngress.set_nhop"
CACHE_HIT = "DcIngress.cache_hit"
CACHE_MISS = "DcIngress.cache_miss"
SET_SPINE_CANDIDATE = "DcIngress.set_spine_candidate"
SET_LEAF_CANDIDATE = "DcIngress.set_leaf_candidate"

# registers
CACHE_VALID = "DcIngress.cache_valid"
CACHE_SEQ = "DcIngress.cache_seq"
CACHE_VLEN = "DcIngress.cache_vlen"
CACHE_VALUE = "DcIngress.cache_value"
LOAD_COUNT = "DcIngress.load_count"
LOAD_EPOCH = "DcIngress.load_epoch"
PEER_LOAD = "DcIngress.peer_load"
PEER_LOAD_EPOCH = "DcIngress.peer_load_epoch"

# counters
CACHE_HITS = "DcIngress.cache_hits"
DC_DROPS = "DcIngress.dc_drops"
DC_STATS = "DcIngress.dc_stats"

# match field names (p4c names a key by its expression)
KEY_INGRESS_PORT = "standard_metadata.ingress_port"
KEY_IPV4_DST = "hdr.ipv4.dstAddr"
KEY_DC_KEY = "hdr.dc.key"
KEY_DC_TARGET = "hdr.dc.target"
KEY_BUCKET = "meta.bucket"

# sizes (p4src/headers.p4)
CACHE_SLOTS = 4096
MAX_CHUNKS = 8
SPINE_BUCKETS = 1024
MAX_SWITCHES = 256
N_DROP_REASONS = 16
N_STATS = 16
MAX_PORTS = 64
MAX_ROUTES = 1024
LOAD_WINDOW_SHIFT = 20


class DropReason(IntEnum):
    """Indexes of the ``dc_drops`` counter (DROP_* in p4src/headers.p4)."""

    TRUNCATED = 0
    BAD_VERSION = 1
    BAD_CHUNKS = 2
    UNKNOWN_OP = 3
    UNTRUSTED = 4
    NO_ROUTE = 5
    PARSER_OTHER = 6
    NOT_IPV4 = 7


class Stat(IntEnum):
    """Indexes of the ``dc_stats`` counter (STAT_* in p4src/headers.p4)."""

    READ_HIT = 0
    READ_MISS = 1
    INVALIDATE = 2
    UPDATE = 3
    REFLECTED = 4
    ROUTED_SPINE = 5
    ROUTED_LEAF = 6
    REPLY_STAMPED = 7
    LOAD_RECORDED = 8
    UPDATE_STALE = 9
