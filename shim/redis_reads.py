"""Reads from Redis, batched: the GETs that arrive together leave together, as one MGET.

At most ``MGETS_IN_FLIGHT`` batches are at Redis at once; reads arriving meanwhile queue up
and leave as the next batch when one comes back.  Under load one round trip (and one task)
serves many reads, which is what lets one Python process keep up with Redis; when idle a
read leaves at once.  Reads take no lock: each is linearized where Redis executes it.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from distcache.wire import Message, Status, encode
from shim.commands import WRONGTYPE

if TYPE_CHECKING:
    from redis.asyncio import Redis

MGETS_IN_FLIGHT = 1  # read batches at Redis at once: reads arriving meanwhile leave together with the next
# (1 gave the biggest batches: 29 us of shim CPU per GET against 48 us with 2, make bench-shim)
MAX_BATCH = 256  # reads per MGET

Address = tuple[str, int]
Replied = Callable[[str, str, float], None]  # (op, status, seconds since it was received)


class ReadBatcher:
    """Answers GETs from Redis in batches; ``send(data, addr)`` sends a reply, ``replied`` records it (for
    the shim's metrics), ``errors`` counts failed reads by reason, ``tasks`` holds the batches under way
    (the shim cancels them when it closes)."""

    def __init__(
        self,
        redis: Redis,
        send: Callable[[bytes, Address], None],
        errors: Counter[str],
        tasks: set[asyncio.Task],
        replied: Replied,
    ) -> None:
        self.redis, self.send, self.errors, self.tasks, self.replied = redis, send, errors, tasks, replied
        self._gets: list[tuple[Message, Address, float]] = []  # reads waiting for the next MGET, when received
        self._in_flight = 0
        self._flush_scheduled = False
        self.batches = 0

    def __len__(self) -> int:
        return len(self._gets)

    def add(self, msg: Message, addr: Address, received: float) -> None:
        """Queue a read (``received``: its ``time.monotonic()``); it leaves with the next batch (at once if
        no batch is at Redis)."""
        self._gets.append((msg, addr, received))
        if self._in_flight < MGETS_IN_FLIGHT and not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._gets or self._in_flight >= MGETS_IN_FLIGHT:
            return
        batch, self._gets = self._gets[:MAX_BATCH], self._gets[MAX_BATCH:]
        self._in_flight += 1
        task = asyncio.get_running_loop().create_task(self._serve(batch))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _reread(self, batch: list[tuple[Message, Address, float]], values: list[bytes | None]) -> set[int]:
        """Read again, each with its own GET, the keys MGET found nothing for, and put what each GET found into
        ``values``; the indices of those whose key holds another type than a string (MGET answers those nil,
        GET answers WRONGTYPE).  One more round trip, for the misses only.

        Each of these reads is the GET's (linearized where Redis runs it), not the MGET's: a type looked up
        apart from the MGET (TYPE after it) was wrong when a write came between them -- a hash read as absent
        after a SET had already replaced it (the fault matrix's HSET mix found it)."""
        misses = [i for i, v in enumerate(values) if v is None]
        try:
            pipe = self.redis.pipeline(transaction=False)
            for i in misses:
                pipe.get(batch[i][0].key)
            again = await pipe.execute(raise_on_error=False)
        except Exception:  # noqa: BLE001 - answered as the MGET said (absent); the next read asks again
            return set()
        wrong = set()
        for i, v in zip(misses, again, strict=True):
            if isinstance(v, ResponseError) and str(v).startswith("WRONGTYPE"):
                wrong.add(i)
            elif isinstance(v, bytes):
                values[i] = v  # written since the MGET: what the key holds now
        return wrong

    async def _serve(self, batch: list[tuple[Message, Address, float]]) -> None:
        try:
            values = cast("list[bytes | None]", await self.redis.mget([m.key for m, _, _ in batch]))  # bytes client
        except Exception as e:  # noqa: BLE001 - a failed read changed nothing: answer ERROR, keep serving
            self.errors[
                "redis_unavailable" if isinstance(e, (RedisConnectionError, RedisTimeoutError)) else type(e).__name__
            ] += len(batch)
            values = None
        finally:
            self._in_flight -= 1
            if self._gets and not self._flush_scheduled:
                self._flush_scheduled = True
                asyncio.get_running_loop().call_soon(self._flush)
        wrong = await self._reread(batch, values) if values is not None and None in values else set()
        now = time.monotonic()
        for i, (m, addr, received) in enumerate(batch):
            value = None if values is None else values[i]
            if values is None:
                status = Status.ERROR
            elif i in wrong:
                status, value = Status.WRONG_TYPE, WRONGTYPE
            elif value is None:
                status = Status.NOT_FOUND
            else:
                status = Status.OK
            self.send(encode(m.reply(status, value or b"")), addr)
            self.replied("GET", status.name, now - received)
        self.batches += 1
