/* Sizes of tables, registers and counters (preprocessor macros, so they can
 * size declarations).  `make constants` writes them into
 * distcache/p4defines.py for the control plane; tests/test_p4_constants.py
 * fails when it is stale.
 */
#ifndef DC_SIZE_P4
#define DC_SIZE_P4

#define CACHE_SLOTS 4096
#define MAX_CHUNKS 8
#define CACHE_VALUE_CELLS 32768 /* CACHE_SLOTS * MAX_CHUNKS */
#define SPINE_BUCKETS 1024
#define MAX_SWITCHES 256
#define N_DROP_REASONS 16
#define N_STATS 32
#define MAX_PORTS 64
#define CLIENT_SOURCES 1024 /* client_source entries: one per client host, or per client rack at a spine */
#define MAX_ROUTES 1024
/* Slots of transit_spine (ECMP over spines) and replica_spine (reads of
 * replicated keys over spines): powers of two, filled round-robin with the
 * live spines.  MAX_REPLICATED_KEYS: Hybrid's replicated_keys entries. */
#define TRANSIT_SLOTS 64
#define REPLICA_SLOTS 64
#define MAX_REPLICATED_KEYS 256
/* Liveness (control/liveness.p4): registers and probe counters per spine id (1..63); a spine probed
 * and not heard from for its threshold is dead -- DEAD_AFTER_US, or more where the leaf measured slower
 * answers, up to DEAD_AFTER_MAX_US -- and stays excluded until heard from HOLD_US or more after it was
 * found dead (defaults of the liveness_config table, in us of ingress_global_timestamp).  The longest
 * recent wait a spine ended loses 1 us every 2^PEAK_DECAY_SHIFT us (about 1 ms a second: a 40 ms wait is forgotten in ~40 s).
 * A probe for a spine heard from within PROBE_SKIP_US is not sent: its traffic answered it already. */
#define LIVENESS_SPINES 64
#define DEAD_AFTER_US 30000
#define DEAD_AFTER_MAX_US 250000
#define HOLD_US 100000
#define PEAK_DECAY_SHIFT 10
#define PROBE_SKIP_US 3000

/* Load windows last 2^LOAD_WINDOW_SHIFT us of ingress_global_timestamp
 * (2^20 us ~ 1.05 s) unless the load_window table says otherwise. */
#define LOAD_WINDOW_SHIFT 20

/* Heavy-hitter detector: Count-Min rows and Bloom filter rows (cells each, and how many); each of hh_cm and
 * hh_bloom holds its rows one after another (row r's cell i at r * width + i). */
#define HH_CM_WIDTH 16384
#define HH_CM_ROWS 4
#define HH_BLOOM_WIDTH 65536
#define HH_BLOOM_ROWS 3
/* Defaults of the detector_config table: report a key once its estimate in
 * the current window reaches HH_THRESHOLD reads; windows of 2^HH_WINDOW_SHIFT us. */
#define HH_THRESHOLD 16
#define HH_WINDOW_SHIFT 20

#endif
