"""Malformed input and trust: each drop reason, counted once, nothing out.

A storage-rack leaf (sl0) is the switch under test unless a test says otherwise;
port 1 faces its server (storage), ports 2 and 3 the spines (fabric).
"""

from __future__ import annotations

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from distcache import p4names
from distcache.cluster import Mechanism, Role
from distcache.p4names import DropReason, Stat
from distcache.wire import DC_PORT, MAX_VALUE, Message, Op, encode
from tests.ptf.dctest import (
    CL0,
    CLIENT,
    CLIENT_PORT,
    HOST_MAC,
    KEY,
    SERVER,
    SERVER1,
    SL0,
    SP0,
    SWITCH_MAC,
    C,
    DcTest,
    dc_frame,
    routed,
)

GET = encode(Message(Op.GET, digest=KEY, target=SL0.switch_id))
PUT = encode(Message(Op.PUT, digest=KEY, value=b"a" * 20))


class _Drop(DcTest):
    """Send one frame, see nothing come out, and exactly ``reason`` counted once."""

    def dropped(self, port: int, pkt: object, reason: DropReason) -> None:
        self.send(port, pkt)
        got = self.wait_counter(p4names.DC_DROPS, int(reason), 1)
        self.expect_none()
        self.assertEqual(got, 1, f"dc_drops[{reason.name}]")
        others = {r.name: self.drops(r) for r in DropReason if r != reason}
        self.assertEqual(sum(others.values()), 0, f"other drop reasons counted: {others}")


class TruncatedHeader(_Drop):
    def runTest(self) -> None:
        self.dropped(2, dc_frame(CLIENT.ip, SERVER.ip, GET[:20]), DropReason.TRUNCATED)


class TruncatedValue(_Drop):
    def runTest(self) -> None:
        self.dropped(2, dc_frame(CLIENT.ip, SERVER.ip, PUT[:-16]), DropReason.TRUNCATED)


class TruncatedIpv4(_Drop):
    def runTest(self) -> None:
        self.dropped(2, Ether(dst=SL0.mac, type=0x0800) / Raw(b"\x45\x00\x00\x14" + b"\x00" * 6), DropReason.TRUNCATED)


class BadVersion(_Drop):
    def runTest(self) -> None:
        self.dropped(2, dc_frame(CLIENT.ip, SERVER.ip, b"\x07" + GET[1:]), DropReason.BAD_VERSION)


class UnknownOp(_Drop):
    def runTest(self) -> None:
        self.dropped(2, dc_frame(CLIENT.ip, SERVER.ip, GET[:1] + b"\x42" + GET[2:]), DropReason.UNKNOWN_OP)


class TooManyChunks(_Drop):
    """nchunks > 8: the parser refuses to go on."""

    def runTest(self) -> None:
        self.dropped(2, dc_frame(CLIENT.ip, SERVER.ip, GET[:50] + b"\x09\x00"), DropReason.BAD_CHUNKS)


class ChunksDisagreeWithLength(_Drop):
    def runTest(self) -> None:
        bad = PUT[:50] + b"\x01\x00" + b"a" * 16  # vlen 20 needs 2 chunks, says 1
        self.dropped(2, dc_frame(CLIENT.ip, SERVER.ip, bad), DropReason.BAD_CHUNKS)


class ValueLengthOverLimit(_Drop):
    def runTest(self) -> None:
        bad = PUT[:40] + (MAX_VALUE + 1).to_bytes(4, "big") + PUT[44:50] + b"\x00\x00"
        self.dropped(2, dc_frame(CLIENT.ip, SERVER.ip, bad), DropReason.BAD_CHUNKS)


class GetCarryingAValueOrArguments(_Drop):
    """A GET carries its key only: a hit's reply length counts on it (cache.p4), so one with a value or an
    argument block is dropped where it enters."""

    def runTest(self) -> None:
        with_value = encode(Message(Op.GET, digest=KEY, target=SL0.switch_id, value=b"v" * 300))
        self.dropped(2, dc_frame(CLIENT.ip, SERVER.ip, with_value), DropReason.BAD_CHUNKS)
        with_args = GET[:44] + (8).to_bytes(4, "big") + GET[48:] + bytes(8)
        self.send(2, dc_frame(CLIENT.ip, SERVER.ip, with_args))
        self.assertEqual(self.wait_counter(p4names.DC_DROPS, int(DropReason.BAD_CHUNKS), 2), 2)
        self.expect_none()


class NotIpv4(_Drop):
    def runTest(self) -> None:
        host = "02:00:00:00:00:01"
        arp = Ether(dst=SL0.mac, src=host) / ARP(pdst=SERVER.ip, psrc=CLIENT.ip, hwsrc=host)
        self.dropped(2, arp, DropReason.NOT_IPV4)


class Ipv4HeaderLengthBelowFive(_Drop):
    def runTest(self) -> None:
        raw = bytearray(bytes(dc_frame(CLIENT.ip, SERVER.ip, GET)))
        raw[14] = 0x44  # ihl 4
        self.dropped(2, Ether(bytes(raw)), DropReason.PARSER_OTHER)


class DistCacheBehindIpOptionsIsPlainIpv4(DcTest):
    """A DistCache message behind IPv4 options is payload to the switch (parser.p4): a read of a key the leaf
    holds goes on to its server as plain IPv4, byte for byte but TTL and checksum, and nothing counts it or
    answers it from the cache; and an INVALIDATE behind options reaches no cache."""

    def runTest(self) -> None:
        value = b"cached at the leaf"
        self.fill(KEY, slot=3, version=9, value=value, seq=100)
        counted = (Stat.READ_HIT, Stat.READ_MISS, Stat.INVALIDATE, Stat.UPDATE)
        before = [self.stat(s) for s in counted]
        nop = b"\x01\x01\x01\x00"  # NOP NOP NOP EOL
        get = dc_frame(CLIENT.ip, SERVER.ip, Message(Op.GET, digest=KEY, seq=41, target=SL0.switch_id), ip_options=nop)
        self.send(2, get)
        self.expect(routed(get, SERVER.mac), 1)
        self.expect_none()
        inval = dc_frame(
            SERVER.ip, CLIENT.ip, Message(Op.INVALIDATE, digest=KEY, seq=101), sport=DC_PORT, ip_options=nop
        )
        self.send(1, inval)
        self.expect(routed(inval, SP0.mac), 2)
        self.expect_none()
        self.assertEqual([self.stat(s) for s in counted], before)
        self.assertEqual(self.counter(p4names.CACHE_HITS, 3), 0)
        port, reply = self.exchange(
            2, dc_frame(CLIENT.ip, SERVER.ip, Message(Op.GET, digest=KEY, seq=42, target=SL0.switch_id))
        )
        self.assertEqual((port, reply.op, reply.value), (2, Op.GET_REPLY, value))  # the INVALIDATE was none here
        self.expect_none()


class NoRoute(_Drop):
    def runTest(self) -> None:
        self.dropped(1, dc_frame(SERVER.ip, "192.0.2.1", Message(Op.GET, digest=KEY)), DropReason.NO_ROUTE)


class CoherenceFromFabricIsUntrusted(_Drop):
    """Only storage ports may write caches: an INVALIDATE from a spine port is refused."""

    def runTest(self) -> None:
        self.cache(KEY, 0, 1)
        self.dropped(2, self.coherence(Op.INVALIDATE, 1), DropReason.UNTRUSTED)


class UpdateFromClientIsUntrusted(_Drop):
    role = CL0

    def runTest(self) -> None:
        self.dropped(
            1,
            dc_frame(CLIENT.ip, SERVER.ip, Message(Op.UPDATE, digest=KEY, seq=1, value=b"evil")),
            DropReason.UNTRUSTED,
        )


class AckFromClientIsUntrusted(_Drop):
    role = CL0

    def runTest(self) -> None:
        self.dropped(
            1, dc_frame(CLIENT.ip, SERVER.ip, Message(Op.INVALIDATE_ACK, digest=KEY, seq=1)), DropReason.UNTRUSTED
        )


class ReplyFromClientIsUntrusted(_Drop):
    """A client forging a reply (with a huge spine load) is dropped at its leaf and steers nothing."""

    role = CL0

    def runTest(self) -> None:
        forged = Message(Op.GET_REPLY, digest=KEY, seq=1, spine_id=SP0.switch_id, spine_load=0xFFFFFFFF)
        self.dropped(1, dc_frame(CLIENT.ip, SERVER.ip, forged, sport=DC_PORT, dport=CLIENT_PORT), DropReason.UNTRUSTED)
        self.assertEqual(self.stat(p4names.Stat.LOAD_RECORDED), 0)
        # with no load recorded, an even seq ties to the spine
        _, m = self.read(1, 0, seq=2)
        self.assertEqual(m.target, SP0.switch_id)


class ExecReplyFromClientIsUntrusted(_Drop):
    """A command's reply is a reply too: one forged by a client (with a huge spine load) is dropped at its leaf."""

    role = CL0

    def runTest(self) -> None:
        forged = Message(Op.EXEC_REPLY, digest=KEY, seq=1, spine_id=SP0.switch_id, spine_load=0xFFFFFFFF)
        self.dropped(1, dc_frame(CLIENT.ip, SERVER.ip, forged, sport=DC_PORT, dport=CLIENT_PORT), DropReason.UNTRUSTED)
        self.assertEqual(self.stat(p4names.Stat.LOAD_RECORDED), 0)


class ReplyFromClientLeafIsUntrustedAtSpine(_Drop):
    """At a spine, ports facing client racks are client ports: replies from them are refused."""

    role = SP0

    def runTest(self) -> None:
        forged = Message(Op.GET_REPLY, digest=KEY, seq=1, leaf_id=SL0.switch_id, leaf_load=7)
        self.dropped(3, dc_frame(CLIENT.ip, SERVER.ip, forged, sport=DC_PORT, dport=CLIENT_PORT), DropReason.UNTRUSTED)


class SpoofedSourceFromClientIsDropped(_Drop):
    """A client sending as another host (here: a storage server) is dropped at its leaf: it could otherwise aim
    replies at a victim, or pass for another client in the shims' retry detection."""

    role = CL0

    def runTest(self) -> None:
        self.dropped(1, dc_frame(SERVER.ip, SERVER1.ip, Message(Op.GET, digest=KEY, seq=1)), DropReason.SPOOFED)


class SpoofedPlainUdpFromClientIsDropped(_Drop):
    role = CL0

    def runTest(self) -> None:
        pkt = (
            Ether(src=HOST_MAC, dst=SWITCH_MAC)
            / IP(src=C.client(1, 0).ip, dst=SERVER.ip)
            / UDP(sport=4000, dport=5000)
            / Raw(b"x" * 20)
        )
        self.dropped(1, pkt, DropReason.SPOOFED)


class SpineAcceptsOnlyTheClientRackPrefix(_Drop):
    """At a spine, a client-rack port carries its rack's prefix only: rack 1's address from rack 0's port is
    spoofed; rack 0's own addresses pass."""

    role = SP0

    def runTest(self) -> None:
        get = Message(Op.GET, digest=KEY, seq=1, target=SP0.switch_id)
        self.send(3, dc_frame("10.2.0.77", SERVER.ip, get))  # any host of rack 0
        port, _ = self.receive()
        self.assertNotEqual(port, 3)
        self.dropped(3, dc_frame(C.client(1, 0).ip, SERVER.ip, get), DropReason.SPOOFED)


class NoConfigNoDistCache(DcTest):
    """A switch with no role is a plain router: DistCache messages are forwarded untouched but for the UDP checksum."""

    def runTest(self) -> None:
        self.configure(SL0.switch_id, int(Role.NONE), int(Mechanism.DISTCACHE))
        pkt = dc_frame(CLIENT.ip, SERVER.ip, Message(Op.GET, digest=KEY, target=SL0.switch_id), udp_checksum=0)
        self.send(2, pkt)
        self.expect(routed(pkt, SERVER.mac), 1)
        self.expect_none()
