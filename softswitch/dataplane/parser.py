"""DcParser, DcComputeChecksum and DcDeparser (p4src/include/parser.p4)."""

from __future__ import annotations

from distcache.inet import csum16
from distcache.p4defines import IPV4_MIN_IHL, PROTO_UDP, TYPE_IPV4
from distcache.p4names import CPU_PORT, PACKET_OUT_FIELDS, PROBE_PORT
from distcache.wire import CHUNK_LEN, DC_PORT, HEADER_LEN, HEADER_STRUCT, MAX_CHUNKS, VERSION
from softswitch.dataplane.header import (
    DC_FIELDS,
    DC_NCHUNKS,
    DC_VERSION,
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
_CSUM_AT = 10  # the IPv4 checksum's byte offset
assert IPV4.size == IPV4_LEN and IPV4.format.startswith("!") and IP_CSUM == 7
assert len(HEADER_STRUCT.unpack(bytes(HEADER_LEN))) == len(DC_FIELDS), "h.dc holds the struct's fields, DC_* index them"
NO_ERROR, PACKET_TOO_SHORT = "NoError", "PacketTooShort"
DC_BAD_VERSION, DC_BAD_CHUNKS, IPV4_BAD_IHL = "DcBadVersion", "DcBadChunks", "Ipv4BadIhl"


def parse(pkt: bytes, ingress_port: int = 0) -> tuple[Headers, str]:
    """The headers of ``pkt`` and the parser error (``NoError`` if none).

    A packet-out (from ``CPU_PORT``), and a frame of a leaf's local probe source (``PROBE_PORT``), starts
    with its packet_out header (the spine id, one byte).
    (Each header is kept in a local as well as in ``h``: attribute reads cost, and this runs per packet.)"""
    h = Headers()
    size = len(pkt)
    off = 0
    if ingress_port in (CPU_PORT, PROBE_PORT):
        if size < 1:
            return h, PACKET_TOO_SHORT
        h.packet_out = pkt[0]
        off = 1
    if size < off + ETH_LEN:
        return h, PACKET_TOO_SHORT
    h.eth = eth = list(ETH.unpack_from(pkt, off))
    off += ETH_LEN
    if eth[2] != TYPE_IPV4:
        h.payload = pkt[off:]
        return h, NO_ERROR
    if size < off + IPV4_LEN:
        return h, PACKET_TOO_SHORT
    h.ipv4 = ip = list(IPV4.unpack_from(pkt, off))
    off += IPV4_LEN
    ihl = ip[0] & 0x0F
    if ihl < IPV4_MIN_IHL:
        return h, IPV4_BAD_IHL
    if ihl > IPV4_MIN_IHL or not ((ip[4] & 0x1FFF) == 0 and ip[6] == PROTO_UDP):  # options: payload from here
        h.payload = pkt[off:]
        return h, NO_ERROR
    if size < off + UDP_LEN:
        return h, PACKET_TOO_SHORT
    h.udp = udp = list(UDP.unpack_from(pkt, off))
    off += UDP_LEN
    if udp[1] != DC_PORT and udp[0] != DC_PORT:
        h.payload = pkt[off:]
        return h, NO_ERROR
    if size < off + HEADER_LEN:
        return h, PACKET_TOO_SHORT
    h.dc = dc = list(HEADER_STRUCT.unpack_from(pkt, off))
    off += HEADER_LEN
    if dc[DC_VERSION] != VERSION:
        return h, DC_BAD_VERSION
    nchunks = dc[DC_NCHUNKS]
    if nchunks > MAX_CHUNKS:
        return h, DC_BAD_CHUNKS
    if nchunks:
        vals = h.vals
        for _ in range(nchunks):
            if size < off + CHUNK_LEN:
                return h, PACKET_TOO_SHORT
            vals.append(pkt[off : off + CHUNK_LEN])
            off += CHUNK_LEN
    h.payload = pkt[off:]
    return h, NO_ERROR


def deparse(h: Headers) -> bytes:
    """DcComputeChecksum, then DcDeparser: emit the valid headers in order (packet_out never is).

    An option-less IPv4 header is packed once, with its checksum field 0, the checksum computed over those
    bytes and spliced in; one with options (payload to the parser) keeps the checksum DcForwarding left."""
    out = [ETH.pack(*h.eth)] if h.eth else []
    ip = h.ipv4
    if ip:
        if ip[0] & 0x0F == IPV4_MIN_IHL:
            ip[IP_CSUM] = 0
            raw = IPV4.pack(*ip)
            ip[IP_CSUM] = csum = csum16(raw)
            out.append(raw[:_CSUM_AT] + csum.to_bytes(2, "big") + raw[_CSUM_AT + 2 :])
        else:
            out.append(IPV4.pack(*ip))
    if h.udp:
        out.append(UDP.pack(*h.udp))
    if h.dc:
        out.append(HEADER_STRUCT.pack(*h.dc))
    out.extend(h.vals)
    out.append(h.payload)
    return b"".join(out)
