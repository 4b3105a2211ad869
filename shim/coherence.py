"""The two-phase coherence protocol as the storage server runs it (paper §4.3).

Phase 1 sends an INVALIDATE along each path through switches that may cache
the key — up through the storage-rack leaf to a spine, which reflects it back
as INVALIDATE_ACK, or only to the leaf, which then reflects it — and
retransmits until the acknowledgement arrives.  Only then may the server write its copy and answer
the client.  Phase 2 sends an UPDATE with the *same* sequence number and the
new value; switches accept it only if the last INVALIDATE they saw for the
slot carried that number, so a late or duplicated phase 2 of an older write
can never resurrect an old value.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum

from distcache.wire import MAX_CACHEABLE, MAX_DATAGRAM_KEY, Message, Op, encode, populate_invalidate

log = logging.getLogger(__name__)

Send = Callable[[bytes, tuple[str, int]], None]
Reserve = Callable[[int], Awaitable[object]]  # persist a floor: no later life of the shim starts below it

SEQ_MASK = 0xFFFFFFFFFFFFFFFF  # 64-bit: at 100 000 writes/s a number comes round after 5.8 million years
# where the floor lives in the shim's Redis (MARKER_DB, which no user command reaches)
SEQ_FLOOR_KEY = b"dc:coherence-floor"
# sequence numbers reserved at a time: the floor persisted ahead of the numbers used, renewed once half is used
SEQ_BLOCK = 1 << 20


class SequenceExhaustedError(RuntimeError):
    """Every reserved sequence number is used and the next reservation has not landed: the write is refused
    (nothing written) rather than given a number a later life of the shim could hand out again."""


def serial_newer(a: int, b: int) -> bool:
    """Whether 64-bit sequence number ``a`` is newer than ``b`` (serial arithmetic, RFC 1982), as switches
    compare them."""
    return a != b and ((a - b) & SEQ_MASK) < 1 << 63


def _shown(name: bytes) -> bytes:
    """The key a coherence message carries: the key itself if a datagram has room for it, else none."""
    return name if len(name) <= MAX_DATAGRAM_KEY else b""


class Exchange(Enum):
    """How an exchange on one path ended."""

    ACKED = "acked"  # the far end acknowledged: every copy on the path took the message
    # the far end was declared down before or while we waited: its ack will never come, and the path does NOT
    # count as done -- the switches before the far end (the storage leaf) may not have seen the message
    # (shim.phases then covers them by a path of their own)
    RELEASED = "released"
    TIMED_OUT = "timeout"  # no ack before the deadline


@dataclass
class CoherenceStats:
    invalidates: int = 0
    updates: int = 0
    retransmits: int = 0
    failed_invalidates: int = 0
    failed_updates: int = 0
    stray_acks: int = 0


@dataclass
class Coherence:
    """Sends coherence packets and waits for their acknowledgements."""

    send: Send
    # whether the controller has declared a switch down (the shim's view): no exchange with it starts or goes on
    is_down: Callable[[int], bool] = lambda _switch: False
    retry_interval: float = 0.05
    # how long a path's INVALIDATE is retried before the write is refused: longer than the controller takes to
    # declare a crashed switch down and move its buckets (0.4 s + up to ~1.1 s on a slow BMv2 fabric), whose
    # push then releases the wait (release()); at 1 s a write begun as a spine crashed was refused 24 ms before
    # the push came (make run TARGET=bmv2, 2026-11-28)
    invalidate_deadline: float = 2.5
    update_attempts: int = 4
    stats: CoherenceStats = field(default_factory=CoherenceStats)
    # Switches accept an INVALIDATE only if its seq is not older than the last one they accepted for the
    # entry (serial arithmetic), so no life of the shim may hand out a number at or below one an earlier life
    # used: it starts from the floor its earlier lives persisted (start_from; in Redis, which outlives the
    # shim with or without its state file), or the clock in milliseconds if that is ahead, and persists the
    # next floor (SEQ_BLOCK ahead) before it uses the numbers below it.  The clock alone went back after a
    # life that took more than 1000 numbers per second, or a clock stepped back.
    _seq: int = field(default_factory=lambda: int(time.time() * 1000) & SEQ_MASK)
    _reserved: int | None = None  # numbers up to here may be used (None: no floor is kept, as in unit tests)
    _reserve: Reserve | None = None
    _reserving: asyncio.Task | None = None
    # (reply op, seq, target, digest) -> the exchange waiting for that acknowledgement: the key too, so a late ack
    # of another key's exchange (a previous life's, one that came round again) never completes this one
    _waiters: dict[tuple[int, int, int, bytes], asyncio.Future] = field(default_factory=dict)

    async def start_from(self, floor: int | None, reserve: Reserve) -> None:
        """Continue from ``floor`` (the one earlier lives persisted; None: none did) if it is ahead of the
        clock, and persist the first reservation before any number is used."""
        if floor is not None and serial_newer(floor, self._seq):
            self._seq = floor
        self._reserve = reserve
        await self._renew()

    async def _renew(self) -> None:
        reserved = (self._seq + SEQ_BLOCK) & SEQ_MASK
        assert self._reserve is not None
        await self._reserve(reserved)
        self._reserved = reserved

    async def _renew_later(self) -> None:
        try:
            await self._renew()
        except Exception as e:  # noqa: BLE001 - Redis unreachable: the next number tries again
            log.warning("could not persist the sequence floor: %s", e)

    def next_seq(self) -> int:
        """A fresh coherence sequence number, newer than every one this shim's earlier lives used."""
        nxt = (self._seq + 1) & SEQ_MASK
        if self._reserved is not None:
            if not serial_newer(self._reserved, nxt):
                raise SequenceExhaustedError(
                    f"sequence numbers up to {self._reserved} used; the next reservation is late"
                )
            half_left = serial_newer((nxt + SEQ_BLOCK // 2) & SEQ_MASK, self._reserved)
            if half_left and (self._reserving is None or self._reserving.done()):
                self._reserving = asyncio.ensure_future(self._renew_later())
        self._seq = nxt
        return nxt

    def on_ack(self, msg: Message) -> None:
        """Called for every INVALIDATE_ACK / UPDATE_ACK the shim receives."""
        fut = self._waiters.get((int(msg.op), msg.seq, msg.target, msg.digest))
        if fut is None or fut.done():
            self.stats.stray_acks += 1
            return
        fut.set_result(msg)

    def release(self, targets: set[int]) -> None:
        """End the exchanges waiting on switches declared down (their acks will never come) as Exchange.RELEASED.

        Skipping the dead far end is safe (see shim.view: the controller has stopped every read
        from reaching it and flushes it before it serves again); the rest of its path is not
        covered by that, so the caller decides what to send instead.
        """
        for (_, _, target, _), fut in self._waiters.items():
            if target in targets and not fut.done():
                fut.set_result(None)

    async def _exchange(self, msg: Message, dest: tuple[str, int], attempts: int) -> Exchange:
        loop = asyncio.get_running_loop()
        key = (
            int(msg.op.reply()),
            msg.seq,
            msg.target,
            msg.digest,
        )  # one exchange per path: same seq, distinct targets
        fut = loop.create_future()
        self._waiters[key] = fut
        data = encode(msg)
        try:
            for i in range(attempts):
                # declared down before this exchange began, or between two tries: release() ended only the
                # exchanges waiting when the controller's push came, and a write's paths are read before its
                # exchanges start (asyncio.gather runs them a loop turn later, and the push may come between)
                if self.is_down(msg.target):
                    return Exchange.RELEASED
                if i:
                    self.stats.retransmits += 1
                self.send(data, dest)
                try:
                    ack = await asyncio.wait_for(asyncio.shield(fut), self.retry_interval)
                    return Exchange.RELEASED if ack is None else Exchange.ACKED
                except TimeoutError:
                    continue
            return Exchange.TIMED_OUT
        finally:
            self._waiters.pop(key, None)

    async def invalidate(
        self,
        key: bytes,
        seq: int,
        target: int,
        dest: tuple[str, int],
        tag: tuple[int, int] | None = None,
        name: bytes = b"",
    ) -> Exchange:
        """Phase 1 on one path for the key of digest ``key``; ACKED once every copy on it is invalid.

        ``tag=(cache_epoch, version)``: the INVALIDATE of a populate of ``target``'s entry with that
        tag, the only one that may arm a new entry (p4src/include/control/coherence.p4).  ``name``: the key
        itself, carried for captures and peers (switches ignore it).
        """
        self.stats.invalidates += 1
        attempts = max(1, round(self.invalidate_deadline / self.retry_interval))
        msg = (
            Message(op=Op.INVALIDATE, digest=key, seq=seq, target=target)
            if tag is None
            else populate_invalidate(key, seq, target, *tag)
        )
        msg.key = _shown(name)
        result = await self._exchange(msg, dest, attempts)
        if result == Exchange.TIMED_OUT:
            self.stats.failed_invalidates += 1
            log.warning("invalidate of %s (seq %d) not acknowledged by switch %d", key.hex(), seq, target)
        return result

    async def update(
        self, key: bytes, seq: int, value: bytes, target: int, dest: tuple[str, int], name: bytes = b""
    ) -> bool:
        """Phase 2 (also cache population) on one path; a failure only leaves copies invalid, which is safe."""
        if len(value) > MAX_CACHEABLE:
            return False
        self.stats.updates += 1
        result = await self._exchange(
            Message(Op.UPDATE, _shown(name), key, seq, value, target=target), dest, self.update_attempts
        )
        if result != Exchange.ACKED:
            self.stats.failed_updates += 1
        return result == Exchange.ACKED
