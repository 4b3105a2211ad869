"""DcParser, DcComputeChecksum and DcDeparser (p4src/include/parser.p4)."""

from __future__ import annotations

import struct

from distcache.p4defines import IPV4_MIN_IHL, PROTO_UDP, TYPE_IPV4
from distcache.p4names import CPU_PORT, PACKET_OUT_FIELDS, PROBE_PORT
from distcache.wire import CHUNK_LEN, DC_PORT, HEADER_LEN, HEADER_STRUCT, MAX_CHUNKS, VERSION
from softswitch.dataplane.header import (
    DC_FIELDS,
    ETH,
    ETH_LEN,
    IP_CSUM,
    IPV4,
    IPV4_LEN,
    UDP,
    UDP_LEN,
    Headers,
)

assert PACKET_OUT_FIELDS == (("spine_id", 8),), "parse() reads packet_out_t as one byte"
NO_ERROR, PACKET_TOO_SHORT = "NoError", "PacketTooShort"
DC_BAD_VERSION, DC_BAD_CHUNKS, IPV4_BAD_IHL = "DcBadVersion", "DcBadChunks", "Ipv4BadIhl"


def parse(pkt: bytes, ingress_port: int = 0) -> tuple[Headers, str]:
    """The headers of ``pkt`` and the parser error (``NoError`` if none).

    A packet-out (from ``CPU_PORT``), and a frame of a leaf's local probe source (``PROBE_PORT``), starts
    with its packet_out header (the spine id, one byte)."""
    h = Headers()
    off = 0
    if ingress_port in (CPU_PORT, PROBE_PORT):
        if len(pkt) < 1:
            return h, PACKET_TOO_SHORT
        h.packet_out = pkt[0]
        off = 1
    if len(pkt) < off + ETH_LEN:
        return h, PACKET_TOO_SHORT
    h.eth = list(ETH.unpack_from(pkt, off))
    off += ETH_LEN
    if h.eth[2] != TYPE_IPV4:
        h.payload = pkt[off:]
        return h, NO_ERROR
    if len(pkt) < off + IPV4_LEN:
        return h, PACKET_TOO_SHORT
    h.ipv4 = list(IPV4.unpack_from(pkt, off))
    off += IPV4_LEN
    ihl = h.ipv4[0] & 0x0F
    if ihl < IPV4_MIN_IHL:
        return h, IPV4_BAD_IHL
    if ihl > IPV4_MIN_IHL:
        n = (ihl - IPV4_MIN_IHL) * 4
        if len(pkt) < off + n:
            return h, PACKET_TOO_SHORT
        h.ipv4_options = pkt[off : off + n]
        off += n
    if not ((h.ipv4[4] & 0x1FFF) == 0 and h.ipv4[6] == PROTO_UDP):
        h.payload = pkt[off:]
        return h, NO_ERROR
    if len(pkt) < off + UDP_LEN:
        return h, PACKET_TOO_SHORT
    h.udp = list(UDP.unpack_from(pkt, off))
    off += UDP_LEN
    if h.udp[1] != DC_PORT and h.udp[0] != DC_PORT:
        h.payload = pkt[off:]
        return h, NO_ERROR
    if len(pkt) < off + HEADER_LEN:
        return h, PACKET_TOO_SHORT
    h.dc = dict(zip(DC_FIELDS, HEADER_STRUCT.unpack_from(pkt, off), strict=True))
    off += HEADER_LEN
    if h.dc["version"] != VERSION:
        return h, DC_BAD_VERSION
    nchunks = h.dc["nchunks"]
    if nchunks > MAX_CHUNKS:
        return h, DC_BAD_CHUNKS
    for _ in range(nchunks):
        if len(pkt) < off + CHUNK_LEN:
            return h, PACKET_TOO_SHORT
        h.vals.append(pkt[off : off + CHUNK_LEN])
        off += CHUNK_LEN
    h.payload = pkt[off:]
    return h, NO_ERROR


def ipv4_checksum(fields: list, options: bytes | None) -> int:
    """csum16 over the IPv4 header (checksum field as 0) and its options."""
    raw = IPV4.pack(*fields[:IP_CSUM], 0, *fields[IP_CSUM + 1 :]) + (options or b"")
    s = sum(struct.unpack(f"!{len(raw) // 2}H", raw))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def deparse(h: Headers) -> bytes:
    """DcComputeChecksum, then DcDeparser: emit the valid headers in order (packet_out never is)."""
    out = [ETH.pack(*h.eth)] if h.eth else []
    if h.ipv4:
        h.ipv4[IP_CSUM] = ipv4_checksum(h.ipv4, h.ipv4_options)
        out.append(IPV4.pack(*h.ipv4))
        if h.ipv4_options:
            out.append(h.ipv4_options)
    if h.udp:
        out.append(UDP.pack(*h.udp))
    if h.dc:
        out.append(HEADER_STRUCT.pack(*(h.dc[f] for f in DC_FIELDS)))
    out.extend(h.vals)
    out.append(h.payload)
    return b"".join(out)
