/* DistCache: one v1model program for all three roles.
 *
 * The controller writes the role (spine cache, storage-rack leaf cache,
 * client-rack leaf router), the switch id and the caching mechanism into
 * switch_config, and what each port faces into port_kind.  Cache values,
 * lengths, valid tags and loads live in registers written only by packets;
 * the control plane only writes tables (BMv2's P4Runtime server cannot
 * write registers).
 *
 * softswitch/pipeline.py runs the same pipeline; tests/test_p4info_parity.py
 * holds its P4Info against the declarations here.
 */
#include <core.p4>
#include <v1model.p4>

#include "headers.p4"
#include "parser.p4"

control DcIngress(inout headers_t hdr,
                  inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {

    /* ---- cache state (per slot) ---- */
    register<bit<16>>(CACHE_SLOTS) cache_valid;       /* version tag of the valid entry, 0 = invalid */
    register<bit<32>>(CACHE_SLOTS) cache_seq;         /* seq of the last invalidate */
    register<bit<16>>(CACHE_SLOTS) cache_vlen;
    register<bit<128>>(CACHE_VALUE_CELLS) cache_value; /* slot * MAX_CHUNKS + chunk */
    /* ---- own load (cache switches) ---- */
    register<bit<32>>(1) load_count;
    register<bit<32>>(1) load_epoch;
    /* ---- loads of cache switches seen in replies (client-rack leaf) ---- */
    register<bit<32>>(MAX_SWITCHES) peer_load;
    register<bit<32>>(MAX_SWITCHES) peer_load_epoch;

    counter(CACHE_SLOTS, CounterType.packets) cache_hits;
    counter(N_DROP_REASONS, CounterType.packets) dc_drops;
    counter(N_STATS, CounterType.packets) dc_stats;

    bit<32> now_epoch;

    action drop() {
        mark_to_drop(standard_metadata);
        meta.dropped = 1;
    }

    action set_config(bit<8> switch_id, bit<8> role, bit<8> mechanism) {
        meta.switch_id = switch_id;
        meta.role = role;
        meta.mechanism = mechanism;
    }

    table switch_config {
        actions = { set_config; NoAction; }
        default_action = NoAction();
        size = 1;
    }

    action set_port_kind(bit<8> kind) {
        meta.port_kind = kind;
    }

    table port_kind {
        key = { standard_metadata.ingress_port: exact; }
        actions = { set_port_kind; NoAction; }
        default_action = NoAction();
        size = MAX_PORTS;
    }

    action set_nhop(bit<48> dmac, bit<9> port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dmac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
        meta.routed = 1;
    }

    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr: lpm; }
        actions = { set_nhop; drop; }
        default_action = drop();
        size = MAX_ROUTES;
    }

    /* Client-rack leaf: reads whose target is a spine go up to that spine. */
    table cache_route {
        key = { hdr.dc.target: exact; }
        actions = { set_nhop; NoAction; }
        default_action = NoAction();
        size = MAX_SWITCHES;
    }

    action cache_hit(bit<16> slot, bit<16> version) {
        meta.cache_hit = 1;
        meta.slot = slot;
        meta.version = version;
    }

    action cache_miss() {
        meta.cache_hit = 0;
    }

    table cache_lookup {
        key = { hdr.dc.key: exact; }
        actions = { cache_hit; cache_miss; }
        default_action = cache_miss();
        size = CACHE_SLOTS;
    }

    action set_spine_candidate(bit<8> spine_id) {
        meta.spine_cand = spine_id;
    }

    table spine_partition {
        key = { meta.bucket: exact; }
        actions = { set_spine_candidate; NoAction; }
        default_action = NoAction();
        size = SPINE_BUCKETS;
    }

    action set_leaf_candidate(bit<8> leaf_id) {
        meta.leaf_cand = leaf_id;
    }

    table storage_rack {
        key = { hdr.ipv4.dstAddr: lpm; }
        actions = { set_leaf_candidate; NoAction; }
        default_action = NoAction();
        size = MAX_SWITCHES;
    }

    @hidden action drop_reason(bit<32> reason) {
        dc_drops.count(reason);
        mark_to_drop(standard_metadata);
        meta.dropped = 1;
    }

    @hidden action stamp_spine_load() {
        hdr.dc.spine_id = meta.switch_id;
        hdr.dc.spine_load = meta.load;
    }

    @hidden action stamp_leaf_load() {
        hdr.dc.leaf_id = meta.switch_id;
        hdr.dc.leaf_load = meta.load;
    }

    /* Turn the packet around: it becomes a reply to its sender. */
    @hidden action reflect() {
        ip4_t ip = hdr.ipv4.srcAddr;
        hdr.ipv4.srcAddr = hdr.ipv4.dstAddr;
        hdr.ipv4.dstAddr = ip;
        bit<16> p = hdr.udp.srcPort;
        hdr.udp.srcPort = hdr.udp.dstPort;
        hdr.udp.dstPort = p;
        hdr.ipv4.ttl = 64;
    }

    apply {
        meta.dropped = 0;
        meta.routed = 0;
        meta.load = 0;
        now_epoch = (bit<32>)(standard_metadata.ingress_global_timestamp >> LOAD_WINDOW_SHIFT);
        switch_config.apply();
        port_kind.apply();

        /* ---- malformed input: count and drop ---- */
        if (standard_metadata.parser_error == error.PacketTooShort) {
            drop_reason(DROP_TRUNCATED);
        } else if (standard_metadata.parser_error == error.DcBadVersion) {
            drop_reason(DROP_BAD_VERSION);
        } else if (standard_metadata.parser_error == error.DcBadChunks) {
            drop_reason(DROP_BAD_CHUNKS);
        } else if (standard_metadata.parser_error != error.NoError) {
            drop_reason(DROP_PARSER_OTHER);
        } else if (!hdr.ipv4.isValid()) {
            drop_reason(DROP_NOT_IPV4);
        } else if (hdr.dc.isValid()) {
            bit<8> op = hdr.dc.op;
            bool known = op == OP_GET || op == OP_PUT || op == OP_DELETE
                || op == OP_GET_REPLY || op == OP_PUT_REPLY || op == OP_DELETE_REPLY
                || op == OP_INVALIDATE || op == OP_UPDATE
                || op == OP_INVALIDATE_ACK || op == OP_UPDATE_ACK;
            bit<16> want_chunks = 0;
            if (hdr.dc.vlen <= MAX_CACHEABLE) {
                want_chunks = (hdr.dc.vlen + 15) >> 4;
            }
            if (!known) {
                drop_reason(DROP_UNKNOWN_OP);
            } else if (hdr.dc.vlen > MAX_VALUE_LEN || (bit<16>)hdr.dc.nchunks != want_chunks) {
                drop_reason(DROP_BAD_CHUNKS);
            } else if ((op == OP_INVALIDATE || op == OP_UPDATE) && meta.port_kind != PORT_STORAGE) {
                /* only storage servers may write caches */
                drop_reason(DROP_UNTRUSTED);
            } else if ((op == OP_INVALIDATE_ACK || op == OP_UPDATE_ACK) && meta.port_kind == PORT_CLIENT) {
                drop_reason(DROP_UNTRUSTED);
            }
        }

        if (meta.dropped == 0 && hdr.dc.isValid()) {
            bit<8> op = hdr.dc.op;
            /* every DistCache packet may be rewritten: UDP checksum 0 (IPv4 allows it) */
            hdr.udp.checksum = 0;

            if (meta.role == ROLE_SPINE || meta.role == ROLE_STORAGE_LEAF) {
                cache_lookup.apply();
                bool targeted_read = op == OP_GET && hdr.dc.target == meta.switch_id;
                bool is_reply = op == OP_GET_REPLY || op == OP_PUT_REPLY || op == OP_DELETE_REPLY;
                if (targeted_read || is_reply) {
                    /* load = reads targeted here in the current window; a new window starts at 0 */
                    bit<32> epoch;
                    bit<32> count;
                    load_epoch.read(epoch, 0);
                    load_count.read(count, 0);
                    if (epoch != now_epoch) {
                        count = 0;
                        load_epoch.write(0, now_epoch);
                    }
                    if (targeted_read) {
                        count = count + 1;
                    }
                    load_count.write(0, count);
                    meta.load = count;
                }
                if (targeted_read) {
                    bit<16> valid = 0;
                    if (meta.cache_hit == 1) {
                        cache_valid.read(valid, (bit<32>)meta.slot);
                    }
                    if (meta.cache_hit == 1 && valid != 0 && valid == meta.version) {
                        /* ---- cache hit: the packet becomes the reply ---- */
                        bit<16> vlen;
                        cache_vlen.read(vlen, (bit<32>)meta.slot);
                        bit<8> n = (bit<8>)((vlen + 15) >> 4);
                        bit<32> base = (bit<32>)meta.slot * MAX_CHUNKS;
                        hdr.dc.op = OP_GET_REPLY;
                        hdr.dc.status = STATUS_OK;
                        hdr.dc.flags = hdr.dc.flags | FLAG_CACHED;
                        hdr.dc.served_by = meta.switch_id;
                        hdr.dc.vlen = vlen;
                        hdr.dc.nchunks = n;
                        hdr.vals[0].setInvalid(); hdr.vals[1].setInvalid();
                        hdr.vals[2].setInvalid(); hdr.vals[3].setInvalid();
                        hdr.vals[4].setInvalid(); hdr.vals[5].setInvalid();
                        hdr.vals[6].setInvalid(); hdr.vals[7].setInvalid();
                        if (n > 0) { hdr.vals[0].setValid(); cache_value.read(hdr.vals[0].chunk, base + 0); }
                        if (n > 1) { hdr.vals[1].setValid(); cache_value.read(hdr.vals[1].chunk, base + 1); }
                        if (n > 2) { hdr.vals[2].setValid(); cache_value.read(hdr.vals[2].chunk, base + 2); }
                        if (n > 3) { hdr.vals[3].setValid(); cache_value.read(hdr.vals[3].chunk, base + 3); }
                        if (n > 4) { hdr.vals[4].setValid(); cache_value.read(hdr.vals[4].chunk, base + 4); }
                        if (n > 5) { hdr.vals[5].setValid(); cache_value.read(hdr.vals[5].chunk, base + 5); }
                        if (n > 6) { hdr.vals[6].setValid(); cache_value.read(hdr.vals[6].chunk, base + 6); }
                        if (n > 7) { hdr.vals[7].setValid(); cache_value.read(hdr.vals[7].chunk, base + 7); }
                        hdr.udp.length = 8 + DC_HEADER_LEN + ((bit<16>)n << 4);
                        hdr.ipv4.totalLen = 20 + hdr.udp.length;
                        if (meta.role == ROLE_SPINE) { stamp_spine_load(); } else { stamp_leaf_load(); }
                        reflect();
                        cache_hits.count((bit<32>)meta.slot);
                        dc_stats.count(STAT_READ_HIT);
                    } else {
                        dc_stats.count(STAT_READ_MISS);
                    }
                } else if (op == OP_INVALIDATE || op == OP_UPDATE) {
                    if (meta.cache_hit == 1) {
                        bit<32> slot = (bit<32>)meta.slot;
                        if (op == OP_INVALIDATE) {
                            cache_valid.write(slot, 0);
                            cache_seq.write(slot, hdr.dc.seq);
                            dc_stats.count(STAT_INVALIDATE);
                        } else {
                            /* phase 2 applies only after the invalidate of the same write */
                            bit<32> last;
                            cache_seq.read(last, slot);
                            if (last == hdr.dc.seq && hdr.dc.vlen <= MAX_CACHEABLE) {
                                bit<32> base = slot * MAX_CHUNKS;
                                cache_vlen.write(slot, hdr.dc.vlen);
                                if (hdr.dc.nchunks > 0) { cache_value.write(base + 0, hdr.vals[0].chunk); }
                                if (hdr.dc.nchunks > 1) { cache_value.write(base + 1, hdr.vals[1].chunk); }
                                if (hdr.dc.nchunks > 2) { cache_value.write(base + 2, hdr.vals[2].chunk); }
                                if (hdr.dc.nchunks > 3) { cache_value.write(base + 3, hdr.vals[3].chunk); }
                                if (hdr.dc.nchunks > 4) { cache_value.write(base + 4, hdr.vals[4].chunk); }
                                if (hdr.dc.nchunks > 5) { cache_value.write(base + 5, hdr.vals[5].chunk); }
                                if (hdr.dc.nchunks > 6) { cache_value.write(base + 6, hdr.vals[6].chunk); }
                                if (hdr.dc.nchunks > 7) { cache_value.write(base + 7, hdr.vals[7].chunk); }
                                cache_valid.write(slot, meta.version);
                                dc_stats.count(STAT_UPDATE);
                            } else {
                                dc_stats.count(STAT_UPDATE_STALE);
                            }
                        }
                    }
                    if (hdr.dc.target == meta.switch_id) {
                        /* the far end of the coherence path: acknowledge */
                        hdr.dc.op = hdr.dc.op | 0x80;
                        reflect();
                        dc_stats.count(STAT_REFLECTED);
                    }
                } else if (is_reply) {
                    if (meta.role == ROLE_SPINE) { stamp_spine_load(); } else { stamp_leaf_load(); }
                    dc_stats.count(STAT_REPLY_STAMPED);
                }
            } else if (meta.role == ROLE_CLIENT_LEAF) {
                if (op == OP_GET && meta.port_kind == PORT_CLIENT) {
                    /* ---- power of two choices between the key's two caches ---- */
                    hdr.dc.target = 0;
                    if (meta.mechanism == MECH_DISTCACHE || meta.mechanism == MECH_PARTITION) {
                        hash(meta.bucket, HashAlgorithm.crc32, (bit<16>)0, { hdr.dc.key }, (bit<32>)SPINE_BUCKETS);
                        spine_partition.apply();
                    }
                    if (meta.mechanism == MECH_DISTCACHE) {
                        storage_rack.apply();
                    }
                    bit<32> spine_load = 0;
                    bit<32> leaf_load = 0;
                    bit<32> e;
                    if (meta.spine_cand != 0) {
                        peer_load_epoch.read(e, (bit<32>)meta.spine_cand);
                        if (now_epoch - e <= 1) { peer_load.read(spine_load, (bit<32>)meta.spine_cand); }
                    }
                    if (meta.leaf_cand != 0) {
                        peer_load_epoch.read(e, (bit<32>)meta.leaf_cand);
                        if (now_epoch - e <= 1) { peer_load.read(leaf_load, (bit<32>)meta.leaf_cand); }
                    }
                    if (meta.spine_cand != 0 && meta.leaf_cand != 0) {
                        /* ties are broken by the request's seq, which varies per query */
                        if (spine_load < leaf_load || (spine_load == leaf_load && hdr.dc.seq[0:0] == 0)) {
                            hdr.dc.target = meta.spine_cand;
                        } else {
                            hdr.dc.target = meta.leaf_cand;
                        }
                    } else if (meta.spine_cand != 0) {
                        hdr.dc.target = meta.spine_cand;
                    } else if (meta.leaf_cand != 0) {
                        hdr.dc.target = meta.leaf_cand;
                    }
                    if (hdr.dc.target != 0 && hdr.dc.target == meta.spine_cand) {
                        cache_route.apply();
                        dc_stats.count(STAT_ROUTED_SPINE);
                    } else if (hdr.dc.target != 0) {
                        dc_stats.count(STAT_ROUTED_LEAF);
                    }
                } else if (op == OP_GET_REPLY || op == OP_PUT_REPLY || op == OP_DELETE_REPLY) {
                    /* ---- in-network telemetry: remember the loads carried back ---- */
                    if (hdr.dc.spine_id != 0) {
                        peer_load.write((bit<32>)hdr.dc.spine_id, hdr.dc.spine_load);
                        peer_load_epoch.write((bit<32>)hdr.dc.spine_id, now_epoch);
                    }
                    if (hdr.dc.leaf_id != 0) {
                        peer_load.write((bit<32>)hdr.dc.leaf_id, hdr.dc.leaf_load);
                        peer_load_epoch.write((bit<32>)hdr.dc.leaf_id, now_epoch);
                    }
                    dc_stats.count(STAT_LOAD_RECORDED);
                }
            }
        }

        if (meta.dropped == 0 && meta.routed == 0) {
            ipv4_lpm.apply();
            if (meta.dropped == 1) {
                dc_drops.count(DROP_NO_ROUTE);
            }
        }
    }
}

control DcEgress(inout headers_t hdr,
                 inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply { }
}

V1Switch(DcParser(), DcVerifyChecksum(), DcIngress(), DcEgress(), DcComputeChecksum(), DcDeparser()) main;
