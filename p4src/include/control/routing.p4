/* Cache choice at the client-rack leaf (paper §3.2, power of two choices).
 *
 * A read from a client has two candidate caches: the spine its key's h0
 * bucket maps to (spine_partition, written by the controller; crc32 of the
 * key modulo SPINE_BUCKETS, as distcache/hashing.py h0) and the leaf of the
 * rack that stores it (storage_rack, by destination address).  The read is
 * marked for the less loaded one, by the loads DcTelemetry recorded in this
 * or the previous window (older ones count as 0); ties go by the low bit of
 * the request's seq, which varies per request.  Reads for a spine go up to
 * it (cache_route); reads for a storage leaf follow the normal route, which
 * passes through it.  The mechanism decides which candidates exist:
 * DistCache both, CachePartition the spine only, NoCache none.
 */
#ifndef DC_ROUTING_P4
#define DC_ROUTING_P4

control DcRouting(inout headers_t hdr,
                  inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {

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

    action route_to_cache(bit<48> dmac, bit<9> port) {
        meta.routed = 1;
        meta.nhop_dmac = dmac;
        meta.nhop_port = port;
    }

    table cache_route {
        key = { hdr.dc.target: exact; }
        actions = { route_to_cache; NoAction; }
        default_action = NoAction();
        size = MAX_SWITCHES;
    }

    apply {
        if (meta.op == OP_GET && meta.port_kind == PORT_CLIENT) {
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
                if (meta.epoch - e <= 1) { peer_load.read(spine_load, (bit<32>)meta.spine_cand); }
            }
            if (meta.leaf_cand != 0) {
                peer_load_epoch.read(e, (bit<32>)meta.leaf_cand);
                if (meta.epoch - e <= 1) { peer_load.read(leaf_load, (bit<32>)meta.leaf_cand); }
            }
            if (meta.spine_cand != 0 && meta.leaf_cand != 0) {
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
        }
    }
}

#endif
