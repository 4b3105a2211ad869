"""Which key a digest stands for: what a shim needs to fill or refresh a cache entry.

Switches, agents and the controller know a cached key only by its 16-byte digest (wire.key_digest); Redis
knows it only by its bytes.  A shim learns the pair from every request that reaches it (each carries both,
and the shim checks that they agree), so the key of a hot digest a switch reported is known: its reads came
here while it was not cached.  The pairs of the keys a populate filled are also kept in Redis (MARKER_DB,
where no user command reaches), so a restarted shim can still refresh every copy after a Redis restart.
A digest whose key is not known cannot be filled (Fill.NO_KEY: the agent asks again later, after a read has
brought the key here); a refresh of one only invalidates its copies, which is always safe.
"""

from __future__ import annotations

from typing import cast

import redis.asyncio as aioredis

NAMES_KEY = b"dc:names"
"""The hash (in MARKER_DB) of digest -> key for every key a populate filled."""
RECENT_BYTES = 16 << 20
"""Bytes of keys remembered from requests (the oldest forgotten first): every key hot enough to report, at
keys of up to a kilobyte, is among the last 16 000 distinct keys read."""


class KeyNames:
    def __init__(self, markers: aioredis.Redis, recent_bytes: int = RECENT_BYTES) -> None:
        self.markers = markers
        self.recent_bytes = recent_bytes
        self._seen: dict[bytes, bytes] = {}  # insertion order: the oldest first
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._seen)

    def learn(self, digest: bytes, key: bytes) -> None:
        """A request carried ``key`` with its (checked) ``digest``."""
        seen = self._seen
        if digest not in seen:
            seen[digest] = key
            self._bytes += len(digest) + len(key)
            while self._bytes > self.recent_bytes:
                old = next(iter(seen))
                self._bytes -= len(old) + len(seen.pop(old))

    async def lookup(self, digest: bytes) -> bytes | None:
        """The key of ``digest``, from the requests seen or the populates recorded; None if neither has it."""
        key = self._seen.get(digest)
        if key is None:
            key = cast("bytes | None", await self.markers.hget(NAMES_KEY, digest))
        return key

    async def record(self, digest: bytes, key: bytes) -> None:
        """Keep the pair of a key about to be cached where a later life of the shim finds it."""
        self.learn(digest, key)
        await self.markers.hset(NAMES_KEY, digest, key)

    async def forget(self, digest: bytes) -> None:
        """No switch caches the key any more: its recorded pair goes (the hash holds cached keys only)."""
        await self.markers.hdel(NAMES_KEY, digest)
