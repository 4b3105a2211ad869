/* The v1model spelling of the externs the shared controls use (p4src/include/).
 *
 * The controls are written once, against these macros and dc_io_t (header.p4); each architecture's
 * directory defines them for its own externs (p4src/psa/arch.p4 for PSA), the way fabric-tna keeps one
 * tree of controls under v1model/ and tna/ tops.  What differs is only spelling: v1model reads a
 * register into an out argument where PSA returns the value, hashes with a function where PSA has a Hash
 * object, and sends a digest from ingress where PSA sends it from the deparser.
 */
#ifndef DC_V1MODEL_ARCH_P4
#define DC_V1MODEL_ARCH_P4

#include <core.p4>
#include <v1model.p4>

/* DcIngress's architecture parameters, and the copy between them and dc_io_t (include/pipeline.p4).
 * BMv2's ingress_global_timestamp is in microseconds already.  A packet nobody routes leaves by
 * port 0, as v1model's egress_spec starts; a dropped one goes to BMv2's drop port. */
#define DC_INGRESS_ARCH_PARAMS inout standard_metadata_t standard_metadata
#define DC_IO_IN(IO) \
    IO.ingress_port = standard_metadata.ingress_port; \
    IO.now = standard_metadata.ingress_global_timestamp; \
    DC_PARSE_STATUS(IO) \
    IO.egress_port = 0; \
    IO.drop = 0
#define DC_IO_OUT(IO) \
    if (IO.drop == 1) { mark_to_drop(standard_metadata); } else { standard_metadata.egress_spec = IO.egress_port; }

/* register<T>(N): cells indexed by bit<32> */
#define DC_REGISTER_T(T) register<T>  /* its type, as a control's constructor parameter */
#define DC_REGISTER(T, N) register<T>(N)
#define DC_READ(REG, DST, INDEX) REG.read(DST, INDEX)
#define DC_WRITE(REG, W, INDEX, VALUE) REG.write(INDEX, VALUE)  /* W: the cell's width (PSA needs it) */

/* packet counters, indexed by bit<32> */
#define DC_COUNTER_T counter
#define DC_COUNTER(N) counter(N, CounterType.packets)

/* a packet meter; RED (a bool) says whether this packet is over its rate */
#define DC_METER(N) meter(N, MeterType.packets)
#define DC_METER_RED(METER, INDEX, RED) { \
    bit<2> dc_color; \
    METER.execute_meter<bit<2>>(INDEX, dc_color); \
    RED = dc_color == V1MODEL_METER_COLOR_RED; }

/* DST (bit<W>) = CRC32 (IEEE, as distcache/hashing.py) of the fields listed after MAX, modulo MAX */
#define DC_CRC32_UNIT
#define DC_CRC32(DST, W, MAX, ...) hash(DST, HashAlgorithm.crc32, (bit<32>)0, __VA_ARGS__, (bit<32>)(MAX))

/* one message of struct type T to the controller (receiver: a DIGEST_* constant) */
#define DC_DIGEST(T, RECEIVER, ...) digest<T>(RECEIVER, __VA_ARGS__)

#endif
