"""No packet can circle: TTL on every hop, and valley-free routing (issue 15, defect 6).

Every switch takes one off the IPv4 TTL of each packet it forwards (checksum
recomputed) and drops, counted as TTL_EXPIRED, a packet that arrives with TTL
0 or 1, before any other control counts it as a read, a load or a detector
hit.  A packet a switch answers (a cache hit, a reflected coherence message)
is the switch's own and starts again from TTL 64.

A leaf sends nothing that came down from a spine back up: from a fabric port
only the rack's hosts are destinations (rack_hosts), anything else is dropped
and counted as LOOP before it is looked at.  No switch sends a packet it did
not answer out of the port it came in by (a spine would otherwise hand a
leaf's packet for its own rack straight back).  Before this, a packet to an
unused address of a rack (a ping of the rack's gateway is enough) circled a
leaf and a spine for ever, its TTL wrapping from 0 to 255.
"""

from __future__ import annotations

from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from distcache import p4names
from distcache.p4names import DropReason, Stat
from distcache.wire import DC_PORT, Flag, Message, Op
from tests.ptf.dctest import (
    CL0,
    CLIENT,
    CLIENT_PORT,
    HOST_MAC,
    KEY,
    KEY1,
    SERVER,
    SL0,
    SP0,
    SWITCH_MAC,
    DcTest,
    dc_frame,
    routed,
    transit_spine,
)

UNUSED_STORAGE = "10.1.0.99"  # in storage rack 0's prefix, no host has it
CLIENT_GATEWAY = CLIENT.ip.rsplit(".", 1)[0] + ".254"  # what a client pings: its rack's gateway (no host)


def plain_udp(src: str, dst: str, ttl: int = 64) -> Packet:
    """A non-DistCache UDP frame."""
    pkt = (
        Ether(src=HOST_MAC, dst=SWITCH_MAC)
        / IP(src=src, dst=dst, ttl=ttl, id=1, flags=0)
        / UDP(sport=4000, dport=5000)
        / Raw(b"x" * 20)
    )
    return Ether(bytes(pkt))


def ping(src: str, dst: str, ttl: int = 64) -> Packet:
    pkt = (
        Ether(src=HOST_MAC, dst=SWITCH_MAC)
        / IP(src=src, dst=dst, ttl=ttl, id=1, flags=0)
        / ICMP(type=8, id=7, seq=1)
        / Raw(b"ping")
    )
    return Ether(bytes(pkt))


class _Loops(DcTest):
    def dropped(self, port: int, pkt: Packet, reason: DropReason, count: int = 1) -> None:
        """Send ``pkt``: nothing comes out, ``reason`` reaches ``count``, no other reason is counted."""
        self.send(port, pkt)
        got = self.wait_counter(p4names.DC_DROPS, int(reason), count)
        self.expect_none()
        self.assertEqual(got, count, f"dc_drops[{reason.name}]")
        others = {r.name: self.drops(r) for r in DropReason if r != reason and self.drops(r)}
        self.assertEqual(others, {}, "other drop reasons counted")

    def no_read_counted(self) -> None:
        """Nothing counted a read, a hit, a detector sample or a digest."""
        counted = {s.name: self.stat(s) for s in (Stat.READ_HIT, Stat.READ_MISS, Stat.HH_COUNTED, Stat.HH_REPORTED)}
        self.assertEqual(counted, dict.fromkeys(counted, 0))
        self.expect_no_digest()

    def leaf_load_is_zero(self) -> None:
        """A server reply passing the storage leaf carries its load of this window: 0 if no read counted."""
        msg = Message(op=Op.GET_REPLY, digest=KEY, seq=1, value=b"v")
        frame = dc_frame(SERVER.ip, CLIENT.ip, msg, sport=DC_PORT, dport=CLIENT_PORT, udp_checksum=0)
        self.send(1, frame)
        sp = transit_spine(KEY)
        stamped = Message(op=Op.GET_REPLY, digest=KEY, seq=1, value=b"v", leaf_id=SL0.switch_id, leaf_load=0)
        self.expect(
            routed(dc_frame(SERVER.ip, CLIENT.ip, stamped, sport=DC_PORT, dport=CLIENT_PORT, udp_checksum=0), sp.mac),
            2 if sp == SP0 else 3,
        )
        self.expect_none()


# ---- TTL ----------------------------------------------------------------------------------------


class ClientLeafTakesTtlToOne(DcTest):
    """TTL 2 in, TTL 1 out, IPv4 checksum recomputed, at each role: a client's PUT leaving cl0, a plain
    packet crossing a spine, a read reaching the server from sl0."""

    role = CL0

    def runTest(self) -> None:
        put = dc_frame(CLIENT.ip, SERVER.ip, Message(op=Op.PUT, digest=KEY, seq=1, value=b"v"), ttl=2, udp_checksum=0)
        self.send(1, put)
        want = routed(put, SP0.mac)
        self.assertEqual(want[IP].ttl, 1)
        self.expect(want, 2)
        self.expect_none()


class SpineTakesTtlToOne(DcTest):
    role = SP0

    def runTest(self) -> None:
        pkt = plain_udp(CLIENT.ip, SERVER.ip, ttl=2)
        self.send(3, pkt)
        self.expect(routed(pkt, SL0.mac), 1)
        self.expect_none()


class StorageLeafTakesTtlToOne(DcTest):
    def runTest(self) -> None:
        get = dc_frame(
            CLIENT.ip, SERVER.ip, Message(op=Op.GET, digest=KEY1, seq=3, target=SL0.switch_id), ttl=2, udp_checksum=0
        )
        self.send(2, get)
        self.expect(routed(get, SERVER.mac), 1)
        self.expect_none()


class TtlOneIsDroppedAtTheClientLeaf(_Loops):
    """TTL 1 and TTL 0 from a client: dropped, counted, not forwarded with TTL 0 or 255."""

    role = CL0

    def runTest(self) -> None:
        self.dropped(
            1, dc_frame(CLIENT.ip, SERVER.ip, Message(op=Op.GET, digest=KEY, seq=1), ttl=1), DropReason.TTL_EXPIRED
        )
        self.dropped(1, plain_udp(CLIENT.ip, SERVER.ip, ttl=0), DropReason.TTL_EXPIRED, 2)
        self.assertEqual((self.stat(Stat.ROUTED_SPINE), self.stat(Stat.ROUTED_LEAF)), (0, 0))


class TtlOneIsDroppedAtTheSpine(_Loops):
    """A read targeted at the spine, arriving with TTL 1: no read, no load, no detector sample."""

    role = SP0

    def runTest(self) -> None:
        self.enable_hot_key_digests(threshold=1)
        self.dropped(
            3,
            dc_frame(CLIENT.ip, SERVER.ip, Message(op=Op.GET, digest=KEY, seq=1, target=SP0.switch_id), ttl=1),
            DropReason.TTL_EXPIRED,
        )
        self.dropped(1, plain_udp(SERVER.ip, CLIENT.ip, ttl=1), DropReason.TTL_EXPIRED, 2)
        self.no_read_counted()
        # a reply passing the spine carries load 0: the dropped read was not counted
        msg = Message(op=Op.GET_REPLY, digest=KEY, seq=1, value=b"v")
        frame = dc_frame(SERVER.ip, CLIENT.ip, msg, sport=DC_PORT, dport=CLIENT_PORT, udp_checksum=0)
        self.send(1, frame)
        stamped = Message(op=Op.GET_REPLY, digest=KEY, seq=1, value=b"v", spine_id=SP0.switch_id, spine_load=0)
        self.expect(
            routed(dc_frame(SERVER.ip, CLIENT.ip, stamped, sport=DC_PORT, dport=CLIENT_PORT, udp_checksum=0), CL0.mac),
            3,
        )


class ExpiringReadIsNotAnsweredNorCounted(_Loops):
    """At the storage leaf, a read of a cached key arriving with TTL 1 is dropped before the cache, the
    load and the detector see it (a looping read used to count at every pass)."""

    def runTest(self) -> None:
        self.fill(KEY, slot=3, version=9, value=b"cached", seq=100)
        self.enable_hot_key_digests(threshold=1)
        self.dropped(
            2,
            dc_frame(CLIENT.ip, SERVER.ip, Message(op=Op.GET, digest=KEY, seq=5, target=SL0.switch_id), ttl=1),
            DropReason.TTL_EXPIRED,
        )
        self.dropped(
            2,
            dc_frame(CLIENT.ip, SERVER.ip, Message(op=Op.GET, digest=KEY1, seq=6, target=SL0.switch_id), ttl=1),
            DropReason.TTL_EXPIRED,
            2,
        )
        self.no_read_counted()
        self.assertEqual(self.counter(p4names.CACHE_HITS, 3), 0)
        self.leaf_load_is_zero()


class AnswerStartsAFreshTtl(DcTest):
    """A read that reaches its cache with TTL 2 is answered: the reply is the switch's own packet and
    leaves with TTL 64 less this hop (63), whatever TTL the request had left."""

    role = SP0

    def runTest(self) -> None:
        self.fill(KEY, slot=0, version=1, value=b"spine value", seq=5)
        self.send(3, dc_frame(CLIENT.ip, SERVER.ip, Message(op=Op.GET, digest=KEY, seq=8, target=SP0.switch_id), ttl=2))
        want = Message(
            op=Op.GET_REPLY,
            digest=KEY,
            seq=8,
            value=b"spine value",
            flags=Flag.CACHED,
            target=SP0.switch_id,
            served_by=SP0.switch_id,
            spine_id=SP0.switch_id,
            spine_load=1,
        )
        self.expect(
            dc_frame(
                SERVER.ip,
                CLIENT.ip,
                want,
                sport=DC_PORT,
                dport=CLIENT_PORT,
                smac=SWITCH_MAC,
                dmac=CL0.mac,
                ttl=63,
                udp_checksum=0,
            ),
            3,
        )
        self.expect_none()


# ---- valley-free routing ------------------------------------------------------------------------


class DownFromASpineToNoHostIsDroppedAtTheStorageLeaf(_Loops):
    """A read for an unused address of the rack, come down from a spine, is dropped as LOOP (it used to go
    back up through the catch-all route), before the cache, the load or the detector counts it."""

    def runTest(self) -> None:
        self.enable_hot_key_digests(threshold=1)
        get = Message(op=Op.GET, digest=KEY1, seq=4, target=SL0.switch_id)
        self.dropped(2, dc_frame(CLIENT.ip, UNUSED_STORAGE, get), DropReason.LOOP)
        self.dropped(3, plain_udp(CLIENT.ip, SERVER.ip.rsplit(".", 1)[0] + ".254"), DropReason.LOOP, 2)
        self.no_read_counted()
        self.leaf_load_is_zero()


class DownFromASpineToNoHostIsDroppedAtTheClientLeaf(_Loops):
    role = CL0

    def runTest(self) -> None:
        self.dropped(2, ping(SERVER.ip, CLIENT_GATEWAY), DropReason.LOOP)
        reply = Message(op=Op.GET_REPLY, digest=KEY, seq=1, spine_id=SP0.switch_id, spine_load=5)
        self.dropped(3, dc_frame(SERVER.ip, "10.2.0.77", reply, sport=DC_PORT, dport=CLIENT_PORT), DropReason.LOOP, 2)
        self.assertEqual(self.stat(Stat.LOAD_RECORDED), 0)


class DownFromASpineToAHostGoesDown(DcTest):
    """What comes down for a host of the rack still reaches it (plain traffic and replies)."""

    role = CL0

    def runTest(self) -> None:
        pkt = plain_udp(SERVER.ip, CLIENT.ip)
        self.send(3, pkt)
        self.expect(routed(pkt, CLIENT.mac), 1)
        self.expect_none()


class UpFromAHostToNoHostStillGoesUp(DcTest):
    """From a host port the catch-all route is the way out of the rack: a ping of the gateway goes up
    (the spine drops it: next test), not refused at the leaf as if it had come down."""

    role = CL0

    def runTest(self) -> None:
        pkt = ping(CLIENT.ip, CLIENT_GATEWAY)
        sp = transit_spine(None)
        self.send(1, pkt)
        self.expect(routed(pkt, sp.mac), 2 if sp == SP0 else 3)
        self.expect_none()


class SpineSendsNothingBackWhereItCameFrom(_Loops):
    """A leaf's packet for its own rack (a client pinging its gateway, a server writing to an unused
    address of its rack) is dropped at the spine as LOOP, not handed back down the same link."""

    role = SP0

    def runTest(self) -> None:
        self.dropped(3, ping(CLIENT.ip, CLIENT_GATEWAY), DropReason.LOOP)
        put = Message(op=Op.PUT, digest=KEY, seq=2, value=b"v")
        self.dropped(1, dc_frame(SERVER.ip, UNUSED_STORAGE, put, sport=DC_PORT), DropReason.LOOP, 2)
        self.no_read_counted()


class SpineAnswerGoesBackTheWayItCame(DcTest):
    """An answer is the switch's own packet: a reflected INVALIDATE leaves by the port its request came in by."""

    role = SP0

    def runTest(self) -> None:
        port, m = self.exchange(1, self.coherence(Op.INVALIDATE, 3, target=SP0.switch_id))
        self.assertEqual((port, m.op), (1, Op.INVALIDATE_ACK))
        self.expect_none()
        self.assertEqual(self.drops(DropReason.LOOP), 0)
