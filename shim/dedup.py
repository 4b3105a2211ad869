"""Retried writes are applied once, at any rate: every write remembered for the whole retry span.

A client retries a request it got no reply to, with the same sequence number
from the same socket.  A PUT or DELETE applied twice is not harmless: if
another client's write lands in between, the late duplicate brings the first
value back after the second was acknowledged; and a duplicate of a write that
was answered ERROR ("nothing was written") would write it after all.  So the
shim identifies a write by (client address, client port, seq): the first copy
is applied; a copy arriving while it runs is dropped (the reply is on its
way); a copy arriving after it finished gets the same reply again.

Every entry is kept for ``span`` seconds (:data:`distcache.wire.RETRY_SPAN`:
a client refuses a retry budget that could outlast it), whatever the rate: no
entry is dropped early to make room.  Memory is bounded instead by
``memory`` bytes (about :data:`ENTRY_BYTES` per entry, plus the bytes of a
long reply, such as a GETSET's that carries a value; so rate x span entries fit);
a new write that finds the table full is refused with :data:`BUSY` (nothing
written, the client raises ``ServerBusyError``) rather than applied at the risk of a second application later.

A shim restart forgets the table; a client may still be retrying.  So every
write also sets a marker in Redis (database :data:`MARKER_DB`, which no user
command reaches), in the same MULTI/EXEC as the write (shim/redis_writes.py),
living ``span`` seconds; for that long after its start, and while it refuses
writes BUSY (which it cannot remember either), the shim asks Redis before
applying a write it does not remember, and answers a marked one again instead.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from distcache.wire import RETRY_SPAN

RequestId = tuple[str, int]  # client address, seq (the port does not count: a client that rebinds keeps it)

MARKER_DB = 1
"""The Redis database of the markers (and the coherence floor): user data is database 0."""

ENTRY_BYTES = 320
"""Memory one remembered write costs (the id tuple, its reply, the table's slot): measured, not exact."""
REPLY_BYTES = 128
"""Of a reply's bytes, what ENTRY_BYTES covers; a longer reply (a long key, a command's reply carrying a
value) costs its bytes beyond this too."""


def _extra(reply: bytes) -> int:
    return max(0, len(reply) - REPLY_BYTES)


DEDUP_MEMORY = 64 << 20
"""Default bound on the table's memory: 64 MB, about 200 000 entries, 7 000 writes/s for 30 s."""


def dedup_marker(rid: RequestId) -> bytes:
    """The Redis key (in :data:`MARKER_DB`) that records, with the write itself, that request ``rid`` was applied."""
    return f"dc:applied:{rid[0]}:{rid[1]}".encode()


PENDING = b""  # the write is being applied; its reply is not known yet
BUSY = b"busy"  # the table is full: refuse the write (it is not remembered)


class Dedup:
    def __init__(
        self, memory: int = DEDUP_MEMORY, span: float = RETRY_SPAN, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if memory < ENTRY_BYTES:
            raise ValueError(f"dedup memory {memory} B holds no entry; give at least {ENTRY_BYTES} B")
        self.span, self._clock = span, clock
        self.memory = memory
        self.capacity = memory // ENTRY_BYTES  # entries of the smallest size (a reply that carries no value)
        self._seen: OrderedDict[RequestId, tuple[float, bytes]] = OrderedDict()  # oldest first
        self._bytes = 0  # ENTRY_BYTES per entry plus its reply's bytes past REPLY_BYTES
        self.refused = 0  # writes refused BUSY

    def begin(self, rid: RequestId) -> bytes | None:
        """None: a new write, apply it (it is now pending).  PENDING: a copy of a write in progress, drop it.
        BUSY: a new write the table has no room for; refuse it.  Anything else: the encoded reply of the
        finished write, to send again."""
        self._expire()
        entry = self._seen.get(rid)
        if entry is not None:
            return entry[1]
        if self._bytes + ENTRY_BYTES > self.memory:
            self.refused += 1
            return BUSY
        self._seen[rid] = (self._clock(), PENDING)
        self._bytes += ENTRY_BYTES
        return None

    def peek(self, rid: RequestId) -> bytes | None:
        """What :meth:`begin` would answer for a copy of a write it knows (PENDING or its reply), without
        beginning one: None for a write it does not know."""
        self._expire()
        entry = self._seen.get(rid)
        return None if entry is None else entry[1]

    def finish(self, rid: RequestId, reply: bytes) -> None:
        entry = self._seen.get(rid)
        if entry is not None:
            self._seen[rid] = (entry[0], reply)
            self._bytes += _extra(reply) - _extra(entry[1])

    def forget(self, rid: RequestId) -> None:
        """The write failed before any reply (the shim could not even answer): let a retry apply it."""
        entry = self._seen.pop(rid, None)
        if entry is not None:
            self._bytes -= ENTRY_BYTES + _extra(entry[1])

    def _expire(self) -> None:
        limit = self._clock() - self.span
        seen = self._seen
        while seen:
            rid, (at, _) = next(iter(seen.items()))
            if at >= limit:
                break
            self._bytes -= ENTRY_BYTES + _extra(seen.pop(rid)[1])

    def __len__(self) -> int:
        return len(self._seen)
