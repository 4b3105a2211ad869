"""Transit over the spines (ECMP on the key's hash) at the leaves sl0 and cl0.

A leaf's route to other racks is ``transit``: the packet goes up through the
spine in transit_spine's slot h0(key) mod TRANSIT_SLOTS, the live spines dealt
round-robin over the slots.  Every key keeps one path (its writes, misses and
replies all go through one spine), different keys spread over every spine, and
a spine out of service gets no slot.  A client's retry (its attempt number in
flags) takes the slot ``attempt`` further on, so it leaves by another spine than
the copy that was lost; what comes from other ports keeps its key's spine.
Expected frames are built from the protocol; the expected spine from the slot
formula (tests.ptf.dctest.transit_spine).
"""

from __future__ import annotations

from collections import Counter

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from distcache import p4names
from distcache.hashing import h0
from distcache.wire import DC_PORT, Flag, Message, Op, attempt_flags
from tests.common.keys import digest
from tests.ptf.dctest import (
    CL0,
    CLIENT,
    CLIENT_PORT,
    HOST_MAC,
    LEAF_UPLINK,
    SERVER,
    SL0,
    SP1,
    SWITCH_MAC,
    DcTest,
    dc_frame,
    routed,
    transit_spine,
)

KEYS = [digest(f"transit-{i}") for i in range(16)]


class ClientWritesSpreadOverTheSpines(DcTest):
    """PUTs of 16 keys from a client leave cl0 up the port of each key's transit spine, exact frames;
    both spines carry some."""

    role = CL0

    def runTest(self) -> None:
        used = Counter()
        for i, key in enumerate(KEYS):
            put = dc_frame(CLIENT.ip, SERVER.ip, Message(Op.PUT, digest=key, seq=i, value=b"v"))
            sp = transit_spine(key)
            self.send(1, put)
            clean = Message(Op.PUT, digest=key, seq=i, value=b"v")  # telemetry fields cleared (already 0)
            want = routed(dc_frame(CLIENT.ip, SERVER.ip, clean, udp_checksum=0), sp.mac)
            self.expect(want, LEAF_UPLINK[sp.switch_id])
            used[sp.name] += 1
        self.expect_none()
        self.assertEqual(set(used), {"sp0", "sp1"}, used)


class RepliesOfAKeyTakeItsSpine(DcTest):
    """At the storage leaf, a server's replies for a key go up through that key's transit spine,
    every time (one path per key)."""

    role = SL0

    def runTest(self) -> None:
        for key in KEYS[:6]:
            sp = transit_spine(key)
            for seq in (1, 2):
                reply = Message(Op.PUT_REPLY, digest=key, seq=seq)
                port, _ = self.exchange(1, dc_frame(SERVER.ip, CLIENT.ip, reply, sport=DC_PORT, dport=CLIENT_PORT))
                self.assertEqual(port, LEAF_UPLINK[sp.switch_id], f"{key!r} seq {seq}")


class NonDistCacheTrafficTakesSlotZero(DcTest):
    """A packet with no DistCache header (here plain UDP) hashes as bucket 0."""

    role = CL0

    def runTest(self) -> None:
        pkt = (
            Ether(src=HOST_MAC, dst=SWITCH_MAC)
            / IP(src=CLIENT.ip, dst=SERVER.ip, ttl=64, id=1, flags=0)
            / UDP(sport=4000, dport=5000)
            / Raw(b"x" * 20)
        )
        sp = transit_spine(None)
        self.send(1, Ether(bytes(pkt)))
        self.expect(routed(pkt, sp.mac), LEAF_UPLINK[sp.switch_id])
        self.expect_none()


class SpinesOutOfServiceGetNoTransit(DcTest):
    """sp0 failed (not live): every key's transit goes through sp1."""

    role = CL0
    live = frozenset({SP1.switch_id})

    def runTest(self) -> None:
        for i, key in enumerate(KEYS[:8]):
            port, _ = self.exchange(1, dc_frame(CLIENT.ip, SERVER.ip, Message(Op.PUT, digest=key, seq=i, value=b"v")))
            self.assertEqual(port, LEAF_UPLINK[SP1.switch_id], f"{key!r}")


class EmptyTransitSlotDrops(DcTest):
    """A transit route whose slot has no spine drops the packet and counts NO_ROUTE."""

    role = CL0

    def runTest(self) -> None:
        key = KEYS[0]
        slot = h0(key) & (p4names.TRANSIT_SLOTS - 1)
        self.sw.delete(p4names.TRANSIT_SPINE, {p4names.KEY_TRANSIT_SLOT: slot})
        self.send(1, dc_frame(CLIENT.ip, SERVER.ip, Message(Op.PUT, digest=key, seq=1, value=b"v")))
        self.expect_none()
        self.assertEqual(self.drops(p4names.DropReason.NO_ROUTE), 1)


class ClientRetriesTakeAnotherTransitSpine(DcTest):
    """A write's retry (same seq, attempt 1) leaves cl0 up another spine than its first copy; exact frames."""

    role = CL0

    def runTest(self) -> None:
        for i, key in enumerate(KEYS[:4]):
            self.assertNotEqual(transit_spine(key), transit_spine(key, attempt=1))
            for attempt in (0, 1):
                put = Message(Op.PUT, digest=key, seq=i, value=b"v", flags=attempt_flags(attempt))
                sp = transit_spine(key, attempt=attempt)
                self.send(1, dc_frame(CLIENT.ip, SERVER.ip, put))
                self.expect(
                    routed(dc_frame(CLIENT.ip, SERVER.ip, put, udp_checksum=0), sp.mac), LEAF_UPLINK[sp.switch_id]
                )
        self.expect_none()


class RepliesKeepTheirKeysSpineWhateverTheirFlags(DcTest):
    """At sl0, replies from the server keep their key's transit spine even with attempt bits set (a cache
    hit echoes its request's flags): only what a client sends is steered by its attempt."""

    role = SL0

    def runTest(self) -> None:
        for key in KEYS[:6]:
            sp = transit_spine(key)
            reply = Message(Op.GET_REPLY, digest=key, seq=1, flags=Flag.CACHED | attempt_flags(1))
            port, _ = self.exchange(1, dc_frame(SERVER.ip, CLIENT.ip, reply, sport=DC_PORT, dport=CLIENT_PORT))
            self.assertEqual(port, LEAF_UPLINK[sp.switch_id], f"{key!r}")
