"""shim.coherence alone: an exchange with a switch the controller declared down neither starts nor waits.

The interleaving (a loaded CI run lost a write to it: ``invalidate ... not acknowledged by switch 2`` 1.2 s
after the controller declared sp1 dead): a write reads its paths from the view (sp1 still up) and hands
them to asyncio.gather, which starts the exchanges a loop turn later; in between, the controller's push
declares sp1 down and release() ends the exchanges waiting on it -- none yet.  The exchange then began,
retransmitted to the dead spine until the invalidation deadline, and the write failed with an ERROR.
"""

from __future__ import annotations

import asyncio

import pytest

from distcache.wire import Message, Op
from shim import coherence
from shim.coherence import Coherence, Exchange

pytestmark = pytest.mark.timeout(30)

KEY = b"k".ljust(16, b"\0")
DEAD, LIVE = 2, 1
DEST = ("127.0.0.1", 9)


def test_an_exchange_scheduled_before_the_push_and_started_after_it_is_released() -> None:
    async def scenario() -> tuple[str, float, int]:
        loop = asyncio.get_running_loop()
        down: set[int] = set()
        sent: list[tuple[str, int]] = []
        c = Coherence(send=lambda _data, dest: sent.append(dest), is_down=down.__contains__)
        c.invalidate_deadline = 1.0
        task = asyncio.ensure_future(c.invalidate(KEY, 7, DEAD, DEST))  # as gather: runs a loop turn later
        down.add(DEAD)  # the controller's push, first
        c.release(down)
        t0 = loop.time()
        result = await task
        return result, loop.time() - t0, len(sent)

    result, took, sent = asyncio.run(scenario())
    assert (result, sent) == (Exchange.RELEASED, 0)
    assert took < 0.5


def test_a_switch_declared_down_between_two_tries_is_released_at_the_next() -> None:
    async def scenario() -> tuple[str, int]:
        down: set[int] = set()
        sent: list[tuple[str, int]] = []
        c = Coherence(send=lambda _data, dest: sent.append(dest), is_down=down.__contains__, retry_interval=0.02)
        task = asyncio.ensure_future(c.invalidate(KEY, 8, DEAD, DEST))
        await asyncio.sleep(0.05)  # a few tries, unanswered
        down.add(DEAD)  # declared down without a release (its push raced the wait)
        return await task, len(sent)

    result, sent = asyncio.run(scenario())
    assert result == Exchange.RELEASED and 1 <= sent <= 5


def test_a_live_switch_is_still_waited_for_and_acknowledged() -> None:
    async def scenario() -> str:
        c = Coherence(send=lambda _data, _dest: None, is_down={DEAD}.__contains__)
        task = asyncio.ensure_future(c.invalidate(KEY, 9, LIVE, DEST))
        await asyncio.sleep(0.01)
        c.on_ack(Message(op=Op.INVALIDATE_ACK, digest=KEY, seq=9, target=LIVE))
        return await task

    assert asyncio.run(scenario()) == Exchange.ACKED


def test_an_ack_of_another_key_with_the_same_seq_and_target_completes_nothing() -> None:
    """A late acknowledgement (a previous life's, or one whose seq came round again) names another key: it must
    not stand for this key's phase 1, whose copies it never passed."""

    async def scenario() -> tuple[str, int]:
        c = Coherence(send=lambda _data, _dest: None, retry_interval=0.02)
        c.invalidate_deadline = 0.2
        task = asyncio.ensure_future(c.invalidate(KEY, 11, LIVE, DEST))
        await asyncio.sleep(0.01)
        c.on_ack(Message(op=Op.INVALIDATE_ACK, digest=b"other".ljust(16, b"\0"), seq=11, target=LIVE))
        return await task, c.stats.stray_acks

    result, stray = asyncio.run(scenario())
    assert (result, stray) == (Exchange.TIMED_OUT, 1)


def test_sequence_numbers_continue_from_the_persisted_floor_and_renew_it_ahead(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(coherence, "SEQ_BLOCK", 8)
    saved: list[int] = []

    async def reserve(n: int) -> None:
        saved.append(n)

    async def scenario() -> list[int]:
        c = Coherence(send=lambda _data, _dest: None)
        c._seq = 100  # the clock (stepped back, or behind a busy earlier life)
        await c.start_from(5000, reserve)  # the floor an earlier life persisted is ahead: it wins
        assert saved == [5008]  # persisted before any number is used
        got = [c.next_seq() for _ in range(5)]
        await asyncio.sleep(0)  # the renewal, started once half the block was used
        return got

    got = asyncio.run(scenario())
    assert got == [5001, 5002, 5003, 5004, 5005]
    assert saved[1] > 5005  # renewed ahead of every number used
    assert coherence.serial_newer(0x10, 2**64 - 0x10) and not coherence.serial_newer(2**64 - 0x10, 0x10)
    assert coherence.serial_newer(2**33, 2**32 - 1)  # 64 bits: past where a 32-bit number came round


def test_a_number_past_the_reservation_is_refused_while_the_next_one_is_late(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(coherence, "SEQ_BLOCK", 4)
    never = asyncio.Event()
    calls = 0

    async def reserve(_n: int) -> None:
        nonlocal calls
        calls += 1
        if calls > 1:
            await never.wait()  # Redis does not answer

    async def scenario() -> list[int]:
        c = Coherence(send=lambda _data, _dest: None)
        c._seq = 10
        await c.start_from(None, reserve)
        got = [c.next_seq() for _ in range(3)]
        with pytest.raises(coherence.SequenceExhaustedError):
            c.next_seq()  # 14 was reserved as the next life's start: never handed out here
        return got

    assert asyncio.run(scenario()) == [11, 12, 13]
