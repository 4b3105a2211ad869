"""Writes to Redis, pipelined: the SETs and DELs of concurrent writes leave together.

A write may carry a marker (the shim's request id): it is set, with a
time to live, in the same MULTI/EXEC as the write, so a restarted shim can
tell that a retried request was applied before it crashed (shim/dedup.py).
Markers live in database ``MARKER_DB`` (1), user data in 0: the transaction
selects 1 for the marker and 0 again, so no user command, SCAN or FLUSHDB of
the data ever meets one.

Each write still waits for its own result, and the shim's per-key lock keeps
at most one write per key in flight, so batching never reorders two writes of
a key; writes of different keys commute.  At most ``in_flight`` pipelines are
at Redis at once; writes arriving meanwhile leave with the next one.  Under
load one round trip serves many writes (the Redis round trip was about half of
a PUT's cost, `make bench-shim`); when idle a write leaves at once.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from redis.asyncio import Redis

from shim.dedup import MARKER_DB

USER_DB = 0
# A DELETE and its marker in one step: the marker holds DEL's result (1: the key existed, 0: NOT_FOUND).
DEL_WITH_MARKER = (
    "local n = redis.call('DEL', KEYS[1]); redis.call('SELECT', ARGV[2]); "
    "redis.call('SET', KEYS[2], n, 'PX', ARGV[1]); redis.call('SELECT', ARGV[3]); return n"
)
MARKER_OK = b"1"  # what a PUT's marker holds (a DELETE's: b"1" or b"0")
MARKER_ERROR = b"E"  # a write answered ERROR: nothing was written, and a retry must not write it either
MARKER_BUSY = b"B"  # a write refused BUSY (the dedup table was full): not written, and a retry must not write it
Command = tuple[str, bytes, bytes | None, bytes | None]  # ("set"|"del", key, value or None, marker or None)


class WriteBatcher:
    def __init__(
        self, redis: Redis, markers: Redis, in_flight: int = 1, max_batch: int = 256, marker_ttl: float = 30.0
    ) -> None:
        """``redis`` on the user database, ``markers`` on MARKER_DB (the same server); markers live ``marker_ttl`` s."""
        self.redis, self.markers, self.in_flight, self.max_batch = redis, markers, in_flight, max_batch
        self.marker_ms = max(1, round(marker_ttl * 1000))
        self._queue: list[tuple[Command, asyncio.Future]] = []
        self._running = 0
        self._scheduled = False
        self.batches = 0

    def __len__(self) -> int:
        return len(self._queue)

    async def set(self, key: bytes, value: bytes, marker: bytes | None = None) -> bool:
        """SET; with ``marker``, also record it (for ``marker_ttl`` s) in the same transaction as the write."""
        return bool(await self._submit(("set", key, value, marker)))

    async def delete(self, key: bytes, marker: bytes | None = None) -> int:
        return int(await self._submit(("del", key, None, marker)))

    async def refuse(self, marker: bytes, outcome: bytes = MARKER_ERROR) -> bytes | None:
        """Record that the write of ``marker`` was refused (``outcome``: ERROR or BUSY; nothing written), unless
        it was applied: None if recorded, else the marker the write left (then its outcome stands)."""
        if await self.markers.set(marker, outcome, px=self.marker_ms, nx=True):
            return None
        return await self.marker(marker)

    async def marker(self, marker: bytes) -> bytes | None:
        """What the write of ``marker`` left: MARKER_OK (or a DELETE's b"0"), MARKER_ERROR, MARKER_BUSY or None."""
        return cast("bytes | None", await self.markers.get(marker))  # the shim's client returns bytes

    def _submit(self, cmd: Command) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((cmd, fut))
        self._schedule()
        return fut

    def _schedule(self) -> None:
        if self._queue and self._running < self.in_flight and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        if not self._queue or self._running >= self.in_flight:
            return
        batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
        self._running += 1
        asyncio.get_running_loop().create_task(self._run(batch))

    async def _run(self, batch: list[tuple[Command, asyncio.Future]]) -> None:
        try:
            pipe = self.redis.pipeline(transaction=True)  # MULTI/EXEC: a write and its marker land together
            where = []  # index of each write's own result
            for (op, key, value, marker), _ in batch:
                where.append(len(pipe))
                if op == "set":
                    pipe.set(key, cast(bytes, value))  # a set always carries its value
                    if marker is not None:
                        pipe.execute_command("SELECT", MARKER_DB)
                        pipe.set(marker, MARKER_OK, px=self.marker_ms)
                        pipe.execute_command("SELECT", USER_DB)
                elif marker is not None:  # the marker records whether the key existed: a retry gets the same status
                    pipe.eval(DEL_WITH_MARKER, 2, key, marker, self.marker_ms, MARKER_DB, USER_DB)
                else:
                    pipe.delete(key)
            everything = await pipe.execute(raise_on_error=False)
            results = [everything[i] for i in where]
        except Exception as e:  # noqa: BLE001 - every write of the batch gets the failure (e.g. Redis gone)
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(e)
        else:
            for (_, fut), res in zip(batch, results, strict=True):
                if fut.done():
                    continue
                if isinstance(res, Exception):
                    fut.set_exception(res)
                else:
                    fut.set_result(res)
            self.batches += 1
        finally:
            self._running -= 1
            self._schedule()
