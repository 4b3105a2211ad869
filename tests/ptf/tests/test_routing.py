"""Cache choice at the client-rack leaf cl0: power of two choices, the h0 partition, load
freshness, and each mechanism's routing.

cl0's port 1 faces its client; ports 2 and 3 the spines sp0 and sp1.  A read marked for a
spine goes up that spine's port (cache_route); a read marked for a storage leaf, or for no
cache, follows the normal route: transit over the spines by the key's hash (KEY's goes through sp0,
port 2; test_forwarding.py tests the spread).  A client's retry carries its attempt number in flags:
attempt 1 goes to the other candidate, attempt 2 and later to no cache, each through the transit spine
``attempt`` slots on (issue 16, item 3).
"""

from __future__ import annotations

from distcache import p4names
from distcache.cluster import Mechanism
from distcache.hashing import h0
from distcache.p4names import Stat
from distcache.wire import DC_PORT, Flag, Message, Op, attempt_flags
from tests.common.keys import digest
from tests.ptf.dctest import (
    BUCKETS,
    CL0,
    CLIENT,
    CLIENT_PORT,
    KEY,
    KEY1,
    LEAF_UPLINK,
    SERVER,
    SERVER1,
    SL0,
    SL1,
    SP0,
    SP1,
    WINDOW_SHIFT,
    DcTest,
    dc_frame,
    routed,
    transit_spine,
)

SPINE_PORT = {SP0.switch_id: 2, SP1.switch_id: 3}
SPINE_MAC = {SP0.switch_id: SP0.mac, SP1.switch_id: SP1.mac}


class _Routing(DcTest):
    role = CL0

    def loads(self, spine_load: int, leaf_load: int, spine: int = SP0.switch_id, leaf: int = SL0.switch_id) -> None:
        """A server reply coming down from a spine carries these loads; the leaf records them."""
        msg = Message(
            op=Op.GET_REPLY, digest=KEY, seq=1, spine_id=spine, spine_load=spine_load, leaf_id=leaf, leaf_load=leaf_load
        )
        self.exchange(2, dc_frame(SERVER.ip, CLIENT.ip, msg, sport=DC_PORT, dport=CLIENT_PORT))

    def choose(
        self, seq: int, key: bytes = KEY, dst: str = SERVER.ip, attempt: int = 0, flags: Flag = Flag.NONE
    ) -> tuple[int, int]:
        """(out port, target) of a client's read (``attempt``: which copy of it)."""
        get = Message(op=Op.GET, digest=key, seq=seq, flags=flags | attempt_flags(attempt))
        port, m = self.exchange(1, dc_frame(CLIENT.ip, dst, get))
        return port, m.target


class PicksTheLessLoadedLeaf(_Routing):
    """Spine busier: the read is marked for the storage leaf and follows the normal route (exact frame)."""

    def runTest(self) -> None:
        self.loads(spine_load=10, leaf_load=2)
        get = Message(op=Op.GET, digest=KEY, seq=2)
        self.send(1, dc_frame(CLIENT.ip, SERVER.ip, get))
        marked = Message(op=Op.GET, digest=KEY, seq=2, target=SL0.switch_id)
        self.expect(routed(dc_frame(CLIENT.ip, SERVER.ip, marked, udp_checksum=0), SP0.mac), 2)
        self.expect_none()
        self.assertEqual((self.stat(Stat.ROUTED_LEAF), self.stat(Stat.ROUTED_SPINE)), (1, 0))


class PicksTheLessLoadedSpine(_Routing):
    """Leaf busier: the read goes up to the key's spine through cache_route (exact frame)."""

    def runTest(self) -> None:
        self.loads(spine_load=1, leaf_load=50)
        self.send(1, dc_frame(CLIENT.ip, SERVER.ip, Message(op=Op.GET, digest=KEY, seq=3)))
        marked = Message(op=Op.GET, digest=KEY, seq=3, target=SP0.switch_id)
        self.expect(routed(dc_frame(CLIENT.ip, SERVER.ip, marked, udp_checksum=0), SP0.mac), 2)
        self.expect_none()
        self.assertEqual((self.stat(Stat.ROUTED_LEAF), self.stat(Stat.ROUTED_SPINE)), (0, 1))


class SecondSpineGoesUpItsOwnPort(_Routing):
    def runTest(self) -> None:
        self.loads(spine_load=0, leaf_load=9, spine=SP1.switch_id)
        self.assertEqual(self.choose(5, key=KEY1), (3, SP1.switch_id))


class TiesGoBySeqParity(_Routing):
    """Equal loads (here none recorded): even seq -> spine, odd seq -> storage leaf."""

    def runTest(self) -> None:
        self.assertEqual(self.choose(4), (2, SP0.switch_id))
        self.assertEqual(self.choose(5), (2, SL0.switch_id))
        self.loads(spine_load=7, leaf_load=7)
        self.assertEqual(self.choose(6)[1], SP0.switch_id)
        self.assertEqual(self.choose(7)[1], SL0.switch_id)


class LeafCandidateIsTheKeysStorageRack(_Routing):
    """The leaf candidate comes from the destination's rack (storage_rack), not from the key."""

    def runTest(self) -> None:
        self.assertEqual(self.choose(1, dst=SERVER1.ip)[1], SL1.switch_id)
        self.loads(spine_load=3, leaf_load=0, leaf=SL1.switch_id)
        self.assertEqual(self.choose(2, dst=SERVER1.ip)[1], SL1.switch_id)


class SpineIsTheKeysCrc32Bucket(_Routing):
    """The spine candidate is spine_partition[crc32(key) % 1024], as distcache.hashing.h0 computes it."""

    def runTest(self) -> None:
        seen = set()
        for i in range(24):
            key = digest(f"bucket-{i}")
            want = BUCKETS[h0(key)]
            seen.add(want)
            self.assertEqual(self.choose(2 * i, key=key), (SPINE_PORT[want], want), f"key {key!r}")
        self.assertEqual(seen, {SP0.switch_id, SP1.switch_id})


class LoadsAgeOutAfterTheNextWindow(_Routing):
    """A load recorded in window e still steers reads in window e+1, and is ignored from e+2 on."""

    def runTest(self) -> None:
        w = (1 << WINDOW_SHIFT) / 1e6
        start = self.find_window_start(read_port=2, reply_port=2) + 2 * w
        self.wait_until(start + 0.5 * w)
        self.loads(spine_load=100, leaf_load=0)  # recorded in window e
        self.assertEqual(self.choose(2)[1], SL0.switch_id)
        self.wait_until(start + 1.5 * w)  # window e+1: still fresh
        self.assertEqual(self.choose(4)[1], SL0.switch_id)
        self.wait_until(start + 2.5 * w)  # window e+2: aged out, a tie again
        self.assertEqual(self.choose(6)[1], SP0.switch_id)


class ForgedClientReplyDoesNotSteer(_Routing):
    """A GET_REPLY from the client port with a huge spine load is dropped and records nothing."""

    def runTest(self) -> None:
        forged = Message(op=Op.GET_REPLY, digest=KEY, seq=1, spine_id=SP0.switch_id, spine_load=0xFFFFFFFF)
        self.send(1, dc_frame(CLIENT.ip, SERVER.ip, forged, sport=DC_PORT, dport=CLIENT_PORT))
        self.expect_none()
        self.assertEqual(self.choose(2)[1], SP0.switch_id)  # even seq, no loads: the spine


class NoCacheMarksNoTarget(_Routing):
    mechanism = Mechanism.NOCACHE

    def runTest(self) -> None:
        self.loads(spine_load=9, leaf_load=0)
        self.assertEqual(self.choose(2), (2, 0))
        self.assertEqual(self.choose(3), (2, 0))
        self.assertEqual((self.stat(Stat.ROUTED_LEAF), self.stat(Stat.ROUTED_SPINE)), (0, 0))


class PartitionAlwaysPicksTheSpine(_Routing):
    """CachePartition: the key's spine is the only cache, however loaded."""

    mechanism = Mechanism.PARTITION

    def runTest(self) -> None:
        self.loads(spine_load=1000, leaf_load=0)
        for seq in (2, 3):
            self.assertEqual(self.choose(seq), (2, SP0.switch_id))
        self.assertEqual(self.choose(4, key=KEY1), (3, SP1.switch_id))


def replica_spine(key: bytes, seq: int, live: tuple = (SP0, SP1)) -> int:
    """The spine a replicated key's read goes to: replica slot (h0 + low 16 bits of seq) mod
    REPLICA_SLOTS, the live spines dealt round-robin over the slots (p4rt.plan.plan)."""
    return live[((h0(key) + (seq & 0xFFFF)) & (p4names.REPLICA_SLOTS - 1)) % len(live)].switch_id


class ReplicationSpreadsReadsOverTheSpines(_Routing):
    """CacheReplication: every read goes to a spine, successive seqs to every spine in turn, whatever the loads."""

    mechanism = Mechanism.REPLICATION

    def runTest(self) -> None:
        self.loads(spine_load=1000, leaf_load=0)  # no leaf candidate: loads do not matter
        seen = []
        for seq in range(6):
            want = replica_spine(KEY, seq)
            self.assertEqual(self.choose(seq), (SPINE_PORT[want], want), f"seq {seq}")
            seen.append(want)
        self.assertEqual(set(seen), {SP0.switch_id, SP1.switch_id})
        self.assertEqual((self.stat(Stat.ROUTED_SPINE), self.stat(Stat.ROUTED_LEAF)), (6, 0))


class ReplicationSkipsSpinesOutOfService(_Routing):
    """With sp0 failed, every replica slot holds sp1: no read goes to sp0."""

    mechanism = Mechanism.REPLICATION
    live = frozenset({SP1.switch_id})

    def runTest(self) -> None:
        for seq in range(6):
            self.assertEqual(self.choose(seq), (3, SP1.switch_id), f"seq {seq}")


class HybridReplicatesOnlyTheListedKeys(_Routing):
    """Hybrid: a key in replicated_keys is read from any spine; another key gets DistCache's two choices."""

    mechanism = Mechanism.HYBRID
    replicated = (KEY,)

    def runTest(self) -> None:
        self.loads(spine_load=1000, leaf_load=0)  # DistCache would pick the leaf for KEY; replication ignores it
        seen = set()
        for seq in range(6):
            want = replica_spine(KEY, seq)
            self.assertEqual(self.choose(seq), (SPINE_PORT[want], want), f"seq {seq}")
            seen.add(want)
        self.assertEqual(seen, {SP0.switch_id, SP1.switch_id})
        # KEY1 is not replicated: its own spine or its rack's leaf, ties by seq parity
        self.assertEqual(self.choose(10, key=KEY1), (3, SP1.switch_id))
        self.assertEqual(self.choose(11, key=KEY1)[1], SL0.switch_id)
        self.sw.delete(p4names.REPLICATED_KEYS, {p4names.KEY_DC_KEY: int.from_bytes(KEY, "big")})
        self.assertEqual(self.choose(13)[1], SL0.switch_id)  # back to DistCache: the less loaded leaf


class ReadsFromTheFabricAreNotReMarked(_Routing):
    """Only reads from clients are marked; a read coming down from a spine keeps its target."""

    def runTest(self) -> None:
        get = Message(op=Op.GET, digest=KEY, seq=2, target=SP1.switch_id)
        port, m = self.exchange(2, dc_frame(SERVER.ip, CLIENT.ip, get))
        self.assertEqual((port, m.target), (1, SP1.switch_id))


class RetryGoesToTheOtherCandidate(_Routing):
    """Attempt 1 of a read (same seq) goes to the cache the power of two choices did not pick: the storage
    leaf through the transit spine one slot on (exact frame), or the spine through cache_route."""

    def runTest(self) -> None:
        self.loads(spine_load=1, leaf_load=50)  # the spine is the pick
        self.assertEqual(self.choose(3), (2, SP0.switch_id))
        sp = transit_spine(KEY, attempt=1)
        self.assertNotEqual(sp, transit_spine(KEY))  # KEY's own transit is sp0: its retry goes up sp1
        flags = attempt_flags(1)
        self.send(1, dc_frame(CLIENT.ip, SERVER.ip, Message(op=Op.GET, digest=KEY, seq=3, flags=flags)))
        marked = Message(op=Op.GET, digest=KEY, seq=3, flags=flags, target=SL0.switch_id)
        self.expect(routed(dc_frame(CLIENT.ip, SERVER.ip, marked, udp_checksum=0), sp.mac), LEAF_UPLINK[sp.switch_id])
        self.expect_none()
        self.loads(spine_load=50, leaf_load=1)  # now the leaf is the pick: the retry goes to the spine
        self.assertEqual(self.choose(3)[1], SL0.switch_id)
        self.assertEqual(self.choose(3, attempt=1), (2, SP0.switch_id))
        self.assertEqual(self.choose(6, key=KEY1, attempt=1)[1], SL0.switch_id)  # sp1 picked, the retry: leaf
        self.assertEqual((self.stat(Stat.ROUTED_SPINE), self.stat(Stat.ROUTED_LEAF)), (2, 3))


class LaterRetriesGoStraightToTheServer(_Routing):
    """Attempt 2 and later: no cache at all (target 0), straight to the storage server through the transit
    spine ``attempt`` slots on, so successive retries go up different spines (exact frames)."""

    def runTest(self) -> None:
        self.loads(spine_load=1, leaf_load=50)
        ports = set()
        for attempt in (2, 3, 7):
            sp = transit_spine(KEY, attempt=attempt)
            flags = attempt_flags(attempt)
            self.send(1, dc_frame(CLIENT.ip, SERVER.ip, Message(op=Op.GET, digest=KEY, seq=4, flags=flags)))
            out = Message(op=Op.GET, digest=KEY, seq=4, flags=flags, target=0)
            self.expect(routed(dc_frame(CLIENT.ip, SERVER.ip, out, udp_checksum=0), sp.mac), LEAF_UPLINK[sp.switch_id])
            ports.add(LEAF_UPLINK[sp.switch_id])
        self.expect_none()
        self.assertEqual(ports, {2, 3})
        self.assertEqual((self.stat(Stat.ROUTED_SPINE), self.stat(Stat.ROUTED_LEAF)), (0, 0))


class PartitionRetryTakesNoCache(_Routing):
    """CachePartition has one candidate: a retry goes past every cache to the server."""

    mechanism = Mechanism.PARTITION

    def runTest(self) -> None:
        self.assertEqual(self.choose(2), (2, SP0.switch_id))
        self.assertEqual(self.choose(2, attempt=1), (LEAF_UPLINK[transit_spine(KEY, attempt=1).switch_id], 0))
        self.assertEqual(self.choose(2, attempt=2)[1], 0)


class ReplicatedRetryTakesTheNextReplicaSlot(_Routing):
    """CacheReplication: attempt 1 goes to the next replica slot's spine (another spine), attempt 2 to none."""

    mechanism = Mechanism.REPLICATION

    def runTest(self) -> None:
        for seq in range(4):
            first = replica_spine(KEY, seq)
            again = replica_spine(KEY, seq + 1)
            self.assertNotEqual(first, again)
            self.assertEqual(self.choose(seq), (SPINE_PORT[first], first), f"seq {seq}")
            self.assertEqual(self.choose(seq, attempt=1), (SPINE_PORT[again], again), f"seq {seq}")
            self.assertEqual(self.choose(seq, attempt=2)[1], 0, f"seq {seq}")


class OtherClientFlagsChangeNothing(_Routing):
    """CACHED and POPULATE in a client's read route it as if they were not there; only the attempt counts."""

    def runTest(self) -> None:
        self.loads(spine_load=1, leaf_load=50)
        junk = Flag.CACHED | Flag.POPULATE
        self.assertEqual(self.choose(4, flags=junk), (2, SP0.switch_id))
        self.assertEqual(self.choose(4, flags=junk, attempt=1)[1], SL0.switch_id)
