/* IPv4 forwarding: the next hop DcRouting chose, or the longest-prefix route
 * for the destination.  A leaf's route to other racks is transit(): the
 * packet goes up to the spine in transit_spine's slot (the key's h0 bucket
 * mod TRANSIT_SLOTS; 0 for non-DistCache packets), which the controller fills
 * round-robin with the live spines.  So traffic spreads over the spines (ECMP
 * on the key's hash), every key keeps one path, and replies through every
 * spine carry that spine's load to the client racks.  A client's retry
 * (FLAG_ATTEMPT, see DcRouting) takes the slot its attempt number further on,
 * so it goes up through another spine than the copy that was lost; replies
 * and coherence messages keep their key's path.  Each slot also names the
 * next spine of the round-robin: when the leaf found the slot's spine dead
 * (control/liveness.p4) and that one is alive, the packet goes up it instead
 * (TRANSIT_REROUTED); with no live alternative it keeps its slot's spine.
 * Unroutable packets are counted and dropped.
 *
 * Transit is the way out of a rack, for what its hosts send: DcValidation has
 * already dropped whatever came down from a spine for no host of the rack, so
 * nothing goes back up.  Every forwarded packet loses one from its TTL. */
#ifndef DC_FORWARDING_P4
#define DC_FORWARDING_P4

control DcForwarding(inout headers_t hdr,
                     inout metadata_t meta,
                     inout dc_io_t io)
                    (DC_COUNTER_T dc_drops, DC_COUNTER_T dc_stats, DC_LIVENESS_REG_PARAMS) {
    DcSpineExcluded(DC_LIVENESS_REGS) transit_excluded;
    DcSpineExcluded(DC_LIVENESS_REGS) alt_excluded;

    DC_CRC32_UNIT  /* what DC_CRC32 hashes with, where the architecture has it as an object */

    action set_nhop(bit<48> dmac, bit<9> port) {
        meta.routed = 1;
        meta.nhop_dmac = dmac;
        meta.nhop_port = port;
    }

    action drop() {
        meta.routed = 0;
    }

    action transit() {
        meta.transit = 1;
    }

    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr: lpm @name("ipv4_dst"); }
        actions = { set_nhop; transit; drop; }
        default_action = drop();
        size = MAX_ROUTES;
    }

    action set_transit(bit<8> spine_id, bit<48> dmac, bit<9> port,
                       bit<8> alt_spine_id, bit<48> alt_dmac, bit<9> alt_port) {
        meta.routed = 1;
        meta.nhop_dmac = dmac;
        meta.nhop_port = port;
        meta.transit_id = spine_id;
        meta.alt_id = alt_spine_id;
        meta.alt_dmac = alt_dmac;
        meta.alt_port = alt_port;
    }

    table transit_spine {
        key = { meta.transit_slot: exact @name("transit_slot"); }
        actions = { set_transit; drop; }
        default_action = drop();
        size = TRANSIT_SLOTS;
    }

    apply {
        if (meta.routed == 0) {
            ipv4_lpm.apply();
        }
        if (meta.transit == 1) {
            bit<16> bucket = 0;
            if (hdr.dc.isValid()) {
                DC_CRC32(bucket, 16, SPINE_BUCKETS, { hdr.dc.digest });
                if (meta.port_kind == PORT_CLIENT) {
                    bucket = bucket + (bit<16>)((hdr.dc.flags & FLAG_ATTEMPT) >> (bit<5>)FLAG_ATTEMPT_SHIFT);
                }
            }
            meta.transit_slot = (bit<8>)(bucket & (TRANSIT_SLOTS - 1));
            transit_spine.apply();
            if (meta.routed == 1 && meta.transit_id != 0 && meta.alt_id != 0) {
                bit<48> now = io.now;
                bit<1> dead;
                transit_excluded.apply(meta, meta.transit_id, now, dead);
                if (dead == 1) {
                    bit<1> alt_dead;
                    alt_excluded.apply(meta, meta.alt_id, now, alt_dead);
                    if (alt_dead == 0) {
                        meta.nhop_dmac = meta.alt_dmac;
                        meta.nhop_port = meta.alt_port;
                        dc_stats.count(STAT_TRANSIT_REROUTED);
                    }
                }
            }
        }
        /* A packet this switch answered (a cache hit, a reflected coherence message: its op gained the
         * reply bit here) is its own, new packet and goes back the way the request came.  Any other packet
         * never leaves by the port it came in by: a spine would hand a leaf's packet for its own rack
         * straight back to it. */
        bool answered = hdr.dc.isValid() && hdr.dc.op != meta.op;
        if (meta.routed == 1 && meta.nhop_port == io.ingress_port && !answered) {
            dc_drops.count(DROP_LOOP);
            io.drop = 1;
        } else if (meta.routed == 1) {
            io.egress_port = meta.nhop_port;
            hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
            hdr.ethernet.dstAddr = meta.nhop_dmac;
            /* never wraps: DcValidation passes only TTL >= 2, and an answer starts again from 64 */
            bit<16> ttl_word = hdr.ipv4.ttl ++ hdr.ipv4.protocol;
            hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
            if (hdr.ipv4.ihl != IPV4_MIN_IHL) {
                /* options are payload (parser.p4), so no deparser checksums this header: its checksum
                 * follows the TTL's word, HC' = ~(~HC + ~m + m') (RFC 1624, eqn. 3).  The 16-bit
                 * complements are taken in 32 bits with a mask (x ^ 0xFFFF): p4c-ebpf writes ~x as C's ~,
                 * which complements x promoted to int, its upper bits too */
                bit<32> sum = ((bit<32>)hdr.ipv4.hdrChecksum ^ 0xFFFF) + ((bit<32>)ttl_word ^ 0xFFFF)
                    + (bit<32>)(hdr.ipv4.ttl ++ hdr.ipv4.protocol);
                sum = (sum & 0xFFFF) + (sum >> 16);
                sum = (sum & 0xFFFF) + (sum >> 16);
                hdr.ipv4.hdrChecksum = ~sum[15:0];
            }
        } else {
            dc_drops.count(DROP_NO_ROUTE);
            io.drop = 1;
        }
    }
}

#endif
