/* The frame's parser and deparser, shared by every role and both architectures.
 *
 * Each top (p4src/v1model/, p4src/psa/) runs it from its own parser and says whether the packet is a
 * controller's packet-out (from_cpu: how one arrives is the architecture's).  Parser errors do
 * not drop the packet: it enters ingress with its parser_error (dc_io_t), where DcValidation counts and
 * drops it; the status it gives (io.parse_status) comes from meta.parse_fail and meta.parsed, which
 * the parser keeps on both architectures (DC_PARSE_STATUS, header.p4).
 *
 * IPv4 options end the parse: they and everything after them are payload, carried byte for byte and
 * never looked into, so an IPv4 packet with options is routed as plain IPv4 (DcForwarding updates its
 * checksum for the TTL it takes off, RFC 1624; the deparsers checksum only an option-less header), and
 * a DistCache message behind options is not one to any switch: no cache answers or counts it, no
 * control reads it, and it goes to its address like any other packet (the client-port source check
 * still applies).  Parsing the options instead cost p4c-ebpf's kernel program its verifier budget: each
 * option length left the parser at its own offset, and the verifier walked the whole ingress once per
 * length (10 lengths: over its million instructions; 1: 320 thousand).
 */
#ifndef DC_PARSER_P4
#define DC_PARSER_P4

#include "define.p4"
#include "header.p4"

parser DcFrameParser(packet_in packet, out headers_t hdr, inout metadata_t meta, in bool from_cpu) {
    /* A controller's packet-out arrives with its packet_out header ahead of the frame. */
    state start {
        meta.parse_fail = PARSE_TRUNCATED;  /* what an extract that runs out of packet means */
        transition select(from_cpu) {
            true: parse_packet_out;
            default: parse_ethernet;
        }
    }

    state parse_packet_out {
        packet.extract(hdr.packet_out);
        transition parse_ethernet;
    }

    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            TYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl < IPV4_MIN_IHL, hdr.ipv4.ihl) {
            (true, _): bad_ihl;
            (false, IPV4_MIN_IHL): parse_ipv4_payload;
            default: accept;  /* options: payload from here on (see above) */
        }
    }

    /* Only unfragmented UDP (or a first fragment) is looked into. */
    state parse_ipv4_payload {
        transition select(hdr.ipv4.fragOffset, hdr.ipv4.protocol) {
            (13w0, PROTO_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dstPort, hdr.udp.srcPort) {
            (DC_PORT, _): parse_dc;
            (_, DC_PORT): parse_dc;
            default: accept;
        }
    }

    state parse_dc {
        packet.extract(hdr.dc);
        meta.chunks_left = hdr.dc.nchunks;
        transition select(hdr.dc.version == DC_VERSION, hdr.dc.nchunks <= MAX_CHUNKS, hdr.dc.nchunks) {
            (false, _, _): bad_version;
            (true, false, _): bad_chunks;
            (true, true, 0): accept;
            default: parse_value;
        }
    }

    state parse_value {
        packet.extract(hdr.vals.next);
        meta.chunks_left = meta.chunks_left - 1;
        transition select(meta.chunks_left) {
            0: accept;
            default: parse_value;
        }
    }

    /* The errors a verify raises, each in a state of its own that first says which status it is: p4c takes a
     * store to meta for dead when a later one on the same path overwrites it, whether or not a verify
     * between them ends the parse (on BMv2 and p4c-ebpf alike). */
    state bad_ihl {
        meta.parse_fail = PARSE_OTHER;
        verify(false, error.Ipv4BadIhl);
        transition accept;
    }

    state bad_version {
        meta.parse_fail = PARSE_BAD_VERSION;
        verify(false, error.DcBadVersion);
        transition accept;
    }

    state bad_chunks {
        meta.parse_fail = PARSE_BAD_CHUNKS;
        verify(false, error.DcBadChunks);
        transition accept;
    }
}

/* Every header that may be valid, in wire order (invalid ones emit nothing). */
control DcEmit(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.dc);
        packet.emit(hdr.vals);
    }
}

#endif
