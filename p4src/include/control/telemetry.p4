/* Load telemetry (paper §4.2): cache switches count the reads targeted at
 * them (a storage leaf also those it answers for a spine that missed) in the
 * current load window and stamp that load into every reply they
 * send or pass; the client-rack leaf records the loads replies carry, per
 * switch id, with the window they arrived in (DcRouting ignores records older
 * than the previous window, so stale loads age out).
 *
 * Telemetry is trusted only from the fabric: the client-rack leaf clears the
 * telemetry fields of requests its clients send and records loads only from
 * replies arriving on fabric ports (DcValidation drops replies from client
 * ports), and a switch answering from its cache clears the other layer's
 * fields, so nothing a client writes into a packet can reach peer_load.
 */
#ifndef DC_TELEMETRY_P4
#define DC_TELEMETRY_P4

control DcTelemetry(inout headers_t hdr,
                    inout metadata_t meta,
                    inout dc_io_t io)
                   (DC_REGISTER_T(bit<32>) peer_load, DC_REGISTER_T(bit<32>) peer_load_epoch, DC_COUNTER_T dc_stats) {

    DC_REGISTER(bit<32>, 1) load_count;  /* reads targeted here in window load_epoch */
    DC_REGISTER(bit<32>, 1) load_epoch;

    apply {
        bool reply = hdr.dc.op == OP_GET_REPLY || hdr.dc.op == OP_PUT_REPLY || hdr.dc.op == OP_DELETE_REPLY
            || hdr.dc.op == OP_EXEC_REPLY;
        if (meta.role == ROLE_SPINE || meta.role == ROLE_STORAGE_LEAF) {
            /* reads for this switch: targeted at it, or answered here for a spine that missed */
            bool targeted_read = meta.op == OP_GET && (hdr.dc.target == meta.switch_id || meta.served == 1);
            if (targeted_read || reply) {
                bit<32> epoch;
                bit<32> count;
                DC_READ(load_epoch, epoch, 0);
                DC_READ(load_count, count, 0);
                if (epoch != meta.epoch) {
                    count = 0;  /* a new window starts at 0 */
                    DC_WRITE(load_epoch, 32, 0, meta.epoch);
                }
                if (targeted_read) {
                    count = count + 1;
                }
                DC_WRITE(load_count, 32, 0, count);
                meta.load = count;
            }
            if (reply) {
                if (meta.role == ROLE_SPINE) {
                    hdr.dc.spine_id = meta.switch_id;
                    hdr.dc.spine_load = meta.load;
                    if (meta.served == 1) {
                        hdr.dc.leaf_id = 0;
                        hdr.dc.leaf_load = 0;
                    }
                } else {
                    hdr.dc.leaf_id = meta.switch_id;
                    hdr.dc.leaf_load = meta.load;
                    if (meta.served == 1) {
                        hdr.dc.spine_id = 0;
                        hdr.dc.spine_load = 0;
                    }
                }
                if (meta.served == 0) {
                    dc_stats.count(STAT_REPLY_STAMPED);
                }
            }
        } else if (meta.role == ROLE_CLIENT_LEAF) {
            if (meta.port_kind == PORT_CLIENT) {
                /* requests from clients carry no telemetry */
                hdr.dc.served_by = 0;
                hdr.dc.spine_id = 0;
                hdr.dc.leaf_id = 0;
                hdr.dc.spine_load = 0;
                hdr.dc.leaf_load = 0;
            } else if (reply && meta.port_kind == PORT_FABRIC) {
                if (hdr.dc.spine_id != 0) {
                    DC_WRITE(peer_load, 32, (bit<32>)hdr.dc.spine_id, hdr.dc.spine_load);
                    DC_WRITE(peer_load_epoch, 32, (bit<32>)hdr.dc.spine_id, meta.epoch);
                }
                if (hdr.dc.leaf_id != 0) {
                    DC_WRITE(peer_load, 32, (bit<32>)hdr.dc.leaf_id, hdr.dc.leaf_load);
                    DC_WRITE(peer_load_epoch, 32, (bit<32>)hdr.dc.leaf_id, meta.epoch);
                }
                dc_stats.count(STAT_LOAD_RECORDED);
            }
        }
    }
}

#endif
