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
 * CacheReplication has every live spine hold the hot keys: a read goes to
 * the spine in replica_spine's slot (bucket + seq) mod REPLICA_SLOTS, which
 * the controller fills round-robin with the live spines, so successive reads
 * spread evenly over them.  Hybrid does that for the keys in replicated_keys
 * (the few too hot for two copies, chosen by the controller) and DistCache
 * for the others.
 *
 * A client's retry does not take the path its lost copy took: it carries its
 * attempt number in flags (FLAG_ATTEMPT; the same seq, so the shim still
 * recognises a retried write).  Attempt 0 is routed as above; attempt 1 goes
 * to the cache the choice above did not pick (a replicated key: the next
 * replica slot's spine; a key with one candidate: no cache); attempt 2 and
 * later go past every cache (target 0) to the storage server, and
 * DcForwarding sends each attempt through another transit spine.  A client
 * can only pick among paths a router could pick anyway: no new way in.
 *
 * A spine the leaf found dead (control/liveness.p4) is no candidate: a read whose spine is dead goes
 * to its storage leaf (DistCache, Hybrid's other keys) or, with no other candidate (CachePartition),
 * to no cache: the server.  A replicated key's read goes to the spine after its slot's (replica_spine
 * names both; the controller deals the live spines round-robin) if that one is alive, else to no
 * cache.  Each such read counts as READ_REROUTED; the retry rules above apply to the candidates left,
 * and DcForwarding keeps transit off dead spines too.
 */
#ifndef DC_ROUTING_P4
#define DC_ROUTING_P4

control DcRouting(inout headers_t hdr,
                  inout metadata_t meta,
                  inout dc_io_t io)
                 (DC_REGISTER_T(bit<32>) peer_load, DC_REGISTER_T(bit<32>) peer_load_epoch, DC_COUNTER_T dc_stats,
                  DC_LIVENESS_REG_PARAMS) {
    DcSpineExcluded(DC_LIVENESS_REGS) cand_excluded;
    DcSpineExcluded(DC_LIVENESS_REGS) alt_excluded;

    DC_CRC32_UNIT  /* what DC_CRC32 hashes with, where the architecture has it as an object */

    action set_spine_candidate(bit<8> spine_id) {
        meta.spine_cand = spine_id;
    }

    table spine_partition {
        key = { meta.bucket: exact @name("bucket"); }
        actions = { set_spine_candidate; NoAction; }
        default_action = NoAction();
        size = SPINE_BUCKETS;
    }

    action set_replica_spines(bit<8> spine_id, bit<8> alt_spine_id) {
        meta.spine_cand = spine_id;
        meta.replica_alt = alt_spine_id;
    }

    table replica_spine {
        key = { meta.replica_slot: exact @name("replica_slot"); }
        actions = { set_replica_spines; NoAction; }
        default_action = NoAction();
        size = REPLICA_SLOTS;
    }

    action replicate() {
        meta.replicated = 1;
    }

    table replicated_keys {
        key = { hdr.dc.digest: exact @name("dc_key"); }
        actions = { replicate; NoAction; }
        default_action = NoAction();
        size = MAX_REPLICATED_KEYS;
    }

    action set_leaf_candidate(bit<8> leaf_id) {
        meta.leaf_cand = leaf_id;
    }

    table storage_rack {
        key = { hdr.ipv4.dstAddr: lpm @name("ipv4_dst"); }
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
        key = { hdr.dc.target: exact @name("dc_target"); }
        actions = { route_to_cache; NoAction; }
        default_action = NoAction();
        size = MAX_SWITCHES;
    }

    apply {
        if (meta.op == OP_GET && meta.port_kind == PORT_CLIENT) {
            bit<8> attempt = (hdr.dc.flags & FLAG_ATTEMPT) >> (bit<5>)FLAG_ATTEMPT_SHIFT;
            hdr.dc.target = 0;
            if (meta.mechanism == MECH_REPLICATION) {
                meta.replicated = 1;
            } else if (meta.mechanism == MECH_HYBRID) {
                replicated_keys.apply();
            }
            if (meta.mechanism != MECH_NOCACHE) {
                DC_CRC32(meta.bucket, 16, SPINE_BUCKETS, { hdr.dc.digest });
            }
            if (meta.replicated == 1) {
                bit<16> spread = meta.bucket + hdr.dc.seq[15:0] + (bit<16>)attempt;
                meta.replica_slot = (bit<8>)(spread & (REPLICA_SLOTS - 1));
                replica_spine.apply();
            } else if (meta.mechanism == MECH_DISTCACHE || meta.mechanism == MECH_PARTITION
                       || meta.mechanism == MECH_HYBRID) {
                spine_partition.apply();
            }
            if (meta.replicated == 0 && (meta.mechanism == MECH_DISTCACHE || meta.mechanism == MECH_HYBRID)) {
                storage_rack.apply();
            }
            if (meta.spine_cand != 0) {
                bit<48> now = io.now;
                bit<1> dead;
                cand_excluded.apply(meta, meta.spine_cand, now, dead);
                if (dead == 1) {
                    bit<8> instead = 0;  /* another live replica spine, else no spine at all */
                    if (meta.replicated == 1 && meta.replica_alt != 0) {
                        bit<1> alt_dead;
                        alt_excluded.apply(meta, meta.replica_alt, now, alt_dead);
                        if (alt_dead == 0) {
                            instead = meta.replica_alt;
                        }
                    }
                    meta.spine_cand = instead;
                    dc_stats.count(STAT_READ_REROUTED);
                }
            }
            bit<32> spine_load = 0;
            bit<32> leaf_load = 0;
            bit<32> e;
            if (meta.spine_cand != 0) {
                DC_READ(peer_load_epoch, e, (bit<32>)meta.spine_cand);
                if (meta.epoch - e <= 1) { DC_READ(peer_load, spine_load, (bit<32>)meta.spine_cand); }
            }
            if (meta.leaf_cand != 0) {
                DC_READ(peer_load_epoch, e, (bit<32>)meta.leaf_cand);
                if (meta.epoch - e <= 1) { DC_READ(peer_load, leaf_load, (bit<32>)meta.leaf_cand); }
            }
            bit<8> chosen = 0;  /* the power of two choices' pick */
            bit<8> other = 0;  /* the candidate it did not pick, if there are two */
            if (meta.spine_cand != 0 && meta.leaf_cand != 0) {
                if (spine_load < leaf_load || (spine_load == leaf_load && (hdr.dc.seq & 1) == 0)) {
                    chosen = meta.spine_cand;
                    other = meta.leaf_cand;
                } else {
                    chosen = meta.leaf_cand;
                    other = meta.spine_cand;
                }
            } else if (meta.spine_cand != 0) {
                chosen = meta.spine_cand;
            } else if (meta.leaf_cand != 0) {
                chosen = meta.leaf_cand;
            }
            if (attempt == 0 || (attempt == 1 && meta.replicated == 1)) {
                hdr.dc.target = chosen;  /* a replicated key's retry: already the next slot's spine */
            } else if (attempt == 1) {
                hdr.dc.target = other;
            }  /* attempt 2 and later: no cache, straight to the storage server */
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
