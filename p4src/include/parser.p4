/* Parser, checksum and deparser shared by every role.
 *
 * Parser errors do not drop the packet in v1model: it enters ingress with
 * standard_metadata.parser_error set, where DcValidation counts and drops it.
 * IPv4 options are parsed (so their bytes are checksummed and re-emitted);
 * DcValidation drops DistCache messages that carry them.
 */
#ifndef DC_PARSER_P4
#define DC_PARSER_P4

#include "define.p4"
#include "header.p4"

parser DcParser(packet_in packet,
                out headers_t hdr,
                inout metadata_t meta,
                inout standard_metadata_t standard_metadata) {
    /* A controller's packet-out (P4Runtime PacketOut through BMv2's --cpu-port) arrives with its
     * packet_out header ahead of the frame. */
    state start {
        transition select(standard_metadata.ingress_port) {
            CPU_PORT: parse_packet_out;
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
        packet.extract(hdr.ipv4_options, (bit<32>)(((bit<16>)hdr.ipv4.ihl - 5) << 5));
        transition parse_ipv4_payload;
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

control DcVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

/* The IPv4 checksum covers the header and its options.  The UDP checksum of
 * a DistCache message is zeroed by DcIngress (IPv4 allows it), because a
 * switch may rewrite any of them. */
control DcComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset,
              hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr,
              hdr.ipv4_options.options },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

control DcDeparser(packet_out packet, in headers_t hdr) {
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
