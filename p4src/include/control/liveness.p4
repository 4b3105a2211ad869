/* Liveness of the spines, learned by each leaf in its data plane (issue 16).
 *
 * A leaf keeps three registers per spine id (LIVENESS_SPINES cells; which port faces which spine
 * is the controller's port_spine table):
 *
 *   spine_heard[s]  the last time any packet arrived on the port facing s;
 *   spine_asked[s]  the time of the oldest PROBE sent to s not followed by anything heard from s
 *                   (DcProbe sets it when it sends a probe and nothing is outstanding: asked <= heard);
 *   spine_hold[s]   excluded while heard < hold: the end of the hold time of s's last death, written
 *                   when s is heard from again.
 *
 * s is dead when asked > heard and now - asked > dead_after: a probe went unanswered, and nothing
 * else came from s either, for dead_after (DEAD_AFTER_US, 30 ms, unless liveness_config says
 * otherwise).  Only probes count as asks: data sent up to a spine does not, so with no probe source
 * (the controller stopped) asked never moves past heard and nothing is ever excluded, however idle
 * or silent a spine is.  Any packet refreshes heard, so a probe lost under load is covered by the
 * data that keeps arriving.
 *
 * Hysteresis: a spine found dead stays excluded until it is heard from at least HOLD_US after it was
 * found dead.  The instant it was found dead needs no register: it is asked + dead_after, the moment
 * the rule above became true, whether or not a packet looked at it then.  The only event that ends
 * the rule is a packet heard from s, so DcLiveness checks the rule there, with the old heard, and
 * if s was dead writes hold = asked + dead_after + hold time; from then on s is excluded while
 * heard < hold, i.e. until a packet arrives from it at or after the end of the hold time.  A new
 * death later writes a later hold.  hold starts at 0, so a spine never dead is never held.  Three
 * registers, each written by one kind of packet (heard: any from s; asked: a probe to s; hold: the
 * first packet from s after a death), and the decision is a pure function of them and the clock, so
 * the same packets give the same routes on every target.
 *
 * Each death is counted (spine_deaths[s]) and, at a client leaf, reported to its primary (the
 * controller) with a spine_death_t digest when s is heard from again: how long after the last packet
 * heard from s it was found dead (the detection time in the data plane: when asked + dead_after
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

/* Whether routing must leave spine `spine` out now (see above). */
@hidden action spine_excluded(in bit<8> spine, in bit<48> now, in bit<32> dead_after, out bit<1> excluded) {
    bit<48> heard;
    bit<48> asked;
    bit<48> hold;
    spine_heard.read(heard, (bit<32>)spine);
    spine_asked.read(asked, (bit<32>)spine);
    spine_hold.read(hold, (bit<32>)spine);
    excluded = ((asked > heard && now - asked > (bit<48>)dead_after) || heard < hold) ? 1w1 : 1w0;
}

control DcLiveness(inout headers_t hdr,
                   inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {

    action set_port_spine(bit<8> spine_id) {
        meta.from_spine = spine_id;
    }

    /* a leaf's ports to the spines */
    table port_spine {
        key = { standard_metadata.ingress_port: exact; }
        actions = { set_port_spine; NoAction; }
        default_action = NoAction();
        size = MAX_PORTS;
    }

    counter(LIVENESS_SPINES, CounterType.packets) spine_deaths;  /* deaths that ended, per spine */

    action set_liveness(bit<32> dead_after, bit<32> hold) {
        meta.dead_after = dead_after;
        meta.hold = hold;
    }

    table liveness_config {
        actions = { set_liveness; }
        default_action = set_liveness(DEAD_AFTER_US, HOLD_US);
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
                spine_heard.read(heard, s);
                spine_asked.read(asked, s);
                if (asked > heard && now - asked > (bit<48>)meta.dead_after) {
                    /* it was dead until now: held until hold time after it was found dead */
                    spine_hold.write(s, asked + (bit<48>)meta.dead_after + (bit<48>)meta.hold);
                    spine_deaths.count(s);
                    if (meta.role == ROLE_CLIENT_LEAF) {
                        bit<48> detect = asked + (bit<48>)meta.dead_after - heard;
                        bit<48> silent = now - heard;
                        digest<spine_death_t>(DIGEST_SPINE_DEATH,
                            { meta.switch_id, meta.from_spine, (bit<32>)detect, (bit<32>)silent });
                    }
                }
                spine_heard.write(s, now);
            }
        }
    }
}

#endif
