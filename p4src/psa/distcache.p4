/* DistCache, PSA top (p4c-ebpf, issue 19): the same controls as ../v1model/distcache.p4, through the PSA
 * spelling of arch.p4.  What is PSA's alone: the parser's start, the IPv4 checksum computed in the deparser
 * (InternetChecksum), the digests sent from the deparser (DC_DIGEST stages them in metadata), and the
 * empty egress.  tests/p4runtime/test_p4info_parity.py holds its P4Info equal to the v1model build's.
 *
 * Where it stands: p4c-ebpf compiles it and clang builds the C; llc refuses the ingress program for its
 * stack (over BPF's 512 bytes: p4c-ebpf keeps every local of the inlined controls on it).  Still to come:
 * packet-outs (no CPU or probe port here: from_cpu is false), port numbers translated to and from interface
 * indexes (a port is cut to 9 bits today), and the loader and P4Runtime server over the BPF maps.
 */
#include "arch.p4"

#include "../include/define.p4"
#include "../include/size.p4"
#include "../include/header.p4"
#include "../include/parser.p4"
#include "../include/actions.p4"
#include "../include/control/config.p4"
#include "../include/control/liveness.p4"
#include "../include/control/validation.p4"
#include "../include/control/probe.p4"
#include "../include/control/cache.p4"
#include "../include/control/coherence.p4"
#include "../include/control/detector.p4"
#include "../include/control/telemetry.p4"
#include "../include/control/routing.p4"
#include "../include/control/forwarding.p4"
#include "../include/pipeline.p4"

struct dc_empty_t { }

parser DcIngressParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                       in psa_ingress_parser_input_metadata_t istd, in dc_empty_t resubmit_meta,
                       in dc_empty_t recirculate_meta) {
    DcFrameParser() frame;
    state start {
        frame.apply(packet, hdr, meta, false);
        transition accept;
    }
}

control DcIngressDeparser(packet_out packet, out dc_empty_t clone_i2e_meta, out dc_empty_t resubmit_meta,
                          out dc_empty_t normal_meta, inout headers_t hdr, in metadata_t meta,
                          in psa_ingress_output_metadata_t istd) {
    @name(".hh_digest_t") Digest<hh_digest_t>() hh_digest;  /* named as v1model names a digest: by its type */
    @name(".spine_death_t") Digest<spine_death_t>() spine_death;
    DcEmit() emit;
    InternetChecksum() ck;
    apply {
        if (hdr.ipv4.isValid()) {  /* the header and its options (v1model's DcComputeChecksum) */
            ck.clear();
            ck.add({ hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
                     hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset,
                     hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr });
            if (hdr.ipv4_options[0].isValid()) { ck.add({ hdr.ipv4_options[0].word }); }
            if (hdr.ipv4_options[1].isValid()) { ck.add({ hdr.ipv4_options[1].word }); }
            if (hdr.ipv4_options[2].isValid()) { ck.add({ hdr.ipv4_options[2].word }); }
            if (hdr.ipv4_options[3].isValid()) { ck.add({ hdr.ipv4_options[3].word }); }
            if (hdr.ipv4_options[4].isValid()) { ck.add({ hdr.ipv4_options[4].word }); }
            if (hdr.ipv4_options[5].isValid()) { ck.add({ hdr.ipv4_options[5].word }); }
            if (hdr.ipv4_options[6].isValid()) { ck.add({ hdr.ipv4_options[6].word }); }
            if (hdr.ipv4_options[7].isValid()) { ck.add({ hdr.ipv4_options[7].word }); }
            if (hdr.ipv4_options[8].isValid()) { ck.add({ hdr.ipv4_options[8].word }); }
            if (hdr.ipv4_options[9].isValid()) { ck.add({ hdr.ipv4_options[9].word }); }
            hdr.ipv4.hdrChecksum = ck.get();
        }
        if (meta.dc_hh_digest_t_send == 1) { hh_digest.pack(meta.dc_hh_digest_t); }
        if (meta.dc_spine_death_t_send == 1) { spine_death.pack(meta.dc_spine_death_t); }
        emit.apply(packet, hdr);
    }
}

parser DcEgressParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                      in psa_egress_parser_input_metadata_t istd, in dc_empty_t normal_meta,
                      in dc_empty_t clone_i2e_meta, in dc_empty_t clone_e2e_meta) {
    state start { transition accept; }
}

control DcEgress(inout headers_t hdr, inout metadata_t meta, in psa_egress_input_metadata_t istd,
                 inout psa_egress_output_metadata_t ostd) {
    apply { }
}

control DcEgressDeparser(packet_out packet, out dc_empty_t clone_e2e_meta, out dc_empty_t recirculate_meta,
                         inout headers_t hdr, in metadata_t meta, in psa_egress_output_metadata_t istd,
                         in psa_egress_deparser_input_metadata_t edstd) {
    apply { }
}

IngressPipeline(DcIngressParser(), DcIngress(), DcIngressDeparser()) ip;
EgressPipeline(DcEgressParser(), DcEgress(), DcEgressDeparser()) ep;
PSA_Switch(ip, PacketReplicationEngine(), ep, BufferingQueueingEngine()) main;
