"""The watch on a shim's redis-server: a restart (a new run_id) resynchronizes every cached key."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

if TYPE_CHECKING:
    from shim.server import Shim

log = logging.getLogger(__name__)

REDIS_WATCH_INTERVAL = 0.2  # seconds between checks that the shim's redis-server is the same process


async def watch_redis(shim: Shim) -> None:
    """Notice a restart of the shim's redis-server (a new run_id) and resynchronize the caches.

    A restarted Redis holds what its append-only file kept: with ``appendfsync always`` every
    acknowledged write, with a laxer policy possibly less.  Copies in switches may hold values
    it no longer has, and the shim cannot vouch for them: every cached key is refreshed as if
    written again with what Redis holds now (phase 1 invalidates every copy, phase 2 fills it).

    The resynchronization runs beside the watch, which goes on: a resync waiting on a switch that does
    not answer (2.5 s per key) once kept the watch from seeing the next restart, and a Redis error in it
    (Redis killed again meanwhile) ended the watch for good (the fault matrix: a shim that noticed no
    restart for a minute).  A restart seen while one runs starts it again: what the newest Redis holds
    is what every copy must follow, and a key the cancelled one had half refreshed is refreshed again
    (its copies were left invalid, or as they were).
    """
    resync: asyncio.Task | None = None
    while True:
        await asyncio.sleep(REDIS_WATCH_INTERVAL)
        try:
            run_id = (await shim.redis.info("server"))["run_id"]
        except (RedisConnectionError, RedisTimeoutError, OSError):
            shim.redis_down = True
            continue
        shim.redis_down = False
        if run_id == shim.redis_run_id:
            continue
        shim.redis_run_id = run_id
        shim.redis_restarts += 1
        if resync is not None:
            resync.cancel()
        resync = shim.spawn(_resync(shim))


async def _resync(shim: Shim) -> None:
    """Refresh every key some switch may cache, after a restart of Redis."""
    try:
        keys = list(shim.view.cached)
        if not shim.view.view_known:
            log.warning(
                "redis-server restarted while the cached keys of switches %s are unknown: "
                "their copies are refreshed when each key is next written",
                shim.view.unknown_switches,
            )
        log.warning("redis-server restarted: resynchronizing %d cached keys", len(keys))
        for key in keys:
            shim.resynced[await shim.refresh(key)] += 1
    except (RedisConnectionError, RedisTimeoutError, OSError) as e:
        # Redis went away again: its next life is a new run id, and the watch starts the resync again then
        log.warning("resynchronization stopped: redis unavailable: %s", e)
