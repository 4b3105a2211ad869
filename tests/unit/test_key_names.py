"""Which key a digest stands for (shim/names.go): learned from requests, recorded for cached keys.

Switches, agents and the controller know a key only by its digest; the shim must know the key itself to fill or
refresh an entry.  A populate of a digest no request brought answers no_key (the agent asks again); the pairs of
cached keys live in Redis database 1, so another life of the shim finds them; an eviction forgets the pair.
(The bound on what it learns from requests: shim/parts_test.go.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from distcache.hashing import N_SPINE_BUCKETS
from distcache.records import MARKER_DB, NAMES_KEY
from distcache.rpc.shim import ShimLink
from distcache.wire import Op
from tests.common.keys import digest
from tests.common.shim_bed import CLUSTER, ShimThread, SwitchPeer, shim_on_loopback

pytestmark = pytest.mark.timeout(60)
SPINE = CLUSTER.spine(0).switch_id


def test_a_digest_is_filled_only_once_a_request_brought_its_key(redis_sock: Path, tmp_path: Path) -> None:
    with shim_on_loopback(redis_sock, tmp_path / "shim.sock") as bed:
        key = b"\x00user:\xff" + bytes(100)
        redis.Redis(unix_socket_path=str(redis_sock)).set(key, b"v")  # written by no request this shim saw
        assert bed.link.populate(digest(key), SPINE, 0, 1) == "no_key"
        assert bed.peer.seen == []  # nothing was sent for it
        assert bed.client.get(key) == b"v"  # a read (what makes a key hot) brings it
        assert bed.link.populate(digest(key), SPINE, 0, 2) == "valid"
        markers = redis.Redis(unix_socket_path=str(redis_sock), db=MARKER_DB)
        assert markers.hget(NAMES_KEY, digest(key)) == key  # recorded where no user command reaches
        assert redis.Redis(unix_socket_path=str(redis_sock)).dbsize() == 1  # the user's database holds the key only
        assert bed.link.evict(digest(key), SPINE) is True
        assert markers.hget(NAMES_KEY, digest(key)) is None  # no switch caches it: forgotten


def test_another_life_of_the_shim_finds_the_keys_it_filled(redis_sock: Path, tmp_path: Path) -> None:
    with shim_on_loopback(redis_sock, tmp_path / "shim.sock") as bed:
        bed.client.put("hot", "v")
        assert bed.link.populate(digest("hot"), SPINE, 0, 1) == "valid"
    peer = SwitchPeer(redis_sock)
    again = ShimThread(redis_sock, peer, tmp_path / "again.sock")  # a new life: nothing learned from requests
    try:
        link = ShimLink(again.control_addr)
        link.partition([SPINE] * N_SPINE_BUCKETS)
        assert link.populate(digest("hot"), SPINE, 0, 2) == "valid"  # its name from Redis
        assert [m.key for m, _ in peer.seen if m.op == Op.UPDATE] == [b"hot"]
    finally:
        again.close()
        peer.close()
