/* DistCache, PSA top (p4c-ebpf, issue 19): the same controls as ../v1model/distcache.p4, through the PSA
 * spelling of arch.p4.  What is PSA's alone: the parser's start, the IPv4 checksum computed in the deparser
 * (InternetChecksum), the digests sent from the deparser (DC_DIGEST stages them in metadata), and the
 * empty egress.  tests/p4runtime/test_p4info_parity.py holds its P4Info equal to the v1model build's.
 *
 * Where it stands: p4c-ebpf compiles it, clang and llc build the C into a BPF object, and the kernel's
 * verifier takes its programs (softswitch/ebpf/; tests/p4runtime/test_ebpf_build.py).  What that took in the
 * shared P4: register indexes and values staged in metadata (psa/arch.p4), one register for each detector
 * structure (at most 64 maps per program), IPv4 options as payload (parser.p4), the parse status from
 * metadata (header.p4).  Ports are Linux interface indexes here: the P4Runtime server (softswitch/ebpf/)
 * translates its port numbers to and from them, and tells this program which interfaces are its CPU port and
 * its probe port by the two constants below, given to p4c-ebpf when the switch starts (p4c's own PTF tests
 * pass their ports so); 0, no interface's index, means none.
 */
#ifndef DC_CPU_IFINDEX
#define DC_CPU_IFINDEX 0
#endif
#ifndef DC_PROBE_IFINDEX
#define DC_PROBE_IFINDEX 0
#endif
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
        /* a packet-out: written by the switch's server into its CPU port's veth, or by a leaf's probe source
         * into its probe port's (both shaped as packet-outs: packet_out header, then the frame) */
        frame.apply(packet, hdr, meta, (PortIdUint_t)istd.ingress_port == DC_CPU_IFINDEX
                                       || (PortIdUint_t)istd.ingress_port == DC_PROBE_IFINDEX);
        meta.parsed = 1;  /* reached only when DcFrameParser ended without an error */
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
        if (hdr.ipv4.isValid() && hdr.ipv4.ihl == IPV4_MIN_IHL) {  /* as v1model's DcComputeChecksum */
            ck.clear();
            ck.add({ hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
                     hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset,
                     hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr });
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
