/* Actions more than one control runs on a packet. */
#ifndef DC_ACTIONS_P4
#define DC_ACTIONS_P4

/* Turn a DistCache packet around: it goes back to its sender as a reply. */
@hidden action dc_reflect(inout headers_t hdr) {
    ip4_t ip = hdr.ipv4.srcAddr;
    hdr.ipv4.srcAddr = hdr.ipv4.dstAddr;
    hdr.ipv4.dstAddr = ip;
    bit<16> p = hdr.udp.srcPort;
    hdr.udp.srcPort = hdr.udp.dstPort;
    hdr.udp.dstPort = p;
    hdr.ipv4.ttl = 64;
}

#endif
