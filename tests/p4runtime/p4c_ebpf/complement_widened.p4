/* ~ of a 16-bit field, widened: (bit<32>)(~a) should be at most 0xFFFF. */
#include "_common.p4"
control I(inout headers_t hdr, inout meta_t m, in psa_ingress_input_metadata_t i,
          inout psa_ingress_output_metadata_t o) {
    apply { m.wide = (bit<32>)(~hdr.h.a); }
}
IngressPipeline(P(), I(), EP()) ip;
EgressPipeline(EgP(), Eg(), EgD()) ep;
PSA_Switch(ip, PacketReplicationEngine(), ep, BufferingQueueingEngine()) main;
