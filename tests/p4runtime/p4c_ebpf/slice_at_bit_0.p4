/* A slice that starts at bit 0 and is narrower than its C type: [0:0] should keep one bit of a. */
#include "_common.p4"
control I(inout headers_t hdr, inout meta_t m, in psa_ingress_input_metadata_t i,
          inout psa_ingress_output_metadata_t o) {
    apply { m.low = hdr.h.a[0:0]; }
}
IngressPipeline(P(), I(), EP()) ip;
EgressPipeline(EgP(), Eg(), EgD()) ep;
PSA_Switch(ip, PacketReplicationEngine(), ep, BufferingQueueingEngine()) main;
