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
register<bit<48>>(CACHE_SLOTS) cache_valid;        /* tag (epoch ++ version) of the valid entry; 0 = invalid */
register<bit<16>>(CACHE_SLOTS) cache_vlen;
register<bit<128>>(CACHE_VALUE_CELLS) cache_value;  /* slot * MAX_CHUNKS + chunk */

/* Loads of cache switches carried back in replies (client-rack leaf):
 * written by DcTelemetry, read by DcRouting.  Indexed by switch id. */
register<bit<32>>(MAX_SWITCHES) peer_load;
register<bit<32>>(MAX_SWITCHES) peer_load_epoch;

/* Counted by every control: why packets were dropped, and what happened. */
counter(N_DROP_REASONS, CounterType.packets) dc_drops;
counter(N_STATS, CounterType.packets) dc_stats;

#endif
