/* What the smallest programs of p4c-ebpf's limits share (docs/ebpf.md): one header, empty egress. */
#include <core.p4>
#include <psa.p4>

header h_t { bit<16> a; bit<16> b; bit<128> k; }
struct headers_t { h_t h; }
struct empty_t { }
struct d_t { bit<128> k; bit<16> b; }
struct meta_t { bit<1> low; bit<32> wide; d_t d; }

parser P(packet_in p, out headers_t hdr, inout meta_t m, in psa_ingress_parser_input_metadata_t i,
         in empty_t r, in empty_t c) { state start { p.extract(hdr.h); transition accept; } }
control EP(packet_out p, out empty_t a, out empty_t b, out empty_t c, inout headers_t hdr, in meta_t m,
           in psa_ingress_output_metadata_t o) { apply { p.emit(hdr.h); } }
parser EgP(packet_in p, out headers_t hdr, inout meta_t m, in psa_egress_parser_input_metadata_t i,
           in empty_t n, in empty_t c, in empty_t r) { state start { transition accept; } }
control Eg(inout headers_t hdr, inout meta_t m, in psa_egress_input_metadata_t i,
           inout psa_egress_output_metadata_t o) { apply { } }
control EgD(packet_out p, out empty_t a, out empty_t b, inout headers_t hdr, in meta_t m,
            in psa_egress_output_metadata_t o, in psa_egress_deparser_input_metadata_t i) { apply { } }
