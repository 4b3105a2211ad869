"""Coherence: INVALIDATE and UPDATE paths, acknowledgements, and the orders that must not
bring an old value back (stale seq, an earlier tenure of the slot, duplicated pairs).

The storage-rack leaf sl0 is under test: port 1 faces the key's server; the
coherence path goes on up to the key's spine (port 2).  Writes are numbered by
seq as the shim numbers them.
"""

from __future__ import annotations

from scapy.layers.inet import IP

from distcache.p4names import Stat
from distcache.wire import DC_PORT, Message, Op
from tests.ptf.dctest import KEY, KEY1, SERVER, SL0, SP0, SWITCH_MAC, C, DcTest, dc_frame, routed


class _Coherence(DcTest):
    def value_read(self) -> bytes | None:
        """What a read targeted here returns from the cache (None: a miss, sent on to the server)."""
        _, m = self.read(2, SL0.switch_id, seq=self.next_seq())
        return m.value if m.cached else None

    def next_seq(self) -> int:
        self._read_seq = getattr(self, "_read_seq", 1000) + 1
        return self._read_seq

    def coh(self, op: Op, seq: int, value: bytes = b"", populate: tuple[int, int] | None = None) -> Message:
        """Send one coherence message from the server; return what the leaf sends on (or reflects:
        a populate is addressed to the leaf itself)."""
        target = SL0.switch_id if populate is not None else 0
        _, m = self.exchange(1, self.coherence(op, seq, value, target=target, populate=populate))
        return m


class InvalidateGoesOnUpUnchanged(_Coherence):
    """Not the target: the INVALIDATE is forwarded towards the key's spine, exactly, but for routing."""

    def runTest(self) -> None:
        self.fill(KEY, 0, 1, b"v", 4)
        pkt = self.coherence(Op.INVALIDATE, 5)
        pkt[IP].payload.chksum = 0  # the switch zeroes the UDP checksum of every DistCache message
        self.send(1, pkt)
        self.expect(routed(pkt, SP0.mac), 2)
        self.expect_none()
        self.assertEqual(self.stat(Stat.INVALIDATE), 2)  # the populate's and this write's


class InvalidateStopsHits(_Coherence):
    def runTest(self) -> None:
        self.fill(KEY, 0, 1, b"v1", 10)
        self.assertEqual(self.value_read(), b"v1")
        self.coh(Op.INVALIDATE, 11)
        self.assertIsNone(self.value_read())


class UpdateAfterItsInvalidateFillsTheValue(_Coherence):
    def runTest(self) -> None:
        self.fill(KEY, 0, 1, b"v1", 10)
        self.coh(Op.INVALIDATE, 11)
        self.coh(Op.UPDATE, 11, b"v2")
        self.assertEqual(self.value_read(), b"v2")
        self.assertEqual(self.stat(Stat.UPDATE), 2)
        self.assertEqual(self.stat(Stat.INVALIDATE), 2)


class TargetAcknowledgesInvalidate(DcTest):
    """The switch the message is addressed to turns it back to the server as INVALIDATE_ACK (exact frame)."""

    role = SP0

    def runTest(self) -> None:
        self.send(1, self.coherence(Op.INVALIDATE, 55, target=SP0.switch_id))
        ack = Message(op=Op.INVALIDATE_ACK, digest=KEY, seq=55, target=SP0.switch_id)
        self.expect(
            dc_frame(
                C.spine_address(SP0.switch_id),
                SERVER.ip,
                ack,
                sport=DC_PORT,
                dport=DC_PORT,
                smac=SWITCH_MAC,
                dmac=SL0.mac,
                ttl=63,
                udp_checksum=0,
            ),
            1,
        )
        self.expect_none()
        self.assertEqual(self.stat(Stat.REFLECTED), 1)
        self.assertEqual(self.stat(Stat.INVALIDATE), 0)  # not cached here: nothing to invalidate


class TargetAcknowledgesUpdate(DcTest):
    role = SP0

    def runTest(self) -> None:
        self.cache(KEY, 4, 2)
        for op, value in ((Op.INVALIDATE, b""), (Op.UPDATE, b"spine copy")):
            populate = (0, 2) if op == Op.INVALIDATE else None
            port, m = self.exchange(1, self.coherence(op, 9, value, target=SP0.switch_id, populate=populate))
            self.assertEqual((port, m.op, m.seq, m.digest), (1, op.reply(), 9, KEY))
        self.assertEqual((self.stat(Stat.INVALIDATE), self.stat(Stat.UPDATE)), (1, 1))
        _, m = self.read(3, SP0.switch_id)
        self.assertEqual((m.cached, m.value), (True, b"spine copy"))


class UpdateWithoutInvalidateIsRefused(_Coherence):
    def runTest(self) -> None:
        self.cache(KEY, 0, 1)
        self.coh(Op.UPDATE, 77, b"stale")
        self.assertEqual(self.stat(Stat.UPDATE_STALE), 1)
        self.assertIsNone(self.value_read())


class LateUpdateOfOlderWriteIsRefused(_Coherence):
    """Write 11's INVALIDATE is in; a late UPDATE of write 10 must not validate write 10's value."""

    def runTest(self) -> None:
        self.fill(KEY, 0, 1, b"old", 10)
        self.coh(Op.INVALIDATE, 11)
        self.coh(Op.UPDATE, 10, b"old")
        self.assertIsNone(self.value_read())
        self.coh(Op.UPDATE, 11, b"new")
        self.assertEqual(self.value_read(), b"new")


class LateUpdateFromEarlierTenureIsRefused(_Coherence):
    """The key was evicted and re-installed in the same slot with a new version; a late UPDATE
    from the earlier tenure (same seq as that tenure's INVALIDATE) must not make it valid."""

    def runTest(self) -> None:
        self.fill(KEY, 0, 1, b"tenure 1", 19)  # tenure 1, populated (armed)
        self.coh(Op.INVALIDATE, 20)  # tenure 1, write 20: phase 1 done, phase 2 delayed
        self.uncache(KEY)
        self.cache(KEY, 0, 2)  # tenure 2: same key, same slot, new version
        self.coh(Op.UPDATE, 20, b"from tenure 1")
        self.assertEqual(self.stat(Stat.UPDATE_STALE), 1)
        self.assertIsNone(self.value_read())
        self.coh(Op.INVALIDATE, 21, populate=(0, 2))  # tenure 2's own populate still works
        self.coh(Op.UPDATE, 21, b"tenure 2")
        self.assertEqual(self.value_read(), b"tenure 2")


class DuplicatedPairAfterLaterWriteCannotRevalidate(_Coherence):
    """Write 10 then write 11 complete; a duplicate of write 10's INVALIDATE+UPDATE arrives late.
    The old value must never be served again."""

    def runTest(self) -> None:
        self.fill(KEY, 0, 1, b"old", 10)
        self.coh(Op.INVALIDATE, 11)
        self.coh(Op.UPDATE, 11, b"new")
        self.assertEqual(self.value_read(), b"new")
        self.coh(Op.INVALIDATE, 10)  # duplicate, late
        self.coh(Op.UPDATE, 10, b"old")
        self.assertEqual(self.stat(Stat.INVALIDATE_STALE), 1)
        self.assertEqual(self.stat(Stat.UPDATE_STALE), 1)
        self.assertNotEqual(self.value_read(), b"old")


class SeqComparisonWrapsAround(_Coherence):
    """Serial-number arithmetic on 64 bits: seq 5 follows seq 2^64 - 16."""

    def runTest(self) -> None:
        self.fill(KEY, 0, 1, b"before wrap", 2**64 - 16)
        self.coh(Op.INVALIDATE, 5)
        self.coh(Op.UPDATE, 5, b"after wrap")
        self.assertEqual(self.value_read(), b"after wrap")
        self.assertEqual(self.stat(Stat.INVALIDATE_STALE), 0)


class LargeValueIsNeverCached(_Coherence):
    """An UPDATE carrying more than 128 bytes passes but leaves the entry invalid."""

    def runTest(self) -> None:
        self.cache(KEY, 0, 1)
        self.coh(Op.INVALIDATE, 8, populate=(0, 1))
        m = self.coh(Op.UPDATE, 8, b"z" * 200)
        self.assertEqual((m.op, len(m.value)), (Op.UPDATE, 200))
        self.assertEqual(self.stat(Stat.UPDATE_STALE), 1)
        self.assertIsNone(self.value_read())


class CoherenceForUncachedKeyChangesNothing(_Coherence):
    """Messages for a key not cached here pass on and leave the cached keys' state alone."""

    def runTest(self) -> None:
        self.fill(KEY, 0, 1, b"kept", 3)
        for op, value in ((Op.INVALIDATE, b""), (Op.UPDATE, b"other")):
            _, m = self.exchange(1, self.coherence(op, 4, value, key=KEY1))
            self.assertEqual((m.op, m.digest), (op, KEY1))
        self.assertEqual((self.stat(Stat.INVALIDATE), self.stat(Stat.UPDATE), self.stat(Stat.UPDATE_STALE)), (1, 1, 0))
        self.assertEqual(self.value_read(), b"kept")


class NewTenureIsArmedOnlyByItsOwnPopulate(_Coherence):
    """The key was evicted and installed again in the same slot (tenure 2).  Before its populate
    lands, an old write's INVALIDATE+UPDATE pair arrives (delayed or duplicated): it must not
    arm the new entry, or its UPDATE would validate a value older than the one the shim is
    about to populate.  Neither may a populate carrying another tag, or addressed to another
    switch; the entry's own populate arms it."""

    def runTest(self) -> None:
        self.fill(KEY, 0, 1, b"v10", 10)
        self.uncache(KEY)
        self.cache(KEY, 0, 2)  # tenure 2
        self.coh(Op.INVALIDATE, 30)  # an old write's pair, arriving late
        self.coh(Op.UPDATE, 30, b"old write")
        self.assertIsNone(self.value_read())
        self.coh(Op.INVALIDATE, 31, populate=(0, 1))  # tenure 1's populate, duplicated late
        self.coh(Op.UPDATE, 31, b"tenure 1 fill")
        self.assertIsNone(self.value_read())
        _, m = self.exchange(1, self.coherence(Op.INVALIDATE, 32, target=SP0.switch_id, populate=(0, 2)))
        self.assertEqual((m.op, m.target), (Op.INVALIDATE, SP0.switch_id))  # the spine's populate: on up
        self.coh(Op.UPDATE, 32, b"spine's fill")
        self.assertIsNone(self.value_read())
        self.assertEqual(self.stat(Stat.UPDATE_STALE), 3)
        self.coh(Op.INVALIDATE, 33, populate=(0, 2))
        self.coh(Op.UPDATE, 33, b"current")
        self.assertEqual(self.value_read(), b"current")


class WritesThatPassANewEntryFirstSetItsFloor(_Coherence):
    """The model's counterexample (model/README.md, the unarmed floor).  A new entry's populate
    (seq 30) is delayed; meanwhile writes 31 and 32 pass the entry and are acknowledged.  When the
    populate arrives it is older than write 32, so it must not arm the entry: otherwise a
    duplicate of write 31's pair, arriving next, re-arms it and validates write 31's value,
    older than the acknowledged write 32."""

    def runTest(self) -> None:
        self.fill(KEY, 0, 1, b"v10", 10)
        self.uncache(KEY)
        self.cache(KEY, 0, 2)  # tenure 2, its populate (seq 30) on its way
        self.coh(Op.INVALIDATE, 31)  # write 31 passes first; its UPDATE cannot fill an unarmed entry
        self.coh(Op.UPDATE, 31, b"v31")
        self.coh(Op.INVALIDATE, 32)  # write 32 likewise (acknowledged: the newest value is v32)
        self.coh(Op.INVALIDATE, 30, populate=(0, 2))  # the populate, late: older than write 32
        self.coh(Op.INVALIDATE, 31)  # a duplicate of write 31's pair
        self.coh(Op.UPDATE, 31, b"v31")
        self.assertIsNone(self.value_read())
        self.coh(Op.UPDATE, 30, b"v10 (populate's read)")
        self.coh(Op.UPDATE, 32, b"v32")  # a write's phase 2 cannot arm a new tenure either
        self.assertIsNone(self.value_read())
        self.assertEqual(self.stat(Stat.INVALIDATE_STALE), 2)  # the late populate and the duplicate
        self.assertEqual(self.stat(Stat.UPDATE_STALE), 4)
        self.coh(Op.INVALIDATE, 33, populate=(0, 2))  # the agent's next populate arms it
        self.coh(Op.UPDATE, 33, b"v32")
        self.assertEqual(self.value_read(), b"v32")


class RaisedEpochInvalidatesEveryEntry(_Coherence):
    """An agent that lost its state raises cache_epoch: every entry's tag changes, so no slot can
    hit with what an earlier entry left in the registers -- not even a new key installed with a
    version the slot's valid tag happens to hold (another key's value)."""

    def runTest(self) -> None:
        self.fill(KEY, 0, 1, b"key 0's value", 10)
        self.assertEqual(self.value_read(), b"key 0's value")
        self.set_cache_epoch(1)
        self.assertIsNone(self.value_read())
        self.uncache(KEY)
        self.cache(KEY1, 0, 1)  # same slot, same version: a fresh agent's first choice
        _, m = self.read(2, SL0.switch_id, key=KEY1, seq=self.next_seq())
        self.assertFalse(m.cached)
        self.assertEqual(self.stat(Stat.READ_HIT), 1)
        self.send(1, self.coherence(Op.INVALIDATE, 11, key=KEY1, target=SL0.switch_id, populate=(0, 1)))
        self.receive()  # a populate with the old epoch's tag does not arm it
        self.send(1, self.coherence(Op.UPDATE, 11, b"old epoch's fill", key=KEY1, target=SL0.switch_id))
        self.receive()
        self.assertEqual(self.stat(Stat.UPDATE_STALE), 1)
        _, m = self.read(2, SL0.switch_id, key=KEY1, seq=self.next_seq())
        self.assertFalse(m.cached)
        self.send(1, self.coherence(Op.INVALIDATE, 12, key=KEY1, target=SL0.switch_id, populate=(1, 1)))
        self.receive()
        self.send(1, self.coherence(Op.UPDATE, 12, b"key 1's value", key=KEY1, target=SL0.switch_id))
        self.receive()
        _, m = self.read(2, SL0.switch_id, key=KEY1, seq=self.next_seq())
        self.assertEqual((m.cached, m.value), (True, b"key 1's value"))
