"""Expiry (issue 45): no cache may answer for a key after Redis expired it.  Redis expires keys lazily and
notifies late, so a key with a time to live is never cached: a populate reads its value and TTL in one step
and leaves the entry invalid (``expires``); a write that clears the TTL makes it cacheable again."""

from __future__ import annotations

import time
from pathlib import Path

import redis

from distcache.wire import Op
from tests.common.keys import digest
from tests.common.shim_bed import CLUSTER, shim_on_loopback

SPINE = CLUSTER.spine(0).switch_id


def test_a_key_with_a_ttl_is_never_filled_and_a_write_that_clears_it_makes_it_cacheable(
    redis_sock: Path, tmp_path: Path
) -> None:
    with shim_on_loopback(redis_sock, tmp_path / "shim.sock") as bed:
        r = redis.Redis(unix_socket_path=str(redis_sock))
        key = digest("session")
        bed.client.put("session", "token")
        r.pexpire("session", 1000)  # (what a client's EXPIRE will do through the shim's executor)
        bed.peer.seen.clear()
        assert bed.link.populate(key, SPINE, 0, 1) == "expires"
        time.sleep(0.1)
        assert [m.op for m, _ in bed.peer.seen] == [Op.INVALIDATE]  # phase 1 only: the entry stays invalid
        assert bed.client.get("session") == b"token"
        time.sleep(1.1)
        assert bed.client.get("session") is None  # Redis expired it; no cache holds it
        assert bed.link.populate(key, SPINE, 0, 2) == "absent"
        bed.client.put("session", "again")  # SET clears any TTL: cacheable again
        assert r.pttl("session") == -1
        assert bed.link.populate(key, SPINE, 0, 3) == "valid"
