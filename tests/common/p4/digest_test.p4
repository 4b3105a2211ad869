// A tiny v1model program that emits one digest per frame, for the digest tests
// (tests/test_softswitch_digests.py): the same digest the DistCache heavy-hitter
// detector declares.  softswitch runs tests.softswitch_helpers.DigestPipeline,
// BMv2 runs this, compiled; both must send the controller the same DigestLists.
//
// Frame: Ethernet (EtherType 0x88B5) | key: 16 bytes | estimate: 2 bytes.
// Digest: {key, estimate, switch_id = 7}.  Every frame is dropped.
#include "../../../p4src/v1model/arch.p4"  /* DC_DIGEST: the shared controls' spelling */

#define SWITCH_ID 7

header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header probe_t { bit<128> key; bit<16> estimate; }
struct headers_t { ethernet_t eth; probe_t probe; }
struct hh_digest_t { bit<128> key; bit<16> estimate; bit<8> switch_id; }
struct meta_t { bit<8> switch_id; }

parser DtParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.eth);
        transition select(hdr.eth.ether_type) { 0x88B5: parse_probe; default: accept; }
    }
    state parse_probe { pkt.extract(hdr.probe); transition accept; }
}

control DtVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control DtDetector(inout headers_t hdr, inout meta_t meta) {
    apply {
        if (hdr.probe.isValid()) {
            bit<16> estimate = hdr.probe.estimate;
            DC_DIGEST(hh_digest_t, (bit<32>)1, {hdr.probe.key, estimate, meta.switch_id});
        }
    }
}

control DtIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    DtDetector() detector;
    apply {
        meta.switch_id = SWITCH_ID;
        detector.apply(hdr, meta);
        mark_to_drop(sm);
    }
}

control DtEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control DtCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control DtDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.eth); pkt.emit(hdr.probe); } }

V1Switch(DtParser(), DtVerify(), DtIngress(), DtEgress(), DtCompute(), DtDeparser()) main;
