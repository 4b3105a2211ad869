"""Retried writes are applied once: recent writes remembered by request id, with their replies.

A client retries a request it got no reply to, with the same sequence number
from the same socket.  A PUT or DELETE applied twice is not harmless: if
another client's write lands in between, the late duplicate brings the first
value back after the second was acknowledged; and a duplicate of a write that
was answered ERROR ("nothing was written") would write it after all.  So the
shim identifies a write by (client address, client port, seq): the first copy
is applied; a copy arriving while it runs is dropped (the reply is on its
way); a copy arriving after it finished gets the same reply again.

Entries live ``ttl`` seconds (far beyond any client's retry span: 4 × 0.5 s
by default) and at most ``capacity`` are kept, oldest dropped first, so memory
stays bounded.  A shim restart forgets them; a client stops retrying long
before a shim can restart.  But a client still retrying when a shim is killed
and restarted would have its write applied twice (the linearizability check
found exactly that): so every write also sets a marker key in Redis, in the
same MULTI/EXEC as the write (shim/redis_writes.py), that lives as long as
the entries here; for that long after its start, the shim asks Redis before
applying a write it does not remember, and answers a marked one again instead.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

RequestId = tuple[str, int, int]  # client address, client port, seq


def dedup_marker(rid: RequestId) -> bytes:
    """The Redis key that records, with the write itself, that request ``rid`` was applied.

    Never a data key: data keys are 16-byte wire keys, this is longer.
    """
    return f"dc:applied:{rid[0]}:{rid[1]}:{rid[2]}".encode()


PENDING = b""  # marker: the write is being applied; its reply is not known yet


class Dedup:
    def __init__(self, capacity: int = 65536, ttl: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity, self.ttl, self._clock = capacity, ttl, clock
        self._seen: OrderedDict[RequestId, tuple[float, bytes]] = OrderedDict()

    def begin(self, rid: RequestId) -> bytes | None:
        """None: a new write, apply it (it is now pending).  PENDING: a copy of a write in progress, drop it.
        Anything else: the encoded reply of the finished write, to send again."""
        self._expire()
        entry = self._seen.get(rid)
        if entry is not None:
            return entry[1]
        self._seen[rid] = (self._clock(), PENDING)
        while len(self._seen) > self.capacity:
            self._seen.popitem(last=False)
        return None

    def finish(self, rid: RequestId, reply: bytes) -> None:
        if rid in self._seen:
            self._seen[rid] = (self._seen[rid][0], reply)

    def forget(self, rid: RequestId) -> None:
        """The write failed before any reply (the shim could not even answer): let a retry apply it."""
        self._seen.pop(rid, None)

    def _expire(self) -> None:
        limit = self._clock() - self.ttl
        while self._seen:
            rid, (at, _) = next(iter(self._seen.items()))
            if at >= limit:
                break
            del self._seen[rid]

    def __len__(self) -> int:
        return len(self._seen)
