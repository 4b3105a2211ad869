/* Probes: how a leaf asks a spine whether its data plane forwards (issue 16).
 *
 * The probe source is the controller: a P4Runtime PacketOut into a leaf (CPU_PORT, packet_out
 * header naming the spine), carrying a PROBE addressed to that spine's address, so the leaf's route
 * to it sends it up the port facing that spine.  The leaf marks the probe for the spine (target),
 * counts it (probes_sent[spine]) and starts the spine's ask (spine_asked, control/liveness.p4) unless
 * one is already outstanding.  The spine turns it around as PROBE_REPLY, stamped with its id, out of
 * the port it came in by, so the reply comes back through the port facing that spine; the leaf
 * counts it (probes_answered[spine of that port]: port_spine, never the packet's own fields) and
 * the reply ends there.  DcLiveness has already recorded it as heard.
 *
 * A probe for a spine heard from within probe_skip (liveness_config; PROBE_SKIP_US, 3 ms) with no ask
 * outstanding is not sent (dc_stats PROBE_SKIPPED, not probes_sent) and starts no ask: the spine's
 * traffic has answered it, and under load nearly every probe would be a round trip for nothing.
 *
 * The controller reads both counters (p4rt/probes.py): a spine that stopped answering every
 * leaf has a dead data plane even if its P4Runtime server still answers.
 *
 * DcValidation lets through only what belongs here: a PROBE at a leaf only from its controller, a
 * PROBE_REPLY at a leaf only from a spine's port, a PROBE at a spine only from a leaf (any port of
 * a spine faces a leaf, and leaves drop the probes their hosts send); everything else is DROP_PROBE.
 */
#ifndef DC_PROBE_P4
#define DC_PROBE_P4

control DcProbe(inout headers_t hdr,
                inout metadata_t meta,
                inout dc_io_t io)
               (DC_REGISTER_T(bit<48>) spine_heard, DC_REGISTER_T(bit<48>) spine_asked, DC_COUNTER_T dc_stats) {

    DC_COUNTER(LIVENESS_SPINES) probes_sent;      /* a leaf's probes, per spine */
    DC_COUNTER(LIVENESS_SPINES) probes_answered;  /* their replies, per spine */

    apply {
        if (meta.op == OP_PROBE && hdr.packet_out.isValid()) {
            /* a leaf: its controller's probe for one spine */
            bit<8> spine = hdr.packet_out.spine_id;
            hdr.packet_out.setInvalid();
            hdr.dc.target = spine;
            bit<48> heard;
            bit<48> asked;
            DC_READ(spine_heard, heard, (bit<32>)spine);
            DC_READ(spine_asked, asked, (bit<32>)spine);
            if (asked <= heard && heard != 0 && io.now >= heard && io.now - heard < (bit<48>)meta.probe_skip) {
                /* heard from lately, and no wait going on: its traffic answered already (a loaded leaf
                 * hears each spine every millisecond or less), so the probe would only cost the leaf and
                 * the spine a round trip; sent, nothing would change.  No ask starts. */
                dc_stats.count(STAT_PROBE_SKIPPED);
                meta.consumed = 1;
                io.drop = 1;
            } else {
                if (asked <= heard) {
                    DC_WRITE(spine_asked, 48, (bit<32>)spine, io.now);
                }
                probes_sent.count((bit<32>)spine);
            }
        } else if (meta.op == OP_PROBE) {
            /* a spine: back to the leaf, out of the port it came in by */
            hdr.dc.op = OP_PROBE_REPLY;
            hdr.dc.spine_id = meta.switch_id;
            dc_reflect(hdr.ipv4, hdr.udp);
            meta.routed = 1;
            meta.nhop_port = io.ingress_port;
            meta.nhop_dmac = hdr.ethernet.srcAddr;
            dc_stats.count(STAT_PROBE_REFLECTED);
        } else if (meta.op == OP_PROBE_REPLY) {
            /* a leaf: a spine's answer */
            probes_answered.count((bit<32>)meta.from_spine);
            meta.consumed = 1;
            io.drop = 1;
        }
    }
}

#endif
