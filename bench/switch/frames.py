"""The frames the bed offers, built once: a GET for the cached key (a hit), a GET for a key nobody caches (a
miss), a plain UDP datagram (forwarding), the populate that fills the cache; keys chosen so their replies go up
spine port 2.  And the reader of a frame's UDP payload, for the checks."""

from __future__ import annotations

from dataclasses import dataclass

from bench.switch.config import (
    BUCKETS,
    CLIENT,
    CLUSTER,
    FILL_SEQ,
    LEAF,
    PLAIN_DPORT,
    SERVER,
    SPINE_PORTS,
    UDP_SPORT,
    VALUE,
    VERSION_TAG,
    SetupError,
)
from distcache import p4names
from distcache.hashing import h0
from distcache.scapy_layer import frame as dc_frame
from distcache.wire import DC_PORT, HEADER_LEN, Message, Op, populate_invalidate
from p4rt.plan import plan


def _transit_port(p: object) -> dict[int, int]:
    """transit slot -> leaf port, from the plan's transit_spine entries."""
    return {
        dict(e.match_dict)[p4names.KEY_TRANSIT_SLOT]: dict(e.params_dict)["port"]
        for e in p.entries
        if e.table == p4names.TRANSIT_SPINE
    }


def pick_key(stem: str, transit: dict[int, int], port: int) -> bytes:
    """A key whose replies the leaf sends up ``port`` (its digest's h0 transit slot maps there)."""
    for i in range(10_000):
        k = f"{stem}{i}".encode()
        if transit.get(h0(CLUSTER.digest(k)) & (p4names.TRANSIT_SLOTS - 1)) == port:
            return k
    raise SetupError(f"no key goes up port {port}")


@dataclass
class Frames:
    hit_key: bytes
    miss_key: bytes
    fill: list[bytes]  # INVALIDATE, UPDATE from the server port
    paths: dict[str, bytes]  # path -> the frame offered on IN_PORT


def build_frames() -> Frames:
    transit = _transit_port(plan(CLUSTER, LEAF, BUCKETS))
    hit_key = pick_key("bench-hit-", transit, SPINE_PORTS[0])  # requests in on port 3, replies out on port 2
    miss_key = pick_key("bench-miss-", transit, SPINE_PORTS[0])
    hit, owner = CLUSTER.digest(hit_key), CLUSTER.spine_address(BUCKETS[h0(CLUSTER.digest(hit_key))])
    # a populate of the leaf's own entry, as the shim sends it: the INVALIDATE carries the entry's tag (only it
    # arms a new entry), both are addressed to the leaf, which reflects them back to the server
    fill = [
        bytes(dc_frame(m, SERVER.ip, owner, sport=DC_PORT, dport=DC_PORT))
        for m in (
            populate_invalidate(hit, FILL_SEQ, LEAF.switch_id, 0, VERSION_TAG),
            Message(op=Op.UPDATE, digest=hit, seq=FILL_SEQ, value=VALUE, target=LEAF.switch_id),
        )
    ]

    def get(k: bytes) -> bytes:
        return bytes(
            dc_frame(
                Message(Op.GET, k, CLUSTER.digest(k), seq=7, target=LEAF.switch_id),
                CLIENT.ip,
                SERVER.ip,
                sport=UDP_SPORT,
            )
        )

    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    plain = bytes(
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src=CLIENT.ip, dst=SERVER.ip)
        / UDP(sport=UDP_SPORT, dport=PLAIN_DPORT)
        / Raw(b"x" * HEADER_LEN)
    )  # as long as a GET
    return Frames(hit_key, miss_key, fill, {"hit": get(hit_key), "miss": get(miss_key), "fwd": plain})


def udp_payload(frame: bytes) -> tuple[int, int, bytes] | None:
    """(ttl, UDP destination port, payload) of an Ethernet/IPv4/UDP frame, else None."""
    if len(frame) < 42 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    ihl = (frame[14] & 0x0F) * 4
    total = int.from_bytes(frame[16:18], "big")
    udp = 14 + ihl
    return frame[22], int.from_bytes(frame[udp + 2 : udp + 4], "big"), frame[udp + 8 : 14 + total]
