/* DcIngress: the controls composed, once for every architecture.
 *
 * The ingress control's own parameters are the architecture's (DC_INGRESS_ARCH_PARAMS, arch.p4 of each
 * top); DC_IO_IN fills dc_io_t from them and DC_IO_OUT applies the controls' verdict, so every control
 * below sees only headers_t, metadata_t and dc_io_t.  The control keeps its name, and its instances
 * theirs, on every architecture: the P4Info names (DcIngress.cache.cache_lookup, ...) are the same.
 */
#ifndef DC_PIPELINE_P4
#define DC_PIPELINE_P4

control DcIngress(inout headers_t hdr,
                  inout metadata_t meta,
                  DC_INGRESS_ARCH_PARAMS) {
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
        dc_io_t io;
        DC_IO_IN(io);
        config.apply(hdr, meta, io);
        liveness.apply(hdr, meta, io);  /* heard: every packet from a spine, before any drop */
        validation.apply(hdr, meta, io);
        if (meta.dropped == 0) {
            if (hdr.dc.isValid()) {
                hdr.udp.checksum = 0;  /* any switch may rewrite a DistCache message */
                probe.apply(hdr, meta, io);
                if (meta.role == ROLE_SPINE || meta.role == ROLE_STORAGE_LEAF) {
                    cache.apply(hdr, meta, io);
                    coherence.apply(hdr, meta, io);
                    detector.apply(hdr, meta, io);
                }
                telemetry.apply(hdr, meta, io);
                if (meta.role == ROLE_CLIENT_LEAF) {
                    routing.apply(hdr, meta, io);
                }
            }
            if (meta.consumed == 0) {
                forwarding.apply(hdr, meta, io);
            }
        }
        DC_IO_OUT(io);
    }
}

#endif
