/* Coherence (paper §4.3): INVALIDATE (phase 1) and UPDATE (phase 2 or cache
 * population) from the key's storage server, on cache switches.
 *
 * An entry's tag is cache_epoch ++ version (DcCache).  cache_inval[slot] and
 * cache_inval_seq[slot] record the newest INVALIDATE the slot's entry has seen
 * as {tag, armed} and {seq}: two registers, since p4c-ebpf computes on no field
 * wider than 64 bits (the record is 113); one packet writes both.  The seq is
 * also DcCache's write version (pipeline.p4 shares it): an INVALIDATE clears
 * cache_valid, then moves the seq, before its UPDATE writes a byte of value.
 * An UPDATE writes the value and makes the entry valid only if the record is
 * armed and the UPDATE follows that very INVALIDATE: same entry (tag) and same
 * write (seq).  An INVALIDATE always clears the entry (clearing is always
 * safe) and moves the record of the same entry forward only when it is not
 * older than it (serial-number arithmetic on seq, RFC 1982), so a duplicated
 * old INVALIDATE+UPDATE pair arriving after a newer write can neither re-arm
 * nor re-validate the old value.  A new tenure of the slot (another key, or
 * this key after an eviction) is armed only by the entry's own populate: an
 * INVALIDATE flagged POPULATE, addressed to this switch, carrying this entry's
 * tag (epoch in spine_load, version in leaf_load).  Any other INVALIDATE
 * reaching a new entry is still recorded, unarmed: it could be an old write's,
 * delayed or duplicated past the insertion (its UPDATE must not validate), or a
 * newer write's that passed before the populate did -- then the populate, or a
 * duplicate of an older write, arriving after it is older than the record and
 * cannot arm the entry with a value that write replaced (model/: the
 * "unarmed floor").
 *
 * The switch the message is addressed to (hdr.dc.target) is the far end of
 * the coherence path and turns it back to the server as the acknowledgement.
 */
#ifndef DC_COHERENCE_P4
#define DC_COHERENCE_P4

control DcCoherence(inout headers_t hdr,
                    inout metadata_t meta,
                    inout dc_io_t io)
                   (DC_REGISTER_T(bit<48>) cache_valid, DC_REGISTER_T(bit<16>) cache_vlen,
                    DC_REGISTER_T(bit<128>) cache_value, DC_REGISTER_T(bit<64>) cache_inval_seq,
                    DC_COUNTER_T dc_stats) {

    DC_REGISTER(bit<49>, CACHE_SLOTS) cache_inval;  /* tag ++ armed of the newest INVALIDATE of the entry */

    apply {
        bit<8> op = meta.op;
        if (op == OP_INVALIDATE || op == OP_UPDATE) {
            if (meta.cache_hit == 1) {
                bit<32> slot = (bit<32>)meta.slot;
                bit<48> tag = meta.cache_epoch ++ meta.version;
                bit<49> last;
                bit<64> last_seq;
                DC_READ(cache_inval, last, slot);
                DC_READ(cache_inval_seq, last_seq, slot);
                bool same_tenure = last[48:1] == tag;
                bool armed = (last & 1) == 1;  /* not last[0:0]: p4c-ebpf reads it as (u8)last (actions.p4) */
                if (op == OP_INVALIDATE) {
                    DC_WRITE(cache_valid, 48, slot, 0);
                    bit<64> ahead = hdr.dc.seq - last_seq;  /* seq >= last_seq in serial arithmetic */
                    bool own_populate = (hdr.dc.flags & FLAG_POPULATE) != 0 && hdr.dc.target == meta.switch_id
                                        && hdr.dc.spine_load == meta.cache_epoch
                                        && hdr.dc.leaf_load == (bit<32>)meta.version;
                    if (!same_tenure || ahead[63:63] == 0) {
                        bit<1> arm = (own_populate || (same_tenure && armed)) ? 1w1 : 1w0;
                        DC_WRITE(cache_inval, 49, slot, tag ++ arm);
                        DC_WRITE(cache_inval_seq, 64, slot, hdr.dc.seq);
                        dc_stats.count(STAT_INVALIDATE);
                    } else {
                        dc_stats.count(STAT_INVALIDATE_STALE);
                    }
                } else if (same_tenure && armed && last_seq == hdr.dc.seq && hdr.dc.vlen <= MAX_CACHEABLE) {
                    bit<32> base = slot * MAX_CHUNKS;
                    DC_WRITE(cache_vlen, 16, slot, (bit<16>)hdr.dc.vlen);
                    if (hdr.vals[0].isValid()) { DC_WRITE(cache_value, 128, base + 0, hdr.vals[0].chunk); }
                    if (hdr.vals[1].isValid()) { DC_WRITE(cache_value, 128, base + 1, hdr.vals[1].chunk); }
                    if (hdr.vals[2].isValid()) { DC_WRITE(cache_value, 128, base + 2, hdr.vals[2].chunk); }
                    if (hdr.vals[3].isValid()) { DC_WRITE(cache_value, 128, base + 3, hdr.vals[3].chunk); }
                    if (hdr.vals[4].isValid()) { DC_WRITE(cache_value, 128, base + 4, hdr.vals[4].chunk); }
                    if (hdr.vals[5].isValid()) { DC_WRITE(cache_value, 128, base + 5, hdr.vals[5].chunk); }
                    if (hdr.vals[6].isValid()) { DC_WRITE(cache_value, 128, base + 6, hdr.vals[6].chunk); }
                    if (hdr.vals[7].isValid()) { DC_WRITE(cache_value, 128, base + 7, hdr.vals[7].chunk); }
                    DC_WRITE(cache_valid, 48, slot, tag);
                    dc_stats.count(STAT_UPDATE);
                } else {
                    dc_stats.count(STAT_UPDATE_STALE);
                }
            }
            if (hdr.dc.target == meta.switch_id) {
                hdr.dc.op = op | OP_REPLY_BIT;
                dc_reflect(hdr.ipv4, hdr.udp);
                dc_stats.count(STAT_REFLECTED);
            }
        }
    }
}

#endif
