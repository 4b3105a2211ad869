/* What this switch is: role, id and caching mechanism (switch_config), what
 * each ingress port faces (port_kind), and the length of a load window
 * (load_window).  The controller writes all three; the window defaults to the
 * build constant and tests shorten it.
 */
#ifndef DC_CONFIG_P4
#define DC_CONFIG_P4

control DcConfig(inout headers_t hdr,
                 inout metadata_t meta,
                 inout dc_io_t io) {

    action set_config(bit<8> switch_id, bit<8> role, bit<8> mechanism) {
        meta.switch_id = switch_id;
        meta.role = role;
        meta.mechanism = mechanism;
    }

    table switch_config {
        actions = { set_config; NoAction; }
        default_action = NoAction();
        size = 1;
    }

    action set_port_kind(bit<8> kind) {
        meta.port_kind = kind;
    }

    table port_kind {
        key = { io.ingress_port: exact @name("ingress_port"); }
        actions = { set_port_kind; NoAction; }
        default_action = NoAction();
        size = MAX_PORTS;
    }

    action set_load_window(bit<8> shift) {
        meta.window_shift = shift;
    }

    table load_window {
        actions = { set_load_window; }
        default_action = set_load_window(LOAD_WINDOW_SHIFT);
        size = 1;
    }

    apply {
        switch_config.apply();
        port_kind.apply();
        load_window.apply();
        bit<48> window;
        dc_shr48(io.now, meta.window_shift, window);
        meta.epoch = (bit<32>)window;
    }
}

#endif
