/* State shared by two concerns, declared once at the top level.
 *
 * Everything else lives inside the control that owns it.  Registers are
 * written only by packets (BMv2's P4Runtime server cannot write them); the
 * control plane reads the counters.
 */
#ifndef DC_SHARED_P4
#define DC_SHARED_P4

#include "size.p4"

/* The value store: read by DcCache (hits), written by DcCoherence. */
DC_REGISTER(bit<48>, CACHE_SLOTS) cache_valid;        /* tag (epoch ++ version) of the valid entry; 0 = invalid */
DC_REGISTER(bit<16>, CACHE_SLOTS) cache_vlen;
DC_REGISTER(bit<128>, CACHE_VALUE_CELLS) cache_value;  /* slot * MAX_CHUNKS + chunk */

/* Loads of cache switches carried back in replies (client-rack leaf):
 * written by DcTelemetry, read by DcRouting.  Indexed by switch id. */
DC_REGISTER(bit<32>, MAX_SWITCHES) peer_load;
DC_REGISTER(bit<32>, MAX_SWITCHES) peer_load_epoch;

/* Counted by every control: why packets were dropped, and what happened. */
DC_COUNTER(N_DROP_REASONS) dc_drops;
DC_COUNTER(N_STATS) dc_stats;

#endif
