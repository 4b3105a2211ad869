/* The frame's parser and deparser, shared by every role and both architectures.
 *
 * Each top (p4src/v1model/, p4src/psa/) runs it from its own parser and says whether the packet is a
 * controller's packet-out (from_cpu: how one arrives is the architecture's).  Parser errors do
 * not drop the packet: it enters ingress with its parser_error (dc_io_t), where DcValidation counts and
 * drops it.  IPv4 options are parsed (so their bytes are checksummed and re-emitted); DcValidation
 * drops DistCache messages that carry them.
 */
#ifndef DC_PARSER_P4
#define DC_PARSER_P4

#include "define.p4"
#include "header.p4"

parser DcFrameParser(packet_in packet, out headers_t hdr, inout metadata_t meta, in bool from_cpu) {
    /* A controller's packet-out arrives with its packet_out header ahead of the frame. */
    state start {
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
        verify(hdr.ipv4.ihl >= IPV4_MIN_IHL, error.Ipv4BadIhl);
        transition select(hdr.ipv4.ihl) {
            IPV4_MIN_IHL: parse_ipv4_payload;
            default: parse_ipv4_options;
        }
    }

    state parse_ipv4_options {
        meta.option_words_left = (bit<8>)hdr.ipv4.ihl - (bit<8>)IPV4_MIN_IHL;
        transition parse_ipv4_option_word;
    }

    state parse_ipv4_option_word {
        packet.extract(hdr.ipv4_options.next);
        meta.option_words_left = meta.option_words_left - 1;
        transition select(meta.option_words_left) {
            0: parse_ipv4_payload;
            default: parse_ipv4_option_word;
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
        verify(hdr.dc.version == DC_VERSION, error.DcBadVersion);
        verify(hdr.dc.nchunks <= MAX_CHUNKS, error.DcBadChunks);
        meta.chunks_left = hdr.dc.nchunks;
        transition select(hdr.dc.nchunks) {
            0: accept;
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
}

/* Every header that may be valid, in wire order (invalid ones emit nothing). */
control DcEmit(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.ipv4_options);
        packet.emit(hdr.udp);
        packet.emit(hdr.dc);
        packet.emit(hdr.vals);
    }
}

#endif
