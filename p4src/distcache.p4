/* DistCache: one v1model program for all three roles.
 *
 * The controller writes the role (spine cache, storage-rack leaf cache,
 * client-rack leaf router), the switch id and the caching mechanism into
 * switch_config, and what each port faces into port_kind.  Leaves learn
 * which spines forward from probes and traffic (liveness, probe) and route
 * around dead ones.  Cache values, valid tags and loads live in registers written only by packets; the
 * control plane writes tables and reads counters (BMv2's P4Runtime server
 * cannot write registers).
 *
 * One control per concern, in include/control/; softswitch/dataplane/ runs
 * the same controls, file for file, and tests/test_p4info_parity.py holds its
 * P4Info against the declarations here.
 */
#include <core.p4>
#include <v1model.p4>

#include "include/define.p4"
#include "include/size.p4"
#include "include/header.p4"
#include "include/parser.p4"
#include "include/shared.p4"
#include "include/actions.p4"
#include "include/control/config.p4"
#include "include/control/liveness.p4"
#include "include/control/validation.p4"
#include "include/control/probe.p4"
#include "include/control/cache.p4"
#include "include/control/coherence.p4"
#include "include/control/detector.p4"
#include "include/control/telemetry.p4"
#include "include/control/routing.p4"
#include "include/control/forwarding.p4"

control DcIngress(inout headers_t hdr,
                  inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    DcConfig() config;
    DcLiveness() liveness;
    DcValidation() validation;
    DcProbe() probe;
    DcCache() cache;
    DcCoherence() coherence;
    DcDetector() detector;
    DcTelemetry() telemetry;
    DcRouting() routing;
    DcForwarding() forwarding;

    apply {
        config.apply(hdr, meta, standard_metadata);
        liveness.apply(hdr, meta, standard_metadata);  /* heard: every packet from a spine, before any drop */
        validation.apply(hdr, meta, standard_metadata);
        if (meta.dropped == 0) {
            if (hdr.dc.isValid()) {
                hdr.udp.checksum = 0;  /* any switch may rewrite a DistCache message */
                probe.apply(hdr, meta, standard_metadata);
                if (meta.role == ROLE_SPINE || meta.role == ROLE_STORAGE_LEAF) {
                    cache.apply(hdr, meta, standard_metadata);
                    coherence.apply(hdr, meta, standard_metadata);
                    detector.apply(hdr, meta, standard_metadata);
                }
                telemetry.apply(hdr, meta, standard_metadata);
                if (meta.role == ROLE_CLIENT_LEAF) {
                    routing.apply(hdr, meta, standard_metadata);
                }
            }
            if (meta.consumed == 0) {
                forwarding.apply(hdr, meta, standard_metadata);
            }
        }
    }
}

control DcEgress(inout headers_t hdr,
                 inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply { }
}

V1Switch(DcParser(), DcVerifyChecksum(), DcIngress(), DcEgress(), DcComputeChecksum(), DcDeparser()) main;
