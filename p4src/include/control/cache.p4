/* Cache lookup and reply (cache switches).  cache_lookup maps a key to its
 * slot and the version the slot's entry was installed with; the entry's tag
 * is cache_epoch ++ version, and the entry is valid only while
 * cache_valid[slot] holds that same tag, which only DcCoherence writes.
 * cache_epoch is the agent's: an agent that cannot vouch for the versions it
 * handed out before (it lost its state) raises it, and every tag the
 * registers hold stops matching at once, so no slot can hit with a value
 * written for an earlier entry.  A read answered here becomes its own reply.  The
 * switch the client rack chose (hdr.dc.target) may answer, and so may the
 * storage-rack leaf a read targeted at a spine reaches (the spine did not
 * answer it: not cached there, invalid, or over its meter), as NetCache's
 * rack cache would; any other switch forwards the read.  cache_meter bounds the reads answered here (the
 * topology's switch_rate, as the paper's testbed rate-limited its cache
 * switches): a read it colours red goes on to the server as a miss.
 *
 * No torn value (a target that runs packets on several CPUs at once, eBPF: the registers have no @atomic).
 * A write is INVALIDATE (cache_valid := 0, then cache_inval_seq := its seq) and then UPDATE (vlen and
 * chunks, then cache_valid := tag), a seqlock's writer.  A hit reads cache_inval_seq, then cache_valid,
 * then the value, then cache_inval_seq again, and answers only if the two seqs are equal.  A chunk a new
 * write wrote means its INVALIDATE moved the seq before: either after the first read (the seqs differ), or
 * before it -- then the valid tag read after it is the new UPDATE's, written after its last chunk, so the
 * whole value is the new one.  A torn read goes on to the server as a miss.  (The stores and loads keep their
 * program order on x86-64; each register access is a helper call the compiler does not move across.)
 */
#ifndef DC_CACHE_P4
#define DC_CACHE_P4

control DcCache(inout headers_t hdr,
                inout metadata_t meta,
                inout dc_io_t io)
               (DC_REGISTER_T(bit<48>) cache_valid, DC_REGISTER_T(bit<16>) cache_vlen,
                DC_REGISTER_T(bit<128>) cache_value, DC_REGISTER_T(bit<64>) cache_inval_seq,
                DC_COUNTER_T dc_stats) {

    DC_COUNTER(CACHE_SLOTS) cache_hits;  /* per slot: the agent evicts the least hit */
    DC_METER(1) cache_meter;  /* reads answered from cache; unconfigured: no limit */

    action cache_hit(bit<16> slot, bit<16> version) {
        meta.cache_hit = 1;
        meta.slot = slot;
        meta.version = version;
    }

    action cache_miss() {
        meta.cache_hit = 0;
    }

    table cache_lookup {
        key = { hdr.dc.digest: exact @name("dc_key"); }
        actions = { cache_hit; cache_miss; }
        default_action = cache_miss();
        size = CACHE_SLOTS;
    }

    action set_cache_epoch(bit<32> epoch) {
        meta.cache_epoch = epoch;
    }

    table cache_epoch {
        actions = { set_cache_epoch; }
        default_action = set_cache_epoch(0);
        size = 1;
    }

    apply {
        cache_epoch.apply();
        cache_lookup.apply();
        bit<48> tag = meta.cache_epoch ++ meta.version;
        bool spine_missed = meta.role == ROLE_STORAGE_LEAF && hdr.dc.target != 0 && hdr.dc.target <= MAX_SPINE_ID;
        if (meta.op == OP_GET && (hdr.dc.target == meta.switch_id || spine_missed)) {
            bit<48> valid = 0;
            bit<64> seq_before = 0;
            if (meta.cache_hit == 1) {
                DC_READ(cache_inval_seq, seq_before, (bit<32>)meta.slot);
                DC_READ(cache_valid, valid, (bit<32>)meta.slot);
            }
            bool red = false;
            if (meta.cache_hit == 1 && valid != 0 && valid == tag) {
                DC_METER_RED(cache_meter, 0, red);
                if (red) {
                    dc_stats.count(STAT_HIT_METERED);
                }
            }
            bit<64> seq_after = 0;
            if (meta.cache_hit == 1 && valid != 0 && valid == tag && !red) {
                /* ---- the value, read between two reads of the write version ---- */
                bit<16> vlen;
                DC_READ(cache_vlen, vlen, (bit<32>)meta.slot);
                bit<8> n = (bit<8>)((vlen + 15) >> 4);
                bit<32> base = (bit<32>)meta.slot * MAX_CHUNKS;
                hdr.dc.vlen = (bit<32>)vlen;
                hdr.dc.nchunks = n;
                hdr.vals[0].setInvalid(); hdr.vals[1].setInvalid();
                hdr.vals[2].setInvalid(); hdr.vals[3].setInvalid();
                hdr.vals[4].setInvalid(); hdr.vals[5].setInvalid();
                hdr.vals[6].setInvalid(); hdr.vals[7].setInvalid();
                if (n > 0) { hdr.vals[0].setValid(); DC_READ(cache_value, hdr.vals[0].chunk, base + 0); }
                if (n > 1) { hdr.vals[1].setValid(); DC_READ(cache_value, hdr.vals[1].chunk, base + 1); }
                if (n > 2) { hdr.vals[2].setValid(); DC_READ(cache_value, hdr.vals[2].chunk, base + 2); }
                if (n > 3) { hdr.vals[3].setValid(); DC_READ(cache_value, hdr.vals[3].chunk, base + 3); }
                if (n > 4) { hdr.vals[4].setValid(); DC_READ(cache_value, hdr.vals[4].chunk, base + 4); }
                if (n > 5) { hdr.vals[5].setValid(); DC_READ(cache_value, hdr.vals[5].chunk, base + 5); }
                if (n > 6) { hdr.vals[6].setValid(); DC_READ(cache_value, hdr.vals[6].chunk, base + 6); }
                if (n > 7) { hdr.vals[7].setValid(); DC_READ(cache_value, hdr.vals[7].chunk, base + 7); }
                DC_READ(cache_inval_seq, seq_after, (bit<32>)meta.slot);
                if (seq_after != seq_before) {
                    /* a write began: no value, the read goes on as the client sent it, less any value it carried */
                    hdr.dc.vlen = 0;
                    hdr.dc.nchunks = 0;
                    hdr.vals[0].setInvalid(); hdr.vals[1].setInvalid();
                    hdr.vals[2].setInvalid(); hdr.vals[3].setInvalid();
                    hdr.vals[4].setInvalid(); hdr.vals[5].setInvalid();
                    hdr.vals[6].setInvalid(); hdr.vals[7].setInvalid();
                    n = 0;
                    dc_stats.count(STAT_READ_TORN);
                } else {
                    /* ---- hit: the request becomes the reply ---- */
                    hdr.dc.op = OP_GET_REPLY;
                    hdr.dc.status = STATUS_OK;
                    hdr.dc.flags = hdr.dc.flags | FLAG_CACHED;
                    hdr.dc.served_by = meta.switch_id;
                    dc_reflect(hdr.ipv4, hdr.udp);
                    meta.served = 1;
                    cache_hits.count((bit<32>)meta.slot);
                    dc_stats.count(STAT_READ_HIT);
                }
                /* a GET carries no value and no arguments (DcValidation): only its key rides behind */
                hdr.udp.length = 8 + DC_HEADER_LEN + ((bit<16>)n << 4) + hdr.dc.klen;
                hdr.ipv4.totalLen = 20 + hdr.udp.length;
            }
            if (meta.served == 0) {
                dc_stats.count(STAT_READ_MISS);
            }
        }
    }
}

#endif
