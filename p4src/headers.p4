/* DistCache headers, constants and metadata shared by every role.
 *
 * The DistCache header mirrors distcache/wire.py (HEADER_FIELDS); a test
 * holds the two against each other.  See docs/protocol.md.
 */
#ifndef DC_HEADERS_P4
#define DC_HEADERS_P4

/* Sizes used in declarations (preprocessor, so they can size tables). */
#define CACHE_SLOTS 4096
#define MAX_CHUNKS 8
#define CACHE_VALUE_CELLS 32768 /* CACHE_SLOTS * MAX_CHUNKS */
#define SPINE_BUCKETS 1024
#define MAX_SWITCHES 256
#define N_DROP_REASONS 16
#define N_STATS 16
#define MAX_PORTS 64
#define MAX_ROUTES 1024

const bit<16> TYPE_IPV4 = 0x0800;
const bit<8>  PROTO_UDP = 17;
const bit<16> DC_PORT = 8888;
const bit<8>  DC_VERSION = 1;
const bit<16> MAX_CACHEABLE = 128;
const bit<16> MAX_VALUE_LEN = 1024;
const bit<16> DC_HEADER_LEN = 40;

/* Operation codes (docs/protocol.md). */
const bit<8> OP_GET = 0x01;
const bit<8> OP_PUT = 0x02;
const bit<8> OP_DELETE = 0x03;
const bit<8> OP_GET_REPLY = 0x81;
const bit<8> OP_PUT_REPLY = 0x82;
const bit<8> OP_DELETE_REPLY = 0x83;
const bit<8> OP_INVALIDATE = 0x10;
const bit<8> OP_UPDATE = 0x11;
const bit<8> OP_INVALIDATE_ACK = 0x90;
const bit<8> OP_UPDATE_ACK = 0x91;

const bit<8> STATUS_OK = 0;
const bit<8> FLAG_CACHED = 0x01;

/* Roles written by the controller into switch_config (distcache/cluster.py Role). */
const bit<8> ROLE_NONE = 0;
const bit<8> ROLE_SPINE = 1;
const bit<8> ROLE_STORAGE_LEAF = 2;
const bit<8> ROLE_CLIENT_LEAF = 3;

/* Port kinds (cluster.py PortKind). */
const bit<8> PORT_FABRIC = 0;
const bit<8> PORT_CLIENT = 1;
const bit<8> PORT_STORAGE = 2;

/* Mechanisms (cluster.py Mechanism). */
const bit<8> MECH_NOCACHE = 0;
const bit<8> MECH_DISTCACHE = 1;
const bit<8> MECH_REPLICATION = 2;
const bit<8> MECH_PARTITION = 3;

/* Indexes of the dc_drops counter (controller/counters.py DropReason). */
const bit<32> DROP_TRUNCATED = 0;
const bit<32> DROP_BAD_VERSION = 1;
const bit<32> DROP_BAD_CHUNKS = 2;
const bit<32> DROP_UNKNOWN_OP = 3;
const bit<32> DROP_UNTRUSTED = 4;
const bit<32> DROP_NO_ROUTE = 5;
const bit<32> DROP_PARSER_OTHER = 6;
const bit<32> DROP_NOT_IPV4 = 7;

/* Indexes of the dc_stats counter (controller/counters.py Stat). */
const bit<32> STAT_READ_HIT = 0;
const bit<32> STAT_READ_MISS = 1;
const bit<32> STAT_INVALIDATE = 2;
const bit<32> STAT_UPDATE = 3;
const bit<32> STAT_REFLECTED = 4;
const bit<32> STAT_ROUTED_SPINE = 5;
const bit<32> STAT_ROUTED_LEAF = 6;
const bit<32> STAT_REPLY_STAMPED = 7;
const bit<32> STAT_LOAD_RECORDED = 8;
const bit<32> STAT_UPDATE_STALE = 9;

/* Load windows: 2^20 us (~1.05 s) of ingress_global_timestamp. */
#define LOAD_WINDOW_SHIFT 20

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ip4_t;

header ethernet_t {
    mac_t   dstAddr;
    mac_t   srcAddr;
    bit<16> etherType;
}

header ipv4_t {
    bit<4>  version;
    bit<4>  ihl;
    bit<8>  diffserv;
    bit<16> totalLen;
    bit<16> identification;
    bit<3>  flags;
    bit<13> fragOffset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdrChecksum;
    ip4_t   srcAddr;
    ip4_t   dstAddr;
}

header udp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<16> length;
    bit<16> checksum;
}

header distcache_t {
    bit<8>   version;
    bit<8>   op;
    bit<8>   flags;
    bit<8>   status;
    bit<32>  seq;
    bit<128> key;
    bit<8>   target;
    bit<8>   served_by;
    bit<8>   spine_id;
    bit<8>   leaf_id;
    bit<32>  spine_load;
    bit<32>  leaf_load;
    bit<16>  vlen;
    bit<8>   nchunks;
    bit<8>   reserved;
}

header dc_value_t {
    bit<128> chunk;
}

struct headers_t {
    ethernet_t            ethernet;
    ipv4_t                ipv4;
    udp_t                 udp;
    distcache_t           dc;
    dc_value_t[MAX_CHUNKS] vals;
}

struct metadata_t {
    bit<8>  switch_id;
    bit<8>  role;
    bit<8>  mechanism;
    bit<8>  port_kind;
    bit<8>  chunks_left;
    bit<1>  cache_hit;
    bit<16> slot;
    bit<16> version;
    bit<16> bucket;
    bit<8>  spine_cand;
    bit<8>  leaf_cand;
    bit<32> load;
    bit<1>  routed;
    bit<1>  dropped;
}

error {
    DcBadVersion,
    DcBadChunks
}

#endif
