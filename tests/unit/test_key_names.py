"""Which key a digest stands for (shim/names.py): learned from requests, recorded for cached keys.

Switches, agents and the controller know a key only by its digest; the shim must know the key itself to fill or
refresh an entry.  A populate of a digest no request brought answers no_key (the agent asks again); the pairs of
cached keys live in Redis database 1, so another life of the shim finds them; an eviction forgets the pair.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis

from shim.dedup import MARKER_DB
from shim.names import NAMES_KEY, KeyNames
from tests.common.keys import digest
from tests.common.shim_bed import CLUSTER, shim_on_loopback

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

    async def lookup() -> bytes | None:
        markers = redis.asyncio.Redis(unix_socket_path=str(redis_sock), db=MARKER_DB)
        try:
            return await KeyNames(markers).lookup(digest("hot"))  # a new life: nothing learned from requests
        finally:
            await markers.aclose()

    assert asyncio.run(lookup()) == b"hot"


def test_the_keys_learned_from_requests_are_bounded_by_bytes() -> None:
    names = KeyNames(None, recent_bytes=1000)  # type: ignore[arg-type]
    for i in range(100):
        names.learn(digest(f"k{i}"), f"k{i}".encode() * 10)
    assert 0 < len(names) <= 1000 // (16 + 20)
    assert names._seen.get(digest("k99")) == b"k99" * 10 and digest("k0") not in names._seen  # the oldest went
