/* DistCache: one program for all three roles, v1model top (BMv2, softswitch's model).
 *
 * The controller writes the role (spine cache, storage-rack leaf cache,
 * client-rack leaf router), the switch id and the caching mechanism into
 * switch_config, and what each port faces into port_kind.  Leaves learn
 * which spines forward from probes and traffic (liveness, probe) and route
 * around dead ones.  Cache values, valid tags and loads live in registers written only by packets; the
 * control plane writes tables and reads counters (BMv2's P4Runtime server
 * cannot write registers).
 *
 * One control per concern, in ../include/control/, written once against ../include's dc_io_t and the
 * extern macros of arch.p4; this file is what v1model alone has: its parser's start (BMv2's CPU port
 * delivers packet-outs), its checksum controls, and the copy between standard_metadata and dc_io_t.
 * softswitch/dataplane/ runs the same controls, file for file, and tests/test_p4info_parity.py holds
 * its P4Info against the declarations here.
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

parser DcParser(packet_in packet,
                out headers_t hdr,
                inout metadata_t meta,
                inout standard_metadata_t standard_metadata) {
    DcFrameParser() frame;

    /* A controller's packet-out (P4Runtime PacketOut) enters by BMv2's --cpu-port, a leaf's local
     * probe source's frames by PROBE_PORT, with the same packet_out header. */
    state start {
        frame.apply(packet, hdr, meta,
                    standard_metadata.ingress_port == CPU_PORT || standard_metadata.ingress_port == PROBE_PORT);
        meta.parsed = 1;  /* reached only when DcFrameParser ended without an error */
        transition accept;
    }
}

control DcVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control DcEgress(inout headers_t hdr,
                 inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply { }
}

/* The IPv4 checksum of a header without options; one with options (payload to the parser) has its
 * checksum updated by DcForwarding.  The UDP checksum of a DistCache message is zeroed by DcIngress
 * (IPv4 allows it), because a switch may rewrite any of them. */
control DcComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid() && hdr.ipv4.ihl == IPV4_MIN_IHL,
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset,
              hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr},
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

control DcDeparser(packet_out packet, in headers_t hdr) {
    DcEmit() emit;
    apply {
        emit.apply(packet, hdr);
    }
}

V1Switch(DcParser(), DcVerifyChecksum(), DcIngress(), DcEgress(), DcComputeChecksum(), DcDeparser()) main;
