"""A write's two phases (paper §4.3) along the coherence paths of the shim's view: phase 1 invalidates
every copy a read could reach, phase 2 writes the new value into the copies phase 1 reached.

Each path ends at a far end (a spine, or the storage leaf, which every path of this server passes);
:mod:`shim.coherence` sends, retransmits and matches the acks of one path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from distcache.fill import Fill
from distcache.wire import MAX_CACHEABLE
from shim.coherence import Coherence, Exchange
from shim.view import CacheView

log = logging.getLogger("shim.server")  # the name the shim's log lines had before this module split off

CoherenceAddress = Callable[[int], tuple[str, int]]


class Phases:
    """Phase 1 and phase 2 of one key, over ``coherence``, to the far ends ``view`` names, each reached
    at ``address(switch_id)``.  ``key`` is the key's digest (what switches and the view know it by);
    ``name``, the key itself, rides along in the messages for captures (switches ignore it)."""

    def __init__(self, coherence: Coherence, view: CacheView, address: CoherenceAddress) -> None:
        self.coherence, self.view, self.address = coherence, view, address

    async def invalidate(
        self, key: bytes, seq: int, paths: list[int], tag: tuple[int, int] | None = None, name: bytes = b""
    ) -> list[int] | None:
        """Phase 1 along ``paths``; the far ends that acknowledged it, or None if a path timed out.

        A path whose far end was declared down meanwhile is dropped, but the storage leaf before it
        still counts: if no acknowledged path passed the leaf and it may hold a copy, the same
        message goes on a path ending at the leaf.
        """
        if not paths:
            log.error("no live switch to invalidate %s at; has the controller pushed the partition?", key.hex())
            return None
        results = await asyncio.gather(
            *(self.coherence.invalidate(key, seq, t, self.address(t), tag, name) for t in paths)
        )
        if any(r not in (Exchange.ACKED, Exchange.RELEASED) for r in results):
            return None
        acked = [t for t, r in zip(paths, results, strict=True) if r == Exchange.ACKED]
        leaf = self.view.leaf_id
        if not acked and tag is None and leaf in self.view.holders(key):
            r = await self.coherence.invalidate(key, seq, leaf, self.address(leaf), name=name)
            if r == Exchange.ACKED:
                acked = [leaf]
            elif r != Exchange.RELEASED:
                return None
        return acked

    async def update(self, key: bytes, seq: int, value: bytes, paths: list[int], name: bytes = b"") -> bool:
        """Phase 2 along ``paths``: whether every far end acknowledged it."""
        if not paths:
            return False
        oks = await asyncio.gather(*(self.coherence.update(key, seq, value, t, self.address(t), name) for t in paths))
        return all(oks)

    async def fill(
        self,
        key: bytes,
        seq: int,
        value: bytes | Fill | None,
        paths: list[int] | None,
        expires: bool = False,
        name: bytes = b"",
    ) -> Fill:
        """Phase 2 of a populate or refresh whose phase 1 took ``paths`` (None: it failed), and its outcome.

        ``expires``: the key has a time to live, read with its value in one step.  Such a key is never cached:
        Redis expires keys lazily and notifies late, so no switch could be told in time (docs/protocol.md)."""
        if paths is None:
            return Fill.FAILED
        if value is None:
            return Fill.ABSENT
        if isinstance(value, Fill):  # WRONG_TYPE (a hash, a list...): never cached
            return value
        if expires:
            return Fill.EXPIRES
        if len(value) > MAX_CACHEABLE:
            return Fill.TOO_LARGE
        return Fill.VALID if await self.update(key, seq, value, paths, name) else Fill.FAILED
