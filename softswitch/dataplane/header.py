"""Headers and metadata: p4src/include/header.p4 as softswitch holds them.

:class:`Headers` keeps each parsed header as a mutable list of its fields in
wire order (``None`` when the header is invalid), indexed by the constants
below -- the DistCache header too (``DC_*``, the fields of distcache/wire.py):
a list is built straight from the unpacked tuple and packed back with no
per-field look-up, where a dict keyed by field name cost about a microsecond
per packet to build and emit; :class:`Meta` is ``metadata_t`` field for field,
zeroed per packet like v1model does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from distcache.wire import HEADER_FIELDS

ETH = struct.Struct("!6s6sH")
IPV4 = struct.Struct("!BBHHHBBH4s4s")
UDP = struct.Struct("!HHHH")
ETH_LEN, IPV4_LEN, UDP_LEN = ETH.size, IPV4.size, UDP.size
DC_FIELDS = tuple(name for name, _ in HEADER_FIELDS)

# indexes into the IPv4 list (ipv4_t)
IP_VER_IHL, IP_TOS, IP_TOTAL_LEN, IP_IDENT, IP_FLAGS_FRAG, IP_TTL, IP_PROTO, IP_CSUM, IP_SRC, IP_DST = range(10)
# indexes into the UDP list (udp_t)
UDP_SPORT, UDP_DPORT, UDP_LENGTH, UDP_CSUM = range(4)
# indexes into the DistCache list (dc_t): the fields of distcache/wire.py's HEADER_FIELDS, in wire order
(
    DC_VERSION,
    DC_OP,
    DC_FLAGS,
    DC_STATUS,
    DC_SEQ,
    DC_DIGEST,
    DC_TARGET,
    DC_SERVED_BY,
    DC_SPINE_ID,
    DC_LEAF_ID,
    DC_SPINE_LOAD,
    DC_LEAF_LOAD,
    DC_VLEN,
    DC_ALEN,
    DC_KLEN,
    DC_NCHUNKS,
    DC_RESERVED,
) = range(17)
assert all(DC_FIELDS[globals()["DC_" + name.upper()]] == name for name in DC_FIELDS), "DC_* out of wire order"
assert len(DC_FIELDS) == 17


@dataclass(slots=True)
class Headers:
    """headers_t: parsed headers (``None`` = invalid) plus the bytes no header covers."""

    packet_out: int | None = None  # packet_out_t.spine_id: only a packet-out from the CPU port has it
    eth: list | None = None  # [dst, src, type]
    ipv4: list | None = None  # see IP_* indexes
    udp: list | None = None  # see UDP_* indexes
    dc: list | None = None  # see DC_* indexes
    vals: list[bytes] = field(default_factory=list)
    payload: bytes = b""


@dataclass(slots=True)
class Meta:
    """metadata_t (the P4 struct), zero at the start of every packet."""

    # DcConfig
    switch_id: int = 0
    role: int = 0
    mechanism: int = 0
    port_kind: int = 0
    window_shift: int = 0
    epoch: int = 0
    # DcValidation
    dropped: bool = False
    op: int = 0
    # DcLiveness (leaves)
    from_spine: int = 0
    dead_after: int = 0  # liveness_config, in us: the threshold's floor
    dead_after_max: int = 0  # and its cap
    peak_decay_shift: int = 0  # the recent peak wait loses 1 us per 2^this us
    hold: int = 0
    probe_skip: int = 0  # a probe for a spine heard from within this many us is not sent (DcProbe)
    fenced: int = 0  # bit s: the controller failed spine s over; excluded until it clears the bit
    # DcProbe
    consumed: bool = False
    # DcCache
    cache_hit: bool = False
    slot: int = 0
    version: int = 0
    cache_epoch: int = 0
    served: bool = False
    # DcTelemetry
    load: int = 0
    # DcRouting
    spine_cand: int = 0
    leaf_cand: int = 0
    replicated: bool = False
    replica_slot: int = 0
    replica_alt: int = 0
    # DcForwarding
    transit: bool = False
    transit_slot: int = 0
    transit_id: int = 0
    alt_id: int = 0
    alt_dmac: int = 0
    alt_port: int = 0
    # next hop (DcRouting or DcForwarding), applied by DcForwarding
    routed: bool = False
    nhop_dmac: int = 0
    nhop_port: int = 0
    # standard_metadata
    ingress_port: int = 0
    packet_length: int = 0
    egress_spec: int = 0
    parser_error: str = "NoError"
    ingress_global_timestamp: int = 0  # us, as v1model's (softswitch: since the switch started)
