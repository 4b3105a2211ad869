"""Per-key asyncio locks that exist only while some task holds or awaits them.

The shim serializes the writes (and populates) of a key under its lock; keys are many and most are
written rarely, so a lock is dropped as soon as nobody uses it, which keeps memory bounded.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class KeyLocks:
    def __init__(self) -> None:
        self._locks: dict[bytes, asyncio.Lock] = {}
        self._users: Counter[bytes] = Counter()

    @asynccontextmanager
    async def hold(self, key: bytes) -> AsyncIterator[None]:
        """Hold ``key``'s lock for the body of the ``async with``."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] += 1
        try:
            async with lock:
                yield
        finally:
            self._users[key] -= 1
            if self._users[key] == 0:
                del self._users[key]
                self._locks.pop(key, None)
