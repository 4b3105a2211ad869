/* Malformed input and trust: every packet that must not go on is counted in
 * dc_drops under one reason and dropped here, before any other control looks
 * at it.  Trust follows the port kinds: only storage servers may write caches
 * (INVALIDATE, UPDATE), and nothing that enters from a client port may look
 * like it came from a switch or a server (acknowledgements, replies).  A
 * packet from a client port must also carry a source address that belongs
 * behind that port (client_source: the host's address at its leaf, the
 * rack's prefix at a spine): no client can spoof another host, so none can
 * aim replies (up to 26 times the request's size) at a victim, or pass for
 * another client in the shims' retry detection.
 *
 * No packet can circle the fabric.  A packet that arrives with TTL 0 or 1
 * cannot be forwarded (DcForwarding takes one off every packet it sends) and
 * is dropped here, before the cache, the load or the detector counts it.  And
 * routing is valley-free: a leaf sends nothing that came down from a spine
 * back up, so from a fabric port only the rack's own hosts (rack_hosts) are
 * destinations; anything else (an unused address of the rack, its gateway)
 * is dropped here as LOOP rather than taken up again by the catch-all
 * transit route.
 *
 * Probes (control/probe.p4) have their own trust: a leaf takes a PROBE only from its controller
 * (a packet-out, which must be a PROBE for a spine id) and a PROBE_REPLY only from a spine's port (port_spine); a
 * spine takes a PROBE only from a leaf, never from its own CPU port.  Anything else is DROP_PROBE:
 * no host can make a spine look alive or dead, or count as a probe source.
 */
#ifndef DC_VALIDATION_P4
#define DC_VALIDATION_P4

control DcValidation(inout headers_t hdr,
                     inout metadata_t meta,
                     inout dc_io_t io)
                    (DC_COUNTER_T dc_drops) {

    bit<32> reason = 0;

    action source_ok() { }

    table client_source {
        key = {
            io.ingress_port: exact @name("ingress_port");
            hdr.ipv4.srcAddr: lpm @name("ipv4_src");
        }
        actions = { source_ok; NoAction; }
        default_action = NoAction();
        size = CLIENT_SOURCES;
    }

    action dest_ok() { }

    /* a leaf's hosts: what may come down to it from a spine */
    table rack_hosts {
        key = { hdr.ipv4.dstAddr: exact @name("ipv4_dst"); }
        actions = { dest_ok; NoAction; }
        default_action = NoAction();
        size = MAX_PORTS;
    }

    apply {
        bool from_cpu = false;  /* the controller's packet-out */
        if (hdr.packet_out.isValid()) {  /* not `= isValid()`: p4c-ebpf drops a bare isValid() initializer */
            from_cpu = true;
        }
        bool leaf = meta.role == ROLE_STORAGE_LEAF || meta.role == ROLE_CLIENT_LEAF;
        meta.dropped = 1;
        if (io.parse_status == PARSE_TRUNCATED) {
            reason = DROP_TRUNCATED;
        } else if (io.parse_status == PARSE_BAD_VERSION) {
            reason = DROP_BAD_VERSION;
        } else if (io.parse_status == PARSE_BAD_CHUNKS) {
            reason = DROP_BAD_CHUNKS;
        } else if (io.parse_status != PARSE_OK) {
            reason = DROP_PARSER_OTHER;
        } else if (!hdr.ipv4.isValid()) {
            reason = DROP_NOT_IPV4;
        } else if (from_cpu && !(leaf && hdr.dc.isValid() && hdr.dc.op == OP_PROBE)) {
            reason = DROP_PROBE;  /* what a controller sends into the data plane is a probe, through a leaf */
        } else if (meta.port_kind == PORT_CLIENT && !client_source.apply().hit) {
            reason = DROP_SPOOFED;
        } else if (!hdr.dc.isValid()) {
            meta.dropped = 0;  /* plain IPv4: routed by DcForwarding */
        } else {
            bit<8> op = hdr.dc.op;
            meta.op = op;
            bool known = op == OP_GET || op == OP_PUT || op == OP_DELETE || op == OP_EXEC
                || op == OP_GET_REPLY || op == OP_PUT_REPLY || op == OP_DELETE_REPLY || op == OP_EXEC_REPLY
                || op == OP_INVALIDATE || op == OP_UPDATE
                || op == OP_INVALIDATE_ACK || op == OP_UPDATE_ACK || op == OP_PROBE || op == OP_PROBE_REPLY;
            bool reply = op == OP_GET_REPLY || op == OP_PUT_REPLY || op == OP_DELETE_REPLY || op == OP_EXEC_REPLY;
            bool probe_ok = (leaf && from_cpu && op == OP_PROBE
                             && hdr.packet_out.spine_id != 0 && hdr.packet_out.spine_id <= MAX_SPINE_ID)
                || (leaf && !from_cpu && op == OP_PROBE_REPLY && meta.from_spine != 0)
                || (meta.role == ROLE_SPINE && !from_cpu && op == OP_PROBE);
            bit<32> want_chunks = 0;
            if (hdr.dc.vlen <= MAX_CACHEABLE) {
                want_chunks = (hdr.dc.vlen + 15) >> 4;
            }
            if (!known) {
                reason = DROP_UNKNOWN_OP;
            } else if (hdr.dc.vlen > MAX_VALUE || (bit<32>)hdr.dc.nchunks != want_chunks
                       || (op == OP_GET && (hdr.dc.vlen != 0 || hdr.dc.alen != 0))) {
                /* the lengths do not add up; a GET carries only its key (a hit's reply length counts on it) */
                reason = DROP_BAD_CHUNKS;
            } else if ((op == OP_PROBE || op == OP_PROBE_REPLY) && !probe_ok) {
                reason = DROP_PROBE;
            } else if ((op == OP_INVALIDATE || op == OP_UPDATE) && meta.port_kind != PORT_STORAGE) {
                reason = DROP_UNTRUSTED;
            } else if ((op == OP_INVALIDATE_ACK || op == OP_UPDATE_ACK || reply)
                       && meta.port_kind == PORT_CLIENT) {
                reason = DROP_UNTRUSTED;
            } else {
                meta.dropped = 0;
            }
        }
        /* a sound packet (what is wrong with it is counted first): where it is going */
        if (meta.dropped == 0) {
            meta.dropped = 1;
            if (hdr.ipv4.ttl <= 1) {
                reason = DROP_TTL_EXPIRED;
            } else if (leaf && meta.port_kind == PORT_FABRIC && !from_cpu && meta.op != OP_PROBE_REPLY
                       && !rack_hosts.apply().hit) {
                reason = DROP_LOOP;
            } else {
                meta.dropped = 0;
            }
        }
        if (meta.dropped == 1) {
            dc_drops.count(reason);
            io.drop = 1;
        }
    }
}

#endif
