"""P4Info names of the DistCache pipeline: the one list every part uses.

The controller, agents and tests address entities by these names; the
softswitch pipeline declares them (softswitch/dataplane/) and the
parity test holds them against ``p4src/distcache.p4``.
"""

from __future__ import annotations

from enum import IntEnum

# tables (p4c names an entity by its control instance path: DcIngress.<control>.<name>)
SWITCH_CONFIG = "DcIngress.config.switch_config"
PORT_KIND = "DcIngress.config.port_kind"
CLIENT_SOURCE = "DcIngress.validation.client_source"
RACK_HOSTS = "DcIngress.validation.rack_hosts"
LOAD_WINDOW = "DcIngress.config.load_window"
CACHE_LOOKUP = "DcIngress.cache.cache_lookup"
CACHE_EPOCH = "DcIngress.cache.cache_epoch"
SPINE_PARTITION = "DcIngress.routing.spine_partition"
STORAGE_RACK = "DcIngress.routing.storage_rack"
CACHE_ROUTE = "DcIngress.routing.cache_route"
REPLICA_SPINE = "DcIngress.routing.replica_spine"
REPLICATED_KEYS = "DcIngress.routing.replicated_keys"
TRANSIT_SPINE = "DcIngress.forwarding.transit_spine"
IPV4_LPM = "DcIngress.forwarding.ipv4_lpm"
DETECTOR_CONFIG = "DcIngress.detector.detector_config"
HH_BUCKETS = "DcIngress.detector.hh_buckets"
HH_RACKS = "DcIngress.detector.hh_racks"
PORT_SPINE = "DcIngress.liveness.port_spine"
LIVENESS_CONFIG = "DcIngress.liveness.liveness_config"

# actions
NO_ACTION = "NoAction"
SET_CONFIG = "DcIngress.config.set_config"
SET_PORT_KIND = "DcIngress.config.set_port_kind"
SOURCE_OK = "DcIngress.validation.source_ok"
DEST_OK = "DcIngress.validation.dest_ok"
SET_LOAD_WINDOW = "DcIngress.config.set_load_window"
CACHE_HIT = "DcIngress.cache.cache_hit"
CACHE_MISS = "DcIngress.cache.cache_miss"
SET_CACHE_EPOCH = "DcIngress.cache.set_cache_epoch"
SET_SPINE_CANDIDATE = "DcIngress.routing.set_spine_candidate"
SET_LEAF_CANDIDATE = "DcIngress.routing.set_leaf_candidate"
ROUTE_TO_CACHE = "DcIngress.routing.route_to_cache"
REPLICATE = "DcIngress.routing.replicate"
SET_REPLICA_SPINES = "DcIngress.routing.set_replica_spines"
TRANSIT = "DcIngress.forwarding.transit"
SET_NHOP = "DcIngress.forwarding.set_nhop"
SET_TRANSIT = "DcIngress.forwarding.set_transit"
SET_PORT_SPINE = "DcIngress.liveness.set_port_spine"
SET_LIVENESS = "DcIngress.liveness.set_liveness"
SET_DETECTOR = "DcIngress.detector.set_detector"
DESIGNATE = "DcIngress.detector.designate"
DROP = "DcIngress.forwarding.drop"

# registers shared by two controls are declared at the top level (p4src/include/shared.p4)
CACHE_VALID = "cache_valid"
CACHE_VLEN = "cache_vlen"
CACHE_VALUE = "cache_value"
PEER_LOAD = "peer_load"
PEER_LOAD_EPOCH = "peer_load_epoch"
SPINE_HEARD = "spine_heard"  # liveness (p4src/include/control/liveness.p4): written by DcLiveness and DcProbe,
SPINE_ASKED = "spine_asked"  # read by DcRouting and DcForwarding
SPINE_HOLD = "spine_hold"
SPINE_GAP = "spine_gap"  # ... and the two a leaf's threshold adapts by (smoothed wait x 8, deviation x 4)
SPINE_GAPVAR = "spine_gapvar"
# ... the others inside the control that owns them
CACHE_INVAL = "DcIngress.coherence.cache_inval"
LOAD_COUNT = "DcIngress.telemetry.load_count"
LOAD_EPOCH = "DcIngress.telemetry.load_epoch"
HH_CM = tuple(f"DcIngress.detector.hh_cm{i}" for i in range(4))
HH_BLOOM = tuple(f"DcIngress.detector.hh_bloom{i}" for i in range(3))

# digests (p4c names a v1model digest by its struct type)
HH_DIGEST = "hh_digest_t"
HH_DIGEST_FIELDS = (("key", 128), ("estimate", 16), ("switch_id", 8), ("elapsed_us", 48))
SPINE_DEATH_DIGEST = "spine_death_t"  # a client leaf's report of a spine's death, when it is heard again
SPINE_DEATH_FIELDS = (("switch_id", 8), ("spine_id", 8), ("detect_us", 32), ("silent_us", 32))

# counters
DC_DROPS = "dc_drops"
DC_STATS = "dc_stats"
CACHE_HITS = "DcIngress.cache.cache_hits"
SPINE_DEATHS = "DcIngress.liveness.spine_deaths"  # per spine id, at a leaf: deaths that ended
PROBES_SENT = "DcIngress.probe.probes_sent"  # per spine id, at a leaf
PROBES_ANSWERED = "DcIngress.probe.probes_answered"

# controller packet metadata (P4Runtime PacketOut; p4c names it by its @controller_header)
PACKET_OUT = "packet_out"
PACKET_OUT_FIELDS = (("spine_id", 8),)
CPU_PORT = 510  # where packet-out enters (BMv2's --cpu-port; CPU_PORT in p4src/include/define.p4)

# meters
CACHE_METER = "DcIngress.cache.cache_meter"

# match field names (p4c names a key by its expression)
KEY_INGRESS_PORT = "standard_metadata.ingress_port"
KEY_IPV4_DST = "hdr.ipv4.dstAddr"
KEY_IPV4_SRC = "hdr.ipv4.srcAddr"
KEY_DC_KEY = "hdr.dc.key"
KEY_DC_TARGET = "hdr.dc.target"
KEY_BUCKET = "meta.bucket"
KEY_REPLICA_SLOT = "meta.replica_slot"
KEY_TRANSIT_SLOT = "meta.transit_slot"

# sizes (p4src/include/size.p4)
CACHE_SLOTS = 4096
MAX_CHUNKS = 8
SPINE_BUCKETS = 1024
MAX_SWITCHES = 256
N_DROP_REASONS = 16
N_STATS = 32
MAX_PORTS = 64
CLIENT_SOURCES = 1024
MAX_ROUTES = 1024
TRANSIT_SLOTS = 64
REPLICA_SLOTS = 64
MAX_REPLICATED_KEYS = 256
LOAD_WINDOW_SHIFT = 20
HH_CM_WIDTH = 16384
HH_BLOOM_WIDTH = 65536
HH_THRESHOLD = 16
HH_WINDOW_SHIFT = 20
LIVENESS_SPINES = 64
DEAD_AFTER_US = 30_000  # a probed spine heard from by nothing for this long is dead ...
DEAD_AFTER_MAX_US = 250_000  # ... or longer where it answers slowly, up to this (liveness.p4's threshold)
HOLD_US = 100_000  # and stays excluded until heard from this long after it was found dead
# widths of what the control plane writes into the detector (set_detector's parameters in
# p4src/include/control/detector.p4; the P4Info parity test holds them) and of the clock the
# windows are cut from (v1model's standard_metadata.ingress_global_timestamp)
HH_THRESHOLD_BITS = 16
HH_WINDOW_SHIFT_BITS = 8
TIMESTAMP_BITS = 48


class DropReason(IntEnum):
    """Indexes of the ``dc_drops`` counter (DROP_* in p4src/include/define.p4)."""

    TRUNCATED = 0
    BAD_VERSION = 1
    BAD_CHUNKS = 2
    UNKNOWN_OP = 3
    UNTRUSTED = 4
    NO_ROUTE = 5
    PARSER_OTHER = 6
    NOT_IPV4 = 7
    IP_OPTIONS = 8
    SPOOFED = 9
    TTL_EXPIRED = 10  # arrived with TTL 0 or 1: forwarding it would take the TTL to 0
    LOOP = 11  # would go back the way it came: down from a spine to no host of the rack, or out its ingress port
    PROBE = 12  # a probe or probe reply from where none may come (a host, a leaf's spine port...), or a packet-out


class Stat(IntEnum):
    """Indexes of the ``dc_stats`` counter (STAT_* in p4src/include/define.p4)."""

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
    INVALIDATE_STALE = 10
    HH_COUNTED = 11
    HH_REPORTED = 12
    HIT_METERED = 13
    READ_REROUTED = 14  # a client's read whose spine candidate the leaf found dead
    TRANSIT_REROUTED = 15  # transit sent up the slot's other spine, its own being dead
    PROBE_REFLECTED = 16  # a spine answered a leaf's probe
