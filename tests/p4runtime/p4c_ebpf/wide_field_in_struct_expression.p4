/* A struct expression holding a 128-bit field: the struct should get k's 16 bytes. */
#include "_common.p4"
control I(inout headers_t hdr, inout meta_t m, in psa_ingress_input_metadata_t i,
          inout psa_ingress_output_metadata_t o) {
    apply { m.d = { hdr.h.k, hdr.h.b }; }
}
IngressPipeline(P(), I(), EP()) ip;
EgressPipeline(EgP(), Eg(), EgD()) ep;
PSA_Switch(ip, PacketReplicationEngine(), ep, BufferingQueueingEngine()) main;
