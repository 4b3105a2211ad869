/* Liveness of the spines, learned by each leaf in its data plane (issue 16).
 *
 * A leaf keeps three registers per spine id (and two more for its threshold, below) (LIVENESS_SPINES cells; which port faces which spine
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
 * The threshold adapts to how fast s answers, the way TCP's retransmission timeout does (RFC 6298):
 * each time a packet from s ends a wait (asked > heard), the wait w = now - asked is a sample, capped
 * at dead_after_max, of two more registers per spine -- spine_gap, the smoothed wait times 8, and
 * spine_gapvar, its mean deviation times 4:
 *
 *   gap8 += w - gap8/8        var4 += |w - gap8/8| - var4/4        (gap8/8 the old smoothed wait)
 *   threshold(s) = gap8/8 + var4  (= smoothed + 4 x deviation), kept within [dead_after, dead_after_max]
 *
 * (DEAD_AFTER_US 30 ms and DEAD_AFTER_MAX_US 250 ms unless liveness_config says otherwise).  A spine
 * answering within a few ms keeps its threshold at dead_after; one a starved host or a busy link makes
 * answer in 40-100 ms, as BMv2 with its per-packet logs does on a loaded machine, raises it past its
 * waits, so it is not taken for dead for being slow.  A wait that ended a death is a sample too (capped):
 * a spine that keeps being found dead and answering is one the leaf waits longer for.  Shifts and adds
 * only, in 32 bits: samples are at most dead_after_max (under a minute), so var4 < 2^28 and gap8 < 2^29.
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
 * Routing (DcRouting, DcForwarding) asks spine_excluded() about a spine before it sends a read or
 * transit traffic there, and then takes the other path the controller's tables name; a leaf never
 * routes to a spine those tables do not already route to (docs/protocol.md, "Liveness").  Timestamps
 * are v1model's ingress_global_timestamp, in microseconds (softswitch keeps the same unit).
 */
#ifndef DC_LIVENESS_P4
#define DC_LIVENESS_P4

register<bit<48>>(LIVENESS_SPINES) spine_heard;
register<bit<48>>(LIVENESS_SPINES) spine_asked;
register<bit<48>>(LIVENESS_SPINES) spine_hold;
register<bit<32>>(LIVENESS_SPINES) spine_gap;     /* smoothed wait for an answer, us x 8 */
register<bit<32>>(LIVENESS_SPINES) spine_gapvar;  /* its mean deviation, us x 4 */

/* How long spine `spine` may leave a probe unanswered before it is dead (see above). */
@hidden action spine_threshold(in bit<8> spine, in bit<32> dead_after, in bit<32> dead_max, out bit<48> threshold) {
    bit<32> gap8;
    bit<32> var4;
    spine_gap.read(gap8, (bit<32>)spine);
    spine_gapvar.read(var4, (bit<32>)spine);
    bit<32> t = (gap8 >> 3) + var4;
    t = t > dead_max ? dead_max : t;
    t = t < dead_after ? dead_after : t;
    threshold = (bit<48>)t;
}

/* Whether routing must leave spine `spine` out now (see above). */
@hidden action spine_excluded(in bit<8> spine, in bit<48> now, in bit<32> dead_after, in bit<32> dead_max,
                              out bit<1> excluded) {
    bit<48> heard;
    bit<48> asked;
    bit<48> hold;
    bit<48> threshold;
    spine_heard.read(heard, (bit<32>)spine);
    spine_asked.read(asked, (bit<32>)spine);
    spine_hold.read(hold, (bit<32>)spine);
    spine_threshold(spine, dead_after, dead_max, threshold);
    excluded = ((asked > heard && now - asked > threshold) || heard < hold) ? 1w1 : 1w0;
}

control DcLiveness(inout headers_t hdr,
                   inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {

    action set_port_spine(bit<8> spine_id) {
        meta.from_spine = spine_id;
    }

    /* a leaf's ports to the spines */
    table port_spine {
        key = { standard_metadata.ingress_port: exact @name("ingress_port"); }
        actions = { set_port_spine; NoAction; }
        default_action = NoAction();
        size = MAX_PORTS;
    }

    counter(LIVENESS_SPINES, CounterType.packets) spine_deaths;  /* deaths that ended, per spine */

    action set_liveness(bit<32> dead_after, bit<32> dead_after_max, bit<32> hold) {
        meta.dead_after = dead_after;
        meta.dead_after_max = dead_after_max;
        meta.hold = hold;
    }

    table liveness_config {
        actions = { set_liveness; }
        default_action = set_liveness(DEAD_AFTER_US, DEAD_AFTER_MAX_US, HOLD_US);
        size = 1;
    }

    /* Every packet, before DcValidation may drop it: whatever arrives by a spine's port came
     * through that spine (no host can reach a leaf's spine port but through the spine). */
    apply {
        if (meta.role == ROLE_STORAGE_LEAF || meta.role == ROLE_CLIENT_LEAF) {
            liveness_config.apply();
            if (port_spine.apply().hit && meta.from_spine != 0) {
                bit<32> s = (bit<32>)meta.from_spine;
                bit<48> now = standard_metadata.ingress_global_timestamp;
                bit<48> heard;
                bit<48> asked;
                bit<48> threshold;
                spine_heard.read(heard, s);
                spine_asked.read(asked, s);
                if (asked > heard) {  /* a wait ends (only then is the threshold needed) */
                    spine_threshold(meta.from_spine, meta.dead_after, meta.dead_after_max, threshold);
                    bit<48> waited = now - asked;
                    if (waited > threshold) {
                        /* it was dead until now: held until hold time after it was found dead */
                        spine_hold.write(s, asked + threshold + (bit<48>)meta.hold);
                        spine_deaths.count(s);
                        if (meta.role == ROLE_CLIENT_LEAF) {
                            bit<48> detect = asked + threshold - heard;
                            bit<48> silent = now - heard;
                            digest<spine_death_t>(DIGEST_SPINE_DEATH,
                                { meta.switch_id, meta.from_spine, (bit<32>)detect, (bit<32>)silent });
                        }
                    }
                    /* the wait is a sample of how fast s answers */
                    bit<32> w = waited > (bit<48>)meta.dead_after_max ? meta.dead_after_max : (bit<32>)waited;
                    bit<32> gap8;
                    bit<32> var4;
                    spine_gap.read(gap8, s);
                    spine_gapvar.read(var4, s);
                    bit<32> smoothed = gap8 >> 3;
                    bit<32> dev = w > smoothed ? w - smoothed : smoothed - w;
                    spine_gap.write(s, gap8 - smoothed + w);
                    spine_gapvar.write(s, var4 - (var4 >> 2) + dev);
                }
                spine_heard.write(s, now);
            }
        }
    }
}

#endif
