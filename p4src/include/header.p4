/* Headers, metadata and parser errors shared by every control.
 *
 * distcache_t mirrors distcache/wire.py HEADER_FIELDS field for field; a
 * test holds the two against each other.  See docs/protocol.md.  What follows
 * the header is chunks | key | args | raw value: a switch parses the chunks
 * (vals), and the key and the rest ride behind them as payload.
 */
#ifndef DC_HEADER_P4
#define DC_HEADER_P4

#include "size.p4"

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ip4_t;

/* What the controller's P4Runtime PacketOut carries ahead of the frame: the spine a probe is for
 * (DcProbe).  Parsed only from CPU_PORT; never emitted. */
@controller_header("packet_out")
header packet_out_t {
    bit<8> spine_id;
}

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
    bit<64>  seq;
    bit<128> digest;  /* the key's keyed digest (wire.key_digest): what a switch indexes; the key rides behind */
    bit<8>   target;
    bit<8>   served_by;
    bit<8>   spine_id;
    bit<8>   leaf_id;
    bit<32>  spine_load;
    bit<32>  leaf_load;
    bit<32>  vlen;
    bit<32>  alen;
    bit<16>  klen;
    bit<8>   nchunks;
    bit<8>   reserved;
}

header dc_value_t {
    bit<128> chunk;
}

struct headers_t {
    packet_out_t           packet_out;
    ethernet_t             ethernet;
    ipv4_t                 ipv4;
    udp_t                  udp;
    distcache_t            dc;
    dc_value_t[MAX_CHUNKS] vals;
}

/* What a cache switch reports of a hot key it does not cache (DcDetector). */
struct hh_digest_t {
    bit<128> key;
    bit<16>  estimate;
    bit<8>   switch_id;
    bit<48>  elapsed_us;  /* how far into the window the estimate was reached: the agent's rate */
}

/* How a spine's death looked from a client leaf, sent when the spine is heard from again (DcLiveness). */
struct spine_death_t {
    bit<8>  switch_id;   /* the leaf */
    bit<8>  spine_id;
    bit<32> detect_us;   /* from the last packet heard from it to the moment it was found dead */
    bit<32> silent_us;   /* from the last packet heard from it to the first one after (this one) */
}

struct metadata_t {
    /* DcConfig: what this switch is, what the ingress port faces, the load window */
    bit<8>  switch_id;
    bit<8>  role;
    bit<8>  mechanism;
    bit<8>  port_kind;
    bit<8>  window_shift;
    bit<32> epoch;
    /* DcFrameParser: the status of the parse were it to fail here (PARSE_*), and whether it ended well
     * (the top's parser sets parsed after DcFrameParser returns: an error leaves it 0); DC_PARSE_STATUS */
    bit<8>  chunks_left;
    bit<8>  parse_fail;
    bit<1>  parsed;
    /* DcValidation */
    bit<1>  dropped;
    bit<8>  op;            /* the op as the packet arrived */
    /* DcLiveness (leaves) */
    bit<8>  from_spine;    /* port_spine: the spine whose port the packet came in by (0: none) */
    bit<32> dead_after;    /* liveness_config, in us: the threshold's floor */
    bit<32> dead_after_max;  /* and its cap */
    bit<8>  peak_decay_shift; /* the recent peak wait loses 1 us per 2^this us */
    bit<32> hold;
    bit<32> probe_skip;    /* a probe for a spine heard from within this many us is not sent (DcProbe) */
    bit<64> fenced;        /* bit s: the controller failed spine s over; excluded until it clears the bit */
    /* DcProbe */
    bit<1>  consumed;      /* the packet ends here (a probe reply the leaf counted) */
    /* DcCache */
    bit<1>  cache_hit;     /* the key is in cache_lookup (valid or not) */
    bit<16> slot;
    bit<16> version;
    bit<32> cache_epoch;   /* cache_epoch table: the agent's epoch; the entry's tag is cache_epoch ++ version */
    bit<1>  served;        /* this switch answered the read from its cache */
    /* DcTelemetry */
    bit<32> load;
    /* DcDetector */
    bit<1>  hh_designated;  /* this switch is a designated cache of the key */
    bit<16> hh_threshold;
    bit<8>  hh_window_shift;
    /* the salts that make the detector's seven CRC32s independent (1..7; metadata, not constants: p4c-ebpf
     * hashes a constant by its address) */
    bit<8>  hh_salt1;
    bit<8>  hh_salt2;
    bit<8>  hh_salt3;
    bit<8>  hh_salt4;
    bit<8>  hh_salt5;
    bit<8>  hh_salt6;
    bit<8>  hh_salt7;
    /* DcRouting (and DcDetector on a spine) */
    bit<16> bucket;
    bit<8>  spine_cand;
    bit<8>  leaf_cand;
    bit<1>  replicated;     /* the read goes to any live spine (CacheReplication, Hybrid's hottest keys) */
    bit<8>  replica_slot;
    bit<8>  replica_alt;    /* the spine after the replica slot's (replica_spine): used if that one is dead */
    /* DcForwarding: the route is transit over the spines (ECMP) */
    bit<1>  transit;
    bit<8>  transit_slot;
    bit<8>  transit_id;     /* the slot's spine, and the next one in the round-robin (transit_spine) */
    bit<8>  alt_id;
    mac_t   alt_dmac;
    port_t  alt_port;
    /* next hop chosen by DcRouting or DcForwarding, applied by DcForwarding */
    bit<1>  routed;
    mac_t   nhop_dmac;
    port_t  nhop_port;
    /* a register's index and value where an architecture needs them addressable (PSA: DC_READ, DC_WRITE) */
    bit<32>  dc_index;
    bit<16>  dc_w16;
    bit<32>  dc_w32;
    bit<64>  dc_w64;
    bit<48>  dc_w48;
    bit<49>  dc_w49;
    bit<128> dc_w128;
    /* a digest, for an architecture that sends it from its deparser (PSA: DC_DIGEST of psa/arch.p4) */
    hh_digest_t   dc_hh_digest_t;
    bit<1>        dc_hh_digest_t_send;
    spine_death_t dc_spine_death_t;
    bit<1>        dc_spine_death_t_send;
}

/* The packet as the architecture presents it to the controls, and what they ask of it: each top
 * (p4src/v1model/, p4src/psa/) fills it from its architecture's metadata before DcIngress's controls run
 * and applies it after, so no control names an architecture's metadata. */
struct dc_io_t {
    port_t  ingress_port;
    bit<48> now;           /* when the packet arrived, in microseconds */
    bit<8>  parse_status;  /* how the parser ended: PARSE_* (DC_PARSE_STATUS; a C struct holds no P4 error) */
    port_t  egress_port;   /* where it goes, unless dropped */
    bit<1>  drop;
}

error {
    DcBadVersion,
    DcBadChunks,
    Ipv4BadIhl
}

/* io.parse_status, from what DcFrameParser left in meta (each top's DC_IO_IN uses it): not from the
 * architecture's parser error, since p4c-ebpf compares two `error` values as a 4-byte memcmp of its 1-byte
 * ParserError_t, and its equality as their difference (so neither == nor != can be trusted there). */
#define DC_PARSE_STATUS(IO) \
    if (meta.parsed == 1) { IO.parse_status = PARSE_OK; } else { IO.parse_status = meta.parse_fail; }

#endif
