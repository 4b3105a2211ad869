/* The PSA spelling of the externs the shared controls use (p4src/include/), for p4c-ebpf.
 * See ../v1model/arch.p4 for what each macro means.
 *
 * Known gaps (the PSA build is not a target yet; README, p4src/psa/distcache.p4): the port is cut from an
 * interface index to 9 bits (to be translated by tables the server fills); timestamps are turned from ns
 * into us by a division. */
#ifndef DC_PSA_ARCH_P4
#define DC_PSA_ARCH_P4

#include <core.p4>
#include <psa.p4>

#define DC_INGRESS_ARCH_PARAMS in psa_ingress_input_metadata_t istd, inout psa_ingress_output_metadata_t ostd
#define DC_IO_IN(IO) \
    IO.ingress_port = (bit<9>)(PortIdUint_t)istd.ingress_port; \
    IO.now = (bit<48>)((TimestampUint_t)istd.ingress_timestamp / 1000); \
    DC_PARSE_STATUS(IO) \
    IO.egress_port = 0; \
    IO.drop = 0
#define DC_IO_OUT(IO) \
    if (IO.drop == 1) { \
        ostd.drop = true; \
    } else { \
        ostd.drop = false; ostd.multicast_group = (MulticastGroup_t)0; \
        ostd.egress_port = (PortId_t)(PortIdUint_t)IO.egress_port; }

#define DC_REGISTER_T(T) Register<T, bit<32>>  /* its type, as a control's constructor parameter */
#define DC_REGISTER(T, N) Register<T, bit<32>>(N)
/* through metadata_t's dc_index and dc_w<W>: p4c-ebpf passes the address of a register's index and value to
 * the BPF map calls (an expression as &(expr), which C rejects), and a local whose address is taken stays on
 * the program's 512-byte stack for the whole of it; metadata lives in a per-CPU map */
#define DC_READ(REG, DST, INDEX) { meta.dc_index = (bit<32>)(INDEX); DST = REG.read(meta.dc_index); }
#define DC_WRITE(REG, W, INDEX, VALUE) { \
    meta.dc_index = (bit<32>)(INDEX); meta.dc_w##W = VALUE; REG.write(meta.dc_index, meta.dc_w##W); }
#define DC_COUNTER_T Counter<bit<32>, bit<32>>
#define DC_COUNTER(N) Counter<bit<32>, bit<32>>(N, PSA_CounterType_t.PACKETS)
#define DC_METER(N) Meter<bit<32>>(N, PSA_MeterType_t.PACKETS)
#define DC_METER_RED(METER, INDEX, OUT) OUT = METER.execute(INDEX) == PSA_MeterColor_t.RED
#define DC_CRC32_UNIT Hash<bit<32>>(PSA_HashAlgorithm_t.CRC32) dc_crc32;
#define DC_CRC32(DST, W, MAX, ...) DST = (bit<W>)dc_crc32.get_hash((bit<32>)0, __VA_ARGS__, (bit<32>)(MAX))
#define DC_DIGEST(T, RECEIVER, ...) meta.dc_##T = __VA_ARGS__; meta.dc_##T##_send = 1

#endif
