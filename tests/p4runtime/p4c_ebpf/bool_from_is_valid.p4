/* A local bool initialized from isValid(): low should be 1 exactly when h was extracted. */
#include "_common.p4"
control I(inout headers_t hdr, inout meta_t m, in psa_ingress_input_metadata_t i,
          inout psa_ingress_output_metadata_t o) {
    apply {
        bool valid = hdr.h.isValid();
        if (valid) { m.low = 1; } else { m.low = 0; }
    }
}
IngressPipeline(P(), I(), EP()) ip;
EgressPipeline(EgP(), Eg(), EgD()) ep;
PSA_Switch(ip, PacketReplicationEngine(), ep, BufferingQueueingEngine()) main;
