/* Actions more than one control runs on a packet. */
#ifndef DC_ACTIONS_P4
#define DC_ACTIONS_P4

/* Turn a DistCache packet around: it goes back to its sender as a reply. */
@hidden action dc_reflect(inout ipv4_t ipv4, inout udp_t udp) {  /* (p4c-ebpf copies no whole headers_t) */
    ip4_t ip = ipv4.srcAddr;
    ipv4.srcAddr = ipv4.dstAddr;
    ipv4.dstAddr = ip;
    bit<16> p = udp.srcPort;
    udp.srcPort = udp.dstPort;
    udp.dstPort = p;
    ipv4.ttl = 64;
}

/* x >> s and x << s for a shift s set at run time (a window, a decay).  p4c-ebpf takes a shift amount
 * of at most 5 bits (up to 31), so the shift is cut in two: 32 when bit 5 of s is set, then s's low five
 * bits; s >= 64 gives 0.  The same value as x >> s (x << s) for every s on every target.  The low bits
 * are taken with a mask, not the slice s[4:0]: p4c-ebpf turns a slice that starts at bit 0 into a bare C
 * cast to the next wider C type (s[4:0] became (u8)s, all eight bits). */
@hidden action dc_shr48(in bit<48> x, in bit<8> s, out bit<48> y) {
    bit<48> t = s[5:5] == 1 ? x >> 32 : x;
    t = t >> (bit<5>)(s & 31);
    y = s[7:6] == 0 ? t : 0;
}

@hidden action dc_shl48(in bit<48> x, in bit<8> s, out bit<48> y) {
    bit<48> t = s[5:5] == 1 ? x << 32 : x;
    t = t << (bit<5>)(s & 31);
    y = s[7:6] == 0 ? t : 0;
}

#endif
