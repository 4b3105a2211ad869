"""An evicting maxmemory-policy (docs/protocol.md, "Nothing writes behind the caches"): every cached key Redis
evicts has its copies invalidated by the shim, from Redis' ``evicted`` keyspace events."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from distcache.wire import Op
from tests.common.keys import digest
from tests.common.shim_bed import CLUSTER, shim_on_loopback

pytestmark = pytest.mark.timeout(60)
SPINE = CLUSTER.spine(0).switch_id


def test_what_redis_evicts_is_invalidated_in_every_cache(redis_sock: Path, tmp_path: Path) -> None:
    r = redis.Redis(unix_socket_path=str(redis_sock))
    r.config_set("maxmemory-policy", "allkeys-random")
    try:
        with shim_on_loopback(redis_sock, tmp_path / "shim.sock") as b:
            cached = [f"hot{i}" for i in range(20)]
            for k in cached:
                b.client.put(k, "v" * 100)
                assert b.link.populate(digest(k), SPINE, 0, 1) == "valid"
            b.peer.seen.clear()
            used = int(r.info("memory")["used_memory"])
            r.config_set("maxmemory", used + 2_000_000)
            for i in range(6000):  # fill memory past maxmemory: Redis evicts keys at random, cached ones among them
                r.set(f"filler{i}", b"x" * 1000)
            evicted = [k for k in cached if not r.exists(k)]
            assert evicted, "nothing cached was evicted"
            deadline = time.monotonic() + 5
            want = {digest(k) for k in evicted}
            while time.monotonic() < deadline:
                seen = {m.digest for m, _ in b.peer.seen if m.op == Op.INVALIDATE}
                if want <= seen:
                    break
                time.sleep(0.05)
            assert want <= seen, f"{len(want - seen)} of {len(want)} evicted cached keys not invalidated"
            assert not {m.digest for m, _ in b.peer.seen if m.op == Op.UPDATE} & want  # nothing to fill: gone
            assert sum(b.link.stats()["evicted"].values()) >= len(evicted)
            assert set(b.link.stats()["evicted"]) <= {"absent", "valid"}  # (valid: written again meanwhile)
    finally:
        r.config_set("maxmemory", 0)
        r.config_set("maxmemory-policy", "noeviction")
        r.flushall()


def test_a_storage_redis_runs_with_the_clusters_memory_policy(tmp_path: Path) -> None:
    """cluster.redis_maxmemory / redis_maxmemory_policy reach the storage host's redis-server (harness.redis)."""
    import subprocess

    from harness.redis import redis_argv, wait_for_redis

    sock = tmp_path / "r.sock"
    proc = subprocess.Popen(
        redis_argv(sock, tmp_path, maxmemory="64mb", policy="allkeys-lru"), stdout=subprocess.DEVNULL
    )
    try:
        wait_for_redis(sock, proc)
        r = redis.Redis(unix_socket_path=str(sock))
        assert r.config_get("maxmemory-policy") == {"maxmemory-policy": "allkeys-lru"}
        assert r.config_get("maxmemory") == {"maxmemory": str(64 << 20)}
    finally:
        proc.terminate()
        proc.wait(5)
