/* IPv4 forwarding: the next hop DcRouting chose, or the longest-prefix route
 * for the destination.  Unroutable packets are counted and dropped. */
#ifndef DC_FORWARDING_P4
#define DC_FORWARDING_P4

control DcForwarding(inout headers_t hdr,
                     inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {

    action set_nhop(bit<48> dmac, bit<9> port) {
        meta.routed = 1;
        meta.nhop_dmac = dmac;
        meta.nhop_port = port;
    }

    action drop() {
        meta.routed = 0;
    }

    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr: lpm; }
        actions = { set_nhop; drop; }
        default_action = drop();
        size = MAX_ROUTES;
    }

    apply {
        if (meta.routed == 0) {
            ipv4_lpm.apply();
        }
        if (meta.routed == 1) {
            standard_metadata.egress_spec = meta.nhop_port;
            hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
            hdr.ethernet.dstAddr = meta.nhop_dmac;
            hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
        } else {
            dc_drops.count(DROP_NO_ROUTE);
            mark_to_drop(standard_metadata);
        }
    }
}

#endif
