/* Constants of the DistCache data plane.
 *
 * `make constants` writes their Python twin, distcache/p4defines.py (the
 * counter indexes as DropReason and Stat); tests/test_p4_constants.py fails
 * when it is stale, and holds the values Python owns equal to these: the wire
 * format (distcache/wire.py: version, ports, ops, statuses, flags), and the
 * roles, port kinds and mechanisms the controller writes (distcache/cluster.py).
 */
#ifndef DC_DEFINE_P4
#define DC_DEFINE_P4

const bit<16> TYPE_IPV4 = 0x0800;
const bit<8>  PROTO_UDP = 17;
const bit<4>  IPV4_MIN_IHL = 5;

/* ---- wire format (docs/protocol.md) ---- */
const bit<16> DC_PORT = 8888;
const bit<8>  DC_VERSION = 2;
const bit<16> DC_HEADER_LEN = 52;
const bit<32> MAX_CACHEABLE = 128;
const bit<32> MAX_VALUE = 536870912;  /* 512 MB, Redis' proto-max-bulk-len (wire.MAX_VALUE) */

const bit<8> OP_GET = 0x01;
const bit<8> OP_PUT = 0x02;
const bit<8> OP_DELETE = 0x03;
const bit<8> OP_EXEC = 0x04;  /* any single-key command: to the key's shim, never cached */
const bit<8> OP_GET_REPLY = 0x81;
const bit<8> OP_PUT_REPLY = 0x82;
const bit<8> OP_DELETE_REPLY = 0x83;
const bit<8> OP_EXEC_REPLY = 0x84;
const bit<8> OP_INVALIDATE = 0x10;
const bit<8> OP_UPDATE = 0x11;
const bit<8> OP_INVALIDATE_ACK = 0x90;
const bit<8> OP_UPDATE_ACK = 0x91;
const bit<8> OP_PROBE = 0x20;  /* liveness: controller -> leaf (packet-out) -> one spine, which reflects it */
const bit<8> OP_PROBE_REPLY = 0xA0;
const bit<8> OP_REPLY_BIT = 0x80;

/* Reply statuses (distcache.wire.Status).  Switches only ever set STATUS_OK (a cache hit); the
 * others are the storage server's, listed so the wire format is defined here once: @noWarn. */
const bit<8> STATUS_OK = 0;
@noWarn("unused") const bit<8> STATUS_NOT_FOUND = 1;
@noWarn("unused") const bit<8> STATUS_ERROR = 2;
@noWarn("unused") const bit<8> STATUS_TOO_LARGE = 3;
@noWarn("unused") const bit<8> STATUS_BAD_REQUEST = 4;
@noWarn("unused") const bit<8> STATUS_BUSY = 5;
@noWarn("unused") const bit<8> STATUS_STREAM = 6;
@noWarn("unused") const bit<8> STATUS_WRONG_TYPE = 7;

const bit<8> FLAG_CACHED = 0x01;
const bit<8> FLAG_POPULATE = 0x02;  /* an INVALIDATE that fills a new entry of `target`; tag in the load fields */
const bit<8> FLAG_ATTEMPT = 0x1C;  /* a request's attempt number (0 = first copy): retries take other paths */
const bit<8> FLAG_ATTEMPT_SHIFT = 2;  /* the attempt number's lowest bit (wire.ATTEMPT_SHIFT) */
@noWarn("unused") const bit<8> FLAG_STREAM = 0x20;  /* came on the stream path (hosts only) */

/* ---- what the controller tells a switch (distcache/cluster.py) ---- */
@noWarn("unused") const bit<8> ROLE_NONE = 0;  /* not configured yet: switch_config has no entry, meta.role stays 0 */
const bit<8> ROLE_SPINE = 1;
const bit<8> ROLE_STORAGE_LEAF = 2;
const bit<8> ROLE_CLIENT_LEAF = 3;
const bit<8> MAX_SPINE_ID = 63;  /* spines have ids 1..63 (distcache.cluster.MAX_SPINES) */
const bit<9> CPU_PORT = 510;  /* packet-out enters here (BMv2 --cpu-port; 511 is its drop port) */
/* A leaf's probe port: frames its local probe source writes, shaped as packet-outs (packet_out header,
 * then the frame), so the parser takes them as it takes CPU_PORT's.  It stands for a hardware switch's
 * packet generator: a probe costs a raw write into a veth instead of a P4Runtime message through two
 * gRPC stacks (p4rt/probes.py; the probe source's rounds were a third of a loaded 2-core host). */
const bit<9> PROBE_PORT = 509;  /* a leaf's local probe source writes here (packet_out header, frame) */

const bit<8> PORT_FABRIC = 0;
const bit<8> PORT_CLIENT = 1;
const bit<8> PORT_STORAGE = 2;

const bit<8> MECH_NOCACHE = 0;
const bit<8> MECH_DISTCACHE = 1;
const bit<8> MECH_REPLICATION = 2;
const bit<8> MECH_PARTITION = 3;
const bit<8> MECH_HYBRID = 4;

/* ---- how the parser ended (dc_io_t.parse_status) ---- */
const bit<8> PARSE_OK = 0;
const bit<8> PARSE_TRUNCATED = 1;
const bit<8> PARSE_BAD_VERSION = 2;
const bit<8> PARSE_BAD_CHUNKS = 3;
const bit<8> PARSE_OTHER = 4;

/* ---- indexes of the dc_drops counter (p4names.DropReason) ---- */
const bit<32> DROP_TRUNCATED = 0;
const bit<32> DROP_BAD_VERSION = 1;
const bit<32> DROP_BAD_CHUNKS = 2;
const bit<32> DROP_UNKNOWN_OP = 3;
const bit<32> DROP_UNTRUSTED = 4;
const bit<32> DROP_NO_ROUTE = 5;
const bit<32> DROP_PARSER_OTHER = 6;
const bit<32> DROP_NOT_IPV4 = 7;
/* 8 is not used: it counted DistCache messages behind IPv4 options before options became payload (parser.p4) */
const bit<32> DROP_SPOOFED = 9;
const bit<32> DROP_TTL_EXPIRED = 10;  /* arrived with TTL 0 or 1: forwarding would take it to 0 */
const bit<32> DROP_LOOP = 11;  /* would go back the way it came (valley-free routing) */
const bit<32> DROP_PROBE = 12;  /* a probe or probe reply from where none may come (or a packet-out that is no probe) */

/* ---- indexes of the dc_stats counter (p4names.Stat) ---- */
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
const bit<32> STAT_INVALIDATE_STALE = 10;
const bit<32> STAT_HH_COUNTED = 11;
const bit<32> STAT_HH_REPORTED = 12;
const bit<32> STAT_HIT_METERED = 13;  /* a valid copy, not served: over the cache meter's rate */
const bit<32> STAT_READ_REROUTED = 14;  /* a client's read whose spine candidate was dead (DcLiveness) */
const bit<32> STAT_TRANSIT_REROUTED = 15;  /* transit sent up the slot's other spine: its own was dead */
const bit<32> STAT_PROBE_REFLECTED = 16;  /* a spine answered a leaf's PROBE */
const bit<32> STAT_PROBE_SKIPPED = 17;  /* a leaf's probe not sent: its spine was heard from within probe_skip */
const bit<32> STAT_READ_TORN = 18;  /* a valid copy, not served: a write began while it was read (DcCache) */

/* ---- digests (receiver ids of v1model digest()) ---- */
const bit<32> DIGEST_HOT_KEY = 1;
const bit<32> DIGEST_SPINE_DEATH = 2;

#endif
