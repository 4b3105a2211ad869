"""Cache lookup and reply: hits and misses per role, target-only answering, the reply rewrite.

A read answered from a cache leaves as the exact reply frame: value, lengths,
flags, served_by, the serving switch's load, addresses and ports swapped,
TTL 64 then routed (63), IPv4 checksum recomputed, UDP checksum 0.

The cache meter bounds the reads answered: a valid hit it colours red goes on to
the server as a miss, unchanged but for routing.
"""

from __future__ import annotations

import logging

from scapy.layers.inet import UDP

from distcache import p4names
from distcache.p4names import Stat
from distcache.wire import DC_PORT, Flag, Message, Op, decode
from tests.ptf.dctest import (
    CL0,
    CLIENT,
    CLIENT_PORT,
    KEY,
    KEY1,
    SERVER,
    SL0,
    SL1,
    SP0,
    SP1,
    SWITCH_MAC,
    DcTest,
    dc_frame,
    routed,
)


def reply_frame(
    value: bytes,
    served_by: int,
    *,
    seq: int,
    dmac: str,
    spine_load: int = 0,
    leaf_load: int = 0,
    target: int,
    key: bytes = b"",
) -> object:
    """The exact frame a cache hit sends back towards the client: the value's chunks, then the request's key."""
    is_spine = served_by == SP0.switch_id or served_by == SP1.switch_id
    msg = Message(
        op=Op.GET_REPLY,
        key=key,
        digest=KEY,
        seq=seq,
        value=value,
        flags=Flag.CACHED,
        target=target,
        served_by=served_by,
        spine_id=served_by if is_spine else 0,
        spine_load=spine_load,
        leaf_id=0 if is_spine else served_by,
        leaf_load=leaf_load,
    )
    return dc_frame(
        SERVER.ip, CLIENT.ip, msg, sport=DC_PORT, dport=CLIENT_PORT, smac=SWITCH_MAC, dmac=dmac, ttl=63, udp_checksum=0
    )


class _Hit(DcTest):
    def hit(self, value: bytes, key: bytes = b"") -> None:
        self.fill(KEY, slot=3, version=9, value=value, seq=100)
        self.assertEqual(self.stat(Stat.UPDATE), 1)
        get = Message(op=Op.GET, key=key, digest=KEY, seq=41, target=SL0.switch_id)
        self.send(2, dc_frame(CLIENT.ip, SERVER.ip, get))
        reply = reply_frame(value, SL0.switch_id, seq=41, dmac=SP0.mac, leaf_load=1, target=SL0.switch_id, key=key)
        self.expect(reply, 2)
        self.expect_none()
        self.assertEqual(self.counter(p4names.CACHE_HITS, 3), 1)
        self.assertEqual(self.stat(Stat.READ_HIT), 1)


class LeafHitExactReply(_Hit):
    """Storage-rack leaf: a 33-byte value (3 chunks) comes back as the exact reply frame."""

    def runTest(self) -> None:
        self.hit(b"hello distcache, 33 bytes long!!!")


class LeafHitLongKeyRidesBehindTheValue(_Hit):
    """A read carries its key (here 200 binary bytes) behind the header, which the switch does not parse:
    the reply is header, the value's chunks, then the key, with the UDP and IPv4 lengths counting all three."""

    def runTest(self) -> None:
        self.hit(b"a value of 20 bytes!", key=b"\x00\xff" + bytes(range(198)))


class LeafHitEmptyValue(_Hit):
    def runTest(self) -> None:
        self.hit(b"")


class LeafHitLargestCacheableValue(_Hit):
    """128 bytes: all eight value chunks."""

    def runTest(self) -> None:
        self.hit(bytes(range(128)))


class SpineHitExactReply(DcTest):
    """Spine: the read comes from a client rack (port 3) and goes back down to it."""

    role = SP0

    def runTest(self) -> None:
        value = b"spine value"
        self.fill(KEY, slot=0, version=1, value=value, seq=5)  # from storage leaf sl0 (port 1)
        get = Message(Op.GET, digest=KEY, seq=8, target=SP0.switch_id)
        self.send(3, dc_frame(CLIENT.ip, SERVER.ip, get))
        want = Message(
            op=Op.GET_REPLY,
            digest=KEY,
            seq=8,
            value=value,
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
        self.assertEqual(self.counter(p4names.CACHE_HITS, 0), 1)


class MissIsForwardedAndCounted(DcTest):
    """A targeted read of a key not in the cache goes on to the server, unchanged but for routing."""

    def runTest(self) -> None:
        get = dc_frame(CLIENT.ip, SERVER.ip, Message(Op.GET, digest=KEY1, seq=3, target=SL0.switch_id), udp_checksum=0)
        self.send(2, get)
        self.expect(routed(get, SERVER.mac), 1)
        self.expect_none()
        self.assertEqual((self.stat(Stat.READ_MISS), self.stat(Stat.READ_HIT)), (1, 0))


class InstalledButNeverFilledIsAMiss(DcTest):
    """An entry the agent installed is invalid until its server fills it."""

    def runTest(self) -> None:
        self.cache(KEY, 0, 1)
        _, m = self.read(2, SL0.switch_id)
        self.assertEqual((m.op, m.cached), (Op.GET, False))
        self.assertEqual(self.stat(Stat.READ_MISS), 1)


class OnlyTheTargetAnswers(DcTest):
    """A valid entry does not answer a read the client rack marked for another leaf, or for no cache."""

    def runTest(self) -> None:
        self.fill(KEY, 0, 1, b"v", 5)
        for target in (SL1.switch_id, CL0.switch_id, 0):
            port, m = self.read(2, target)
            self.assertEqual((port, m.op, m.cached), (1, Op.GET, False), f"target {target}")
        self.assertEqual(self.stat(Stat.READ_HIT), 0)
        self.assertEqual(self.counter(p4names.CACHE_HITS, 0), 0)


class LeafAnswersAReadItsSpineMissed(_Hit):
    """A read marked for a spine reaches the storage leaf only if the spine did not answer it: the leaf
    answers it from its cache (exact reply, its own load stamped, the read counted as its load)."""

    def runTest(self) -> None:
        self.fill(KEY, slot=3, version=9, value=b"rack-copy", seq=100)
        for seq, spine in ((41, SP0), (42, SP1)):
            self.send(2, dc_frame(CLIENT.ip, SERVER.ip, Message(Op.GET, digest=KEY, seq=seq, target=spine.switch_id)))
            self.expect(
                reply_frame(
                    b"rack-copy", SL0.switch_id, seq=seq, dmac=SP0.mac, leaf_load=seq - 40, target=spine.switch_id
                ),
                2,
            )
        self.expect_none()
        self.assertEqual((self.stat(Stat.READ_HIT), self.counter(p4names.CACHE_HITS, 3)), (2, 2))


class WritesPassCachedKeys(DcTest):
    """PUT and DELETE of a cached key are never answered by the switch."""

    def runTest(self) -> None:
        self.fill(KEY, 0, 1, b"v", 5)
        for op in (Op.PUT, Op.DELETE):
            port, m = self.exchange(
                2,
                dc_frame(
                    CLIENT.ip,
                    SERVER.ip,
                    Message(op=op, digest=KEY, value=b"w" if op == Op.PUT else b"", target=SL0.switch_id),
                ),
            )
            self.assertEqual((port, m.op), (1, op))
        self.assertEqual(self.stat(Stat.READ_HIT), 0)


class ReusedSlotNeverServesThePreviousKey(DcTest):
    """Slot 0 held key A (version 7, valid); key B installed in slot 0 with version 8 must miss."""

    def runTest(self) -> None:
        self.fill(KEY1, 0, 7, b"value of A", 5)
        self.uncache(KEY1)
        self.cache(KEY, 0, 8)
        _, m = self.read(2, SL0.switch_id)
        self.assertFalse(m.cached)
        self.assertEqual(m.value, b"")


class _MeteredBurst(DcTest):
    """Reads of a valid cached key sent back to back, with the cache meter as the subclass sets it."""

    READS = 20
    SLOT = 2

    def burst(self) -> int:
        """Send the reads, check where each went; the number the switch answered."""
        value = b"metered value"
        self.fill(KEY, slot=self.SLOT, version=4, value=value, seq=100)
        gets = [
            dc_frame(CLIENT.ip, SERVER.ip, Message(Op.GET, digest=KEY, seq=i, target=SL0.switch_id), udp_checksum=0)
            for i in range(self.READS)
        ]
        for g in gets:  # all sent before any is collected: the burst lasts milliseconds, not round trips
            self.send(2, g)
        served, missed = set(), set()
        for _ in range(self.READS):
            port, out = self.receive()
            m = decode(bytes(out[UDP].payload))
            if port == 2:  # answered from cache, back towards the client
                self.assertEqual((m.op, m.cached, m.value, m.served_by), (Op.GET_REPLY, True, value, SL0.switch_id))
                served.add(m.seq)
            else:  # a miss: on to the server, unchanged but for routing
                self.assertEqual(port, 1)
                self.assertEqual(bytes(out), bytes(routed(gets[m.seq], SERVER.mac)))
                missed.add(m.seq)
        self.expect_none()
        self.assertEqual(served | missed, set(range(self.READS)))
        self.assertFalse(served & missed)
        n_served, n_missed = len(served), len(missed)
        logging.getLogger("dcptf").info("%s: %d of %d reads answered", self, n_served, self.READS)
        self.assertEqual(self.stat(Stat.HIT_METERED), n_missed)
        self.assertEqual((self.stat(Stat.READ_HIT), self.stat(Stat.READ_MISS)), (n_served, n_missed))
        self.assertEqual(self.counter(p4names.CACHE_HITS, self.SLOT), n_served)
        return n_served


class MeterBoundsReadsAnswered(_MeteredBurst):
    """cir = pir = 2 reads/s, bursts of 5: the switch answers the burst (its buckets start full) and
    the few the rate adds while the reads last (2 a second), and passes the rest on to the server."""

    def runTest(self) -> None:
        self.set_meter(p4names.CACHE_METER, 0, cir=2, cburst=5, pir=2, pburst=5)
        served = self.burst()
        self.assertTrue(
            5 <= served <= 10,
            f"{served} of {self.READS} reads answered; want the burst of 5 (plus up to 5 more over 2.5 s)",
        )


class MeterYellowReadsAreAnswered(_MeteredBurst):
    """Two rates: over the committed rate (YELLOW) a read is still answered; only over the peak
    rate (RED) is it passed on.  cburst 1 but pburst 8: the peak bucket bounds what is answered."""

    def runTest(self) -> None:
        self.set_meter(p4names.CACHE_METER, 0, cir=1, cburst=1, pir=2, pburst=8)
        served = self.burst()
        self.assertTrue(
            8 <= served <= 12,
            f"{served} of {self.READS} reads answered; want the peak burst of 8 (plus up to 4 more over 2 s)",
        )


class UnconfiguredMeterAnswersEveryRead(_MeteredBurst):
    """The meter after a pipeline push has no rates: it colours every read GREEN."""

    def runTest(self) -> None:
        self.assertEqual(self.sw.read_meter(p4names.CACHE_METER), {0: None})
        self.assertEqual(self.burst(), self.READS)
