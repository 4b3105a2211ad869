"""Headers and metadata: p4src/include/header.p4 as softswitch holds them.

:class:`Headers` keeps each parsed header as a mutable list (``None`` when the
header is invalid) and the DistCache header as a dict keyed by the field names
of distcache/wire.py; :class:`Meta` is ``metadata_t`` field for field, zeroed
per packet like v1model does.
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


@dataclass(slots=True)
class Headers:
    """headers_t: parsed headers (``None`` = invalid) plus the bytes no header covers."""

    packet_out: int | None = None  # packet_out_t.spine_id: only a packet-out from the CPU port has it
    eth: list | None = None  # [dst, src, type]
    ipv4: list | None = None  # see IP_* indexes
    ipv4_options: bytes | None = None
    udp: list | None = None  # see UDP_* indexes
    dc: dict | None = None
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
