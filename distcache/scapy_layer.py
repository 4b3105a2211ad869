"""A scapy layer for the DistCache header, for debugging, captures and PTF tests.

Its fields are generated from :data:`distcache.wire.HEADER_FIELDS`, so it
cannot drift from the codec.  What follows the header (chunks | key | args | raw value) is the payload.

    >>> from distcache.scapy_layer import DistCache
    >>> pkt = Ether()/IP(dst="10.1.0.1")/UDP(sport=40000, dport=8888)/DistCache(op=1, digest=bytes(16))
"""

from __future__ import annotations

from scapy.fields import ByteEnumField, ByteField, IntField, LongField, ShortField, StrFixedLenField
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers

from distcache.wire import DC_PORT, DIGEST_LEN, HEADER_LEN, VERSION, Message, Op, encode

_ENUMS = {"op": {int(o): o.name for o in Op}}


def _field(name: str, bits: int):  # noqa: ANN202 - scapy field objects
    default = VERSION if name == "version" else 0
    if bits == 8:
        return ByteEnumField(name, default, _ENUMS[name]) if name in _ENUMS else ByteField(name, default)
    if bits == 16:
        return ShortField(name, default)
    if bits == 32:
        return IntField(name, default)
    if bits == 64:
        return LongField(name, default)
    if bits == DIGEST_LEN * 8:
        return StrFixedLenField(name, b"\0" * DIGEST_LEN, length=DIGEST_LEN)
    raise ValueError(f"no scapy field for {bits}-bit {name}")


class DistCache(Packet):
    """The 52-byte DistCache header; ``vlen``, ``alen``, ``klen`` and ``nchunks`` describe the payload."""

    from distcache.wire import HEADER_FIELDS as _F

    name = "DistCache"
    fields_desc = [_field(n, w) for n, w in _F]  # noqa: RUF012 - scapy reads the class attribute
    del _F


bind_layers(UDP, DistCache, dport=DC_PORT)
bind_layers(UDP, DistCache, sport=DC_PORT)


def frame(
    msg: Message,
    src: str,
    dst: str,
    sport: int = 40000,
    dport: int = DC_PORT,
    smac: str = "02:00:00:00:00:01",
    dmac: str = "02:00:00:00:00:02",
) -> Packet:
    """A full Ether/IP/UDP/DistCache frame carrying ``msg`` (value padded to chunks as on the wire)."""
    body = encode(msg)
    hdr, payload = DistCache(body[:HEADER_LEN]), body[HEADER_LEN:]
    pkt = Ether(src=smac, dst=dmac) / IP(src=src, dst=dst) / UDP(sport=sport, dport=dport) / hdr
    return pkt / Raw(payload) if payload else pkt
