"""An evicting maxmemory-policy: what Redis evicts is invalidated in every cache (docs/protocol.md, "Nothing writes
behind the caches").  Off with ``noeviction``, the default: then nothing is evicted and nothing here runs."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

if TYPE_CHECKING:
    from shim.server import Shim

log = logging.getLogger(__name__)


async def watch_evictions(shim: Shim) -> None:
    """Under an evicting maxmemory-policy, invalidate every copy of a cached key Redis evicts: it sends an
    ``evicted`` keyspace event as it evicts (the shim turns them on), and the copies are refreshed as after a
    write of "no value" (phase 1, then nothing to fill).  A cache may answer for the evicted key until that
    INVALIDATE lands: one notification and one phase-1 round, milliseconds (docs/protocol.md)."""
    events = (await shim.redis.config_get("notify-keyspace-events")).get("notify-keyspace-events", "")
    events = events.decode() if isinstance(events, bytes) else str(events or "")
    await shim.redis.config_set("notify-keyspace-events", "".join(sorted(set(events) | {"E", "e"})))
    pubsub = shim.redis.pubsub()
    await pubsub.subscribe("__keyevent@0__:evicted")
    try:
        async for event in pubsub.listen():
            if event.get("type") != "message":
                continue
            key = bytes(event["data"])
            digest = shim.cluster.digest(key)
            if shim.view.holders(digest):
                shim.names.learn(digest, key)
                shim.spawn(_invalidate(shim, digest))
    finally:
        await pubsub.aclose()


async def _invalidate(shim: Shim, digest: bytes) -> None:
    try:
        shim.evicted[str(await shim.refresh(digest))] += 1
    except (RedisConnectionError, RedisTimeoutError, OSError) as e:
        shim.evicted["failed"] += 1
        log.warning("invalidating an evicted key: redis unavailable: %s", e)
