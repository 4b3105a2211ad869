/* Liveness of the spines, learned by each leaf in its data plane (issue 16).
 *
 * A leaf keeps three registers per spine id (and four more for its threshold, below) (LIVENESS_SPINES cells; which port faces which spine
 * is the controller's port_spine table):
 *
 *   spine_heard[s]  the last time any packet arrived on the port facing s;
 *   spine_asked[s]  the time of the oldest PROBE sent to s not followed by anything heard from s
 *                   (DcProbe sets it when it sends a probe and nothing is outstanding: asked <= heard);
 *   spine_hold[s]   excluded while heard < hold: the end of the hold time of s's last death, written
 *                   when s is heard from again.
 *
 * s is dead when asked > heard and now - asked > threshold(s): a probe went unanswered, and nothing
 * else came from s either, for that long.  Only probes count as asks: data sent up to a spine does
 * not, so with no probe source (the controller stopped) asked never moves past heard and nothing is ever excluded, however idle
 * or silent a spine is.  Any packet refreshes heard, so a probe lost under load is covered by the
 * data that keeps arriving.
 *
 * The threshold adapts to how long s takes to answer.  Each time a packet from s ends a wait
 * (asked > heard), the wait w = now - asked is a sample.  Two estimators, the larger wins:
 *
 *   - the mean, as TCP's retransmission timeout (RFC 6298): spine_gap keeps the smoothed wait x 8 and
 *     spine_gapvar its mean deviation x 4 (samples capped at dead_after_max):
 *         gap8 += w - gap8/8        var4 += |w - gap8/8| - var4/4        (gap8/8 the old smoothed wait)
 *     rto = gap8/8 + var4 (= smoothed + 4 x deviation);
 *   - the recent peak: spine_peak keeps the longest wait s ended lately (spine_peak_at: when), losing
 *     1 us every 2^peak_decay_shift us since (PEAK_DECAY_SHIFT, 10: about 1 ms a second);
 *     a wait at least as long as the decayed peak replaces it.
 *     Waits of dead_after_max or more are not samples of it: that was a death (a crash, a drained
 *     spine), not a slow answer, and it must not keep the next death waiting.
 *
 *   threshold(s) = max(rto, peak + peak/2) within [dead_after, dead_after_max]
 *
 * (DEAD_AFTER_US 30 ms and DEAD_AFTER_MAX_US 250 ms unless liveness_config says otherwise).  Why both:
 * under load a wait mostly ends at once (data keeps coming from s), so the mean stays near 0 and its
 * deviation, with a gain of 1/4 per sample, forgets a 40 ms stall within ten probes; a loaded
 * emulation host stalls a spine for 30-60 ms every few seconds (queueing behind its own traffic, a
 * starved process), and each stall was a false death.  The peak remembers such a wait for tens of seconds,
 * and a silence half again as long as any wait seen lately is still a death, so a spine that answers
 * slowly now and then is waited for a little longer than its slowest recent answer, and one that always
 * answers at once keeps dead_after.  The decay is measured up to asked (not now), so the threshold of
 * a wait going on is fixed.  A wait that ended a death is a sample too (capped for the mean): a spine
 * that keeps being found dead and answering is one the leaf waits longer for.  Shifts and adds only,
 * in 32 bits: samples are at most dead_after_max (under a minute), so var4 < 2^28 and gap8 < 2^29.
 *
 * Hysteresis: a spine found dead stays excluded until it is heard from at least HOLD_US after it was
 * found dead.  The instant it was found dead needs no register: it is asked + threshold, the moment
 * the rule above became true, whether or not a packet looked at it then.  The only event that ends
 * the rule is a packet heard from s, so DcLiveness checks the rule there, with the old heard, and
 * if s was dead writes hold = asked + threshold + hold time; from then on s is excluded while
 * heard < hold, i.e. until a packet arrives from it at or after the end of the hold time.  A new
 * death later writes a later hold.  hold starts at 0, so a spine never dead is never held.  Each
 * register is written by one kind of packet (heard: any from s; asked: a probe to s; hold: the first
 * packet from s after a death; gap and gapvar: the packet from s that ends a wait, which is also the
 * only one that can change the threshold of a wait going on), and the decision is a pure function of them and the clock, so
 * the same packets give the same routes on every target.
 *
 * Each death is counted (spine_deaths[s]) and, at a client leaf, reported to its primary (the
 * controller) with a spine_death_t digest when s is heard from again: how long after the last packet
 * heard from s it was found dead (the detection time in the data plane: when asked + threshold
 * passed) and how long s was silent.  A death still going on is not counted yet.  A storage leaf
 * (probed by its agent) counts its deaths but reports none: its agent takes only hot-key digests,
 * and BMv2 keeps one digest per packet, the last one called -- a GET coming down to a storage leaf
 * could carry both a death and a hot-key report, and the detector runs later.
 *
 * Timestamps need not arrive in order: BMv2 stamps a frame in the thread that reads it from its port and a
 * packet-out in the gRPC thread that injects it, and both wait for the ingress queue, so a spine's packet
 * stamped before a probe can be processed after it.  Such a packet does not answer the probe (it
 * predates it: the wait goes on, and now - asked would wrap to ~2^48, a false death), and heard never
 * goes back in time (an older stamp would reopen a wait already answered).  Hence now > asked below and
 * in DcSpineExcluded (written as now > asked + threshold), and heard = max(heard, now).
 *
 * Routing (DcRouting, DcForwarding) asks DcSpineExcluded about a spine before it sends a read or
 * transit traffic there, and then takes the other path the controller's tables name; a leaf never
 * routes to a spine those tables do not already route to (docs/protocol.md, "Liveness").  Timestamps
 * are v1model's ingress_global_timestamp, in microseconds (softswitch keeps the same unit).
 *
 * The fence: liveness_config's `fenced` mask (bit s: spine s) excludes a spine whatever the registers
 * say, until the controller clears the bit.  It is the controller's, not the data plane's: the first
 * step of a failover (one default write per client leaf, ahead of the partition's entries), lifted only
 * by the plan that routes reads to the spine again, after its flush.  A hold ends when the spine is
 * heard from; a fence does not, so a spine the shims stopped invalidating is never read again by mistake.
 */
#ifndef DC_LIVENESS_P4
#define DC_LIVENESS_P4

/* The registers described above, as DcIngress declares them and passes them to the controls that use
 * them (include/pipeline.p4: shared state lives in DcIngress, since p4c-ebpf keeps no register outside a
 * control). */
#define DC_LIVENESS_REG_PARAMS \
    DC_REGISTER_T(bit<48>) spine_heard, DC_REGISTER_T(bit<48>) spine_asked, DC_REGISTER_T(bit<48>) spine_hold, \
    DC_REGISTER_T(bit<32>) spine_gap, DC_REGISTER_T(bit<32>) spine_gapvar, DC_REGISTER_T(bit<32>) spine_peak, \
    DC_REGISTER_T(bit<48>) spine_peak_at
#define DC_LIVENESS_REGS spine_heard, spine_asked, spine_hold, spine_gap, spine_gapvar, spine_peak, spine_peak_at

/* spine_peak of `spine` as it stands at time `at`: less 1 us per 2^meta.peak_decay_shift us since it was set.
 * The helpers take meta for its liveness_config fields and for DC_READ's staging (psa/arch.p4). */
control DcSpinePeak(inout metadata_t meta, in bit<8> spine, in bit<48> at, out bit<32> peak)
                   (DC_REGISTER_T(bit<32>) spine_peak, DC_REGISTER_T(bit<48>) spine_peak_at) {
    apply {
        bit<32> p;
        bit<48> p_at;
        DC_READ(spine_peak, p, (bit<32>)spine);
        DC_READ(spine_peak_at, p_at, (bit<32>)spine);
        bit<48> lost = 0;
        if (at > p_at) {
            dc_shr48(at - p_at, meta.peak_decay_shift, lost);
        }
        peak = lost >= (bit<48>)p ? 0 : p - (bit<32>)lost;
    }
}

/* How long spine `spine` may leave the probe it was asked at `asked` unanswered before it is dead (see above). */
control DcSpineThreshold(inout metadata_t meta, in bit<8> spine, in bit<48> asked, out bit<48> threshold)
                        (DC_REGISTER_T(bit<32>) spine_gap, DC_REGISTER_T(bit<32>) spine_gapvar,
                         DC_REGISTER_T(bit<32>) spine_peak, DC_REGISTER_T(bit<48>) spine_peak_at) {
    DcSpinePeak(spine_peak, spine_peak_at) peak_now;

    apply {
        bit<32> gap8;
        bit<32> var4;
        bit<32> peak;
        DC_READ(spine_gap, gap8, (bit<32>)spine);
        DC_READ(spine_gapvar, var4, (bit<32>)spine);
        peak_now.apply(meta, spine, asked, peak);
        bit<32> rto = (gap8 >> 3) + var4;
        bit<32> margin = peak >> 1;
        bit<32> t = peak + margin;
        t = t > rto ? t : rto;
        t = t > meta.dead_after_max ? meta.dead_after_max : t;
        t = t < meta.dead_after ? meta.dead_after : t;
        threshold = (bit<48>)t;
    }
}

/* Whether routing must leave spine `spine` out now (see above). */
control DcSpineExcluded(inout metadata_t meta, in bit<8> spine, in bit<48> now, out bit<1> excluded)
                       (DC_LIVENESS_REG_PARAMS) {
    DcSpineThreshold(spine_gap, spine_gapvar, spine_peak, spine_peak_at) threshold_of;

    apply {
        bit<48> heard;
        bit<48> asked;
        bit<48> hold;
        bit<48> threshold;
        DC_READ(spine_heard, heard, (bit<32>)spine);
        DC_READ(spine_asked, asked, (bit<32>)spine);
        DC_READ(spine_hold, hold, (bit<32>)spine);
        threshold_of.apply(meta, spine, asked, threshold);
        /* (two halves: p4c-ebpf shifts by at most 5 bits) */
        bit<32> half = spine >= 32 ? meta.fenced[63:32] : meta.fenced[31:0];
        bit<32> fence = (half >> spine[4:0]) & 1;
        excluded = ((asked > heard && now > asked + threshold) || heard < hold || fence == 1) ? 1w1 : 1w0;
    }
}

control DcLiveness(inout headers_t hdr,
                   inout metadata_t meta,
                   inout dc_io_t io)
                  (DC_LIVENESS_REG_PARAMS) {
    DcSpineThreshold(spine_gap, spine_gapvar, spine_peak, spine_peak_at) threshold_of;
    DcSpinePeak(spine_peak, spine_peak_at) peak_now;

    action set_port_spine(bit<8> spine_id) {
        meta.from_spine = spine_id;
    }

    /* a leaf's ports to the spines */
    table port_spine {
        key = { io.ingress_port: exact @name("ingress_port"); }
        actions = { set_port_spine; NoAction; }
        default_action = NoAction();
        size = MAX_PORTS;
    }

    DC_COUNTER(LIVENESS_SPINES) spine_deaths;  /* deaths that ended, per spine */

    action set_liveness(bit<32> dead_after, bit<32> dead_after_max, bit<32> hold, bit<8> peak_decay_shift,
                        bit<32> probe_skip, bit<64> fenced) {
        meta.dead_after = dead_after;
        meta.dead_after_max = dead_after_max;
        meta.peak_decay_shift = peak_decay_shift;
        meta.hold = hold;
        meta.probe_skip = probe_skip;
        meta.fenced = fenced;
    }

    table liveness_config {
        actions = { set_liveness; }
        default_action = set_liveness(DEAD_AFTER_US, DEAD_AFTER_MAX_US, HOLD_US, PEAK_DECAY_SHIFT, PROBE_SKIP_US, 0);
        size = 1;
    }

    /* Every packet, before DcValidation may drop it: whatever arrives by a spine's port came
     * through that spine (no host can reach a leaf's spine port but through the spine). */
    apply {
        if (meta.role == ROLE_STORAGE_LEAF || meta.role == ROLE_CLIENT_LEAF) {
            liveness_config.apply();
            if (port_spine.apply().hit && meta.from_spine != 0) {
                bit<32> s = (bit<32>)meta.from_spine;
                bit<48> now = io.now;
                bit<48> heard;
                bit<48> asked;
                bit<48> threshold;
                DC_READ(spine_heard, heard, s);
                DC_READ(spine_asked, asked, s);
                if (asked > heard && now > asked) {  /* a wait ends (only then is the threshold needed) */
                    threshold_of.apply(meta, meta.from_spine, asked, threshold);
                    bit<48> waited = now - asked;
                    if (waited > threshold) {
                        /* it was dead until now: held until hold time after it was found dead */
                        DC_WRITE(spine_hold, 48, s, asked + threshold + (bit<48>)meta.hold);
                        spine_deaths.count(s);
                        if (meta.role == ROLE_CLIENT_LEAF) {
                            bit<48> detect = asked + threshold - heard;
                            bit<48> silent = now - heard;
                            DC_DIGEST(spine_death_t, DIGEST_SPINE_DEATH, { meta.switch_id, meta.from_spine, (bit<32>)detect, (bit<32>)silent });
                        }
                    }
                    /* the wait is a sample of how fast s answers */
                    bit<32> w = waited > (bit<48>)meta.dead_after_max ? meta.dead_after_max : (bit<32>)waited;
                    bit<32> gap8;
                    bit<32> var4;
                    DC_READ(spine_gap, gap8, s);
                    DC_READ(spine_gapvar, var4, s);
                    bit<32> smoothed = gap8 >> 3;
                    bit<32> dev = w > smoothed ? w - smoothed : smoothed - w;
                    DC_WRITE(spine_gap, 32, s, gap8 - smoothed + w);
                    DC_WRITE(spine_gapvar, 32, s, var4 - (var4 >> 2) + dev);
                    /* and, unless it was a death of dead_after_max or more, of the recent peak */
                    bit<32> peak;
                    peak_now.apply(meta, meta.from_spine, now, peak);
                    if (waited < (bit<48>)meta.dead_after_max && (bit<32>)waited >= peak) {
                        DC_WRITE(spine_peak, 32, s, (bit<32>)waited);
                        DC_WRITE(spine_peak_at, 48, s, now);
                    }
                }
                DC_WRITE(spine_heard, 48, s, now > heard ? now : heard);
            }
        }
    }
}

#endif
