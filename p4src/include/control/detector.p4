/* Heavy-hitter detection (paper §4.3) on cache switches: reads of keys this
 * switch is a designated cache of (a spine: keys of the h0 buckets it owns,
 * hh_buckets; a storage-rack leaf: keys stored in its rack, hh_racks) that are
 * not in its cache table are counted in a Count-Min sketch; once a key's
 * estimate in the current window reaches the threshold it is reported to the
 * switch's agent with a digest, at most once per window (a Bloom filter of
 * the keys reported in the window).  The report says how far into the window
 * the estimate was reached: the threshold alone says nothing of a key's rate
 * (every key reported has the threshold's count), and the agent compares the
 * rate with its cached keys' hits before it evicts one for the key.
 *
 * Windows age in the data plane: every Count-Min cell holds {window, count}
 * and every Bloom cell the window it was set in (plus one, so 0 is "never"),
 * so a cell last written in an earlier window reads as empty; the control
 * plane never writes a register.  Cells saturate at 0xFFFF.  The threshold
 * and window length come from detector_config.
 */
#ifndef DC_DETECTOR_P4
#define DC_DETECTOR_P4

control DcDetector(inout headers_t hdr,
                   inout metadata_t meta,
                   inout dc_io_t io)
                  (DC_COUNTER_T dc_stats) {

    DC_CRC32_UNIT  /* what DC_CRC32 hashes with, where the architecture has it as an object */

    /* the sketch's rows and the filter's, each in one register (size.p4): a program compiled for the kernel
     * may use at most 64 BPF maps, and every register is one */
    DC_REGISTER(bit<32>, HH_CM_ROWS * HH_CM_WIDTH) hh_cm;  /* window(16) ++ count(16) */
    DC_REGISTER(bit<16>, HH_BLOOM_ROWS * HH_BLOOM_WIDTH) hh_bloom;  /* window + 1 it was set in */

    action set_detector(bit<16> threshold, bit<8> window_shift) {
        meta.hh_threshold = threshold;
        meta.hh_window_shift = window_shift;
    }

    table detector_config {
        actions = { set_detector; }
        default_action = set_detector(HH_THRESHOLD, HH_WINDOW_SHIFT);
        size = 1;
    }

    action designate() {
        meta.hh_designated = 1;
    }

    table hh_buckets {
        key = { meta.bucket: exact @name("bucket"); }
        actions = { designate; NoAction; }
        default_action = NoAction();
        size = SPINE_BUCKETS;
    }

    table hh_racks {
        key = { hdr.ipv4.dstAddr: lpm @name("ipv4_dst"); }
        actions = { designate; NoAction; }
        default_action = NoAction();
        size = MAX_SWITCHES;
    }

    apply {
        if (meta.op == OP_GET && meta.cache_hit == 0) {
            if (meta.role == ROLE_SPINE) {
                DC_CRC32(meta.bucket, 16, SPINE_BUCKETS, { hdr.dc.digest });
                hh_buckets.apply();
            } else {
                hh_racks.apply();
            }
        }
        if (meta.hh_designated == 1) {
            detector_config.apply();
            meta.hh_salt1 = 1; meta.hh_salt2 = 2; meta.hh_salt3 = 3; meta.hh_salt4 = 4;
            meta.hh_salt5 = 5; meta.hh_salt6 = 6; meta.hh_salt7 = 7;
            bit<48> windows;
            dc_shr48(io.now, meta.hh_window_shift, windows);
            bit<16> window = (bit<16>)windows;
            bit<32> i0; bit<32> i1; bit<32> i2; bit<32> i3;
            DC_CRC32(i0, 32, HH_CM_WIDTH, { hdr.dc.digest, meta.hh_salt1 });
            DC_CRC32(i1, 32, HH_CM_WIDTH, { hdr.dc.digest, meta.hh_salt2 });
            DC_CRC32(i2, 32, HH_CM_WIDTH, { hdr.dc.digest, meta.hh_salt3 });
            DC_CRC32(i3, 32, HH_CM_WIDTH, { hdr.dc.digest, meta.hh_salt4 });
            bit<32> c0; bit<32> c1; bit<32> c2; bit<32> c3;
            i1 = i1 + HH_CM_WIDTH; i2 = i2 + 2 * HH_CM_WIDTH; i3 = i3 + 3 * HH_CM_WIDTH;
            DC_READ(hh_cm, c0, i0); DC_READ(hh_cm, c1, i1); DC_READ(hh_cm, c2, i2); DC_READ(hh_cm, c3, i3);
            bit<16> n0 = 0; bit<16> n1 = 0; bit<16> n2 = 0; bit<16> n3 = 0;
            if (c0[31:16] == window) { n0 = c0[15:0]; }
            if (c1[31:16] == window) { n1 = c1[15:0]; }
            if (c2[31:16] == window) { n2 = c2[15:0]; }
            if (c3[31:16] == window) { n3 = c3[15:0]; }
            if (n0 != 0xFFFF) { n0 = n0 + 1; }
            if (n1 != 0xFFFF) { n1 = n1 + 1; }
            if (n2 != 0xFFFF) { n2 = n2 + 1; }
            if (n3 != 0xFFFF) { n3 = n3 + 1; }
            DC_WRITE(hh_cm, 32, i0, window ++ n0); DC_WRITE(hh_cm, 32, i1, window ++ n1);
            DC_WRITE(hh_cm, 32, i2, window ++ n2); DC_WRITE(hh_cm, 32, i3, window ++ n3);
            bit<16> estimate = n0;
            if (n1 < estimate) { estimate = n1; }
            if (n2 < estimate) { estimate = n2; }
            if (n3 < estimate) { estimate = n3; }
            dc_stats.count(STAT_HH_COUNTED);
            if (estimate >= meta.hh_threshold) {
                bit<32> b0; bit<32> b1; bit<32> b2;
                DC_CRC32(b0, 32, HH_BLOOM_WIDTH, { hdr.dc.digest, meta.hh_salt5 });
                DC_CRC32(b1, 32, HH_BLOOM_WIDTH, { hdr.dc.digest, meta.hh_salt6 });
                DC_CRC32(b2, 32, HH_BLOOM_WIDTH, { hdr.dc.digest, meta.hh_salt7 });
                bit<16> s0; bit<16> s1; bit<16> s2;
                b1 = b1 + HH_BLOOM_WIDTH; b2 = b2 + 2 * HH_BLOOM_WIDTH;
                DC_READ(hh_bloom, s0, b0); DC_READ(hh_bloom, s1, b1); DC_READ(hh_bloom, s2, b2);
                bit<16> tag = window + 1;
                if (s0 != tag || s1 != tag || s2 != tag) {
                    DC_WRITE(hh_bloom, 16, b0, tag); DC_WRITE(hh_bloom, 16, b1, tag); DC_WRITE(hh_bloom, 16, b2, tag);
                    bit<48> now = io.now;
                    bit<48> start;
                    dc_shl48(windows, meta.hh_window_shift, start);
                    bit<48> elapsed = now - start;
                    /* field by field: p4c-ebpf writes a struct expression holding the 128-bit key as a C
                     * compound literal that copies the key array's address, not its bytes */
                    hh_digest_t report;
                    report.key = hdr.dc.digest;
                    report.estimate = estimate;
                    report.switch_id = meta.switch_id;
                    report.elapsed_us = elapsed;
                    DC_DIGEST(hh_digest_t, DIGEST_HOT_KEY, report);
                    dc_stats.count(STAT_HH_REPORTED);
                }
            }
        }
    }
}

#endif
