/* DcIngress: the controls composed, once for every architecture.
 *
 * The ingress control's own parameters are the architecture's (DC_INGRESS_ARCH_PARAMS, arch.p4 of each
 * top); DC_IO_IN fills dc_io_t from them and DC_IO_OUT applies the controls' verdict, so every control
 * below sees only headers_t, metadata_t and dc_io_t.  The control keeps its name, and its instances
 * theirs, on every architecture: the P4Info names (DcIngress.cache.cache_lookup, ...) are the same.
 *
 * State two concerns share is declared here, once, and handed to the controls that use it as
 * constructor arguments (p4c-ebpf keeps no register declared outside a control); its @name starts with a
 * dot, so its P4Info name stays the bare one (cache_value, dc_stats, spine_heard, ...).  Registers are
 * written only by packets (BMv2's P4Runtime server cannot write them); the control plane reads the
 * counters.
 */
#ifndef DC_PIPELINE_P4
#define DC_PIPELINE_P4

control DcIngress(inout headers_t hdr,
                  inout metadata_t meta,
                  DC_INGRESS_ARCH_PARAMS) {
    /* the value store: read by DcCache (hits), written by DcCoherence */
    @name(".cache_valid") DC_REGISTER(bit<48>, CACHE_SLOTS) cache_valid;  /* tag (epoch ++ version); 0 = invalid */
    @name(".cache_vlen") DC_REGISTER(bit<16>, CACHE_SLOTS) cache_vlen;
    @name(".cache_value") DC_REGISTER(bit<128>, CACHE_VALUE_CELLS) cache_value;  /* slot * MAX_CHUNKS + chunk */
    /* the seq of the newest INVALIDATE of the slot's entry: DcCoherence's record, and DcCache's write version */
    @name(".cache_inval_seq") DC_REGISTER(bit<64>, CACHE_SLOTS) cache_inval_seq;
    /* loads of cache switches carried back in replies (client-rack leaf): written by DcTelemetry, read by
     * DcRouting; indexed by switch id */
    @name(".peer_load") DC_REGISTER(bit<32>, MAX_SWITCHES) peer_load;
    @name(".peer_load_epoch") DC_REGISTER(bit<32>, MAX_SWITCHES) peer_load_epoch;
    /* the spines a leaf hears (control/liveness.p4): DcLiveness and DcProbe write them, routing reads */
    @name(".spine_heard") DC_REGISTER(bit<48>, LIVENESS_SPINES) spine_heard;
    @name(".spine_asked") DC_REGISTER(bit<48>, LIVENESS_SPINES) spine_asked;
    @name(".spine_hold") DC_REGISTER(bit<48>, LIVENESS_SPINES) spine_hold;
    @name(".spine_gap") DC_REGISTER(bit<32>, LIVENESS_SPINES) spine_gap;  /* smoothed wait for an answer, us x 8 */
    @name(".spine_gapvar") DC_REGISTER(bit<32>, LIVENESS_SPINES) spine_gapvar;  /* its mean deviation, us x 4 */
    @name(".spine_peak") DC_REGISTER(bit<32>, LIVENESS_SPINES) spine_peak;  /* the longest recent wait, us */
    @name(".spine_peak_at") DC_REGISTER(bit<48>, LIVENESS_SPINES) spine_peak_at;  /* when it ended */
    /* counted by every control: why packets were dropped, and what happened */
    @name(".dc_drops") DC_COUNTER(N_DROP_REASONS) dc_drops;
    @name(".dc_stats") DC_COUNTER(N_STATS) dc_stats;

    DcConfig() config;
    DcLiveness(DC_LIVENESS_REGS) liveness;
    DcValidation(dc_drops) validation;
    DcProbe(spine_heard, spine_asked, dc_stats) probe;
    DcCache(cache_valid, cache_vlen, cache_value, cache_inval_seq, dc_stats) cache;
    DcCoherence(cache_valid, cache_vlen, cache_value, cache_inval_seq, dc_stats) coherence;
    DcDetector(dc_stats) detector;
    DcTelemetry(peer_load, peer_load_epoch, dc_stats) telemetry;
    DcRouting(peer_load, peer_load_epoch, dc_stats, DC_LIVENESS_REGS) routing;
    DcForwarding(dc_drops, dc_stats, DC_LIVENESS_REGS) forwarding;

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
