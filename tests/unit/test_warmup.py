"""After a failover the new owner caches the failed spine's hottest keys of its new buckets at once; which
ones: free slots first, then only keys REPLACE_MARGIN times hotter than one it would evict."""

from __future__ import annotations

import time

from controller.warmup import paced, warm_keys
from distcache.replacement import REPLACE_MARGIN


def k(i: int) -> bytes:
    return i.to_bytes(16, "big")


def test_free_slots_take_the_hottest_moved_keys_first() -> None:
    moved = {k(1): 5, k(2): 50, k(3): 20}
    assert warm_keys(moved, {}, free=2) == [k(2), k(3)]


def test_a_held_key_is_replaced_only_by_a_key_margin_times_hotter() -> None:
    held = {k(10): 10, k(11): 40}
    moved = {k(1): int(10 * REPLACE_MARGIN) + 1, k(2): int(10 * REPLACE_MARGIN), k(3): 1000}
    # k(3) replaces the coldest (10); k(1) would need a held key colder than it by the margin: 40 is not
    assert warm_keys(moved, held, free=0) == [k(3)]
    assert warm_keys({k(1): 16}, {k(10): 10}, free=0) == [k(1)]
    assert warm_keys({k(2): 15}, {k(10): 10}, free=0) == []


def test_keys_already_held_or_never_read_are_left_alone() -> None:
    assert warm_keys({k(1): 9, k(2): 0}, {k(1): 1}, free=5) == []


def test_free_slots_then_replacements_in_order_of_heat() -> None:
    held = {k(10): 2, k(11): 3, k(12): 100}
    moved = {k(i): 100 - i for i in range(1, 6)}  # 99, 98, 97, 96, 95
    assert warm_keys(moved, held, free=1) == [k(1), k(2), k(3)]  # one free slot, then the two cold keys


def test_a_key_warmed_from_the_moved_set_keeps_its_heat_there() -> None:
    """An operator's fail warms the new owner before the routes move and again after: a key the first round
    cached has few hits of its own yet, and must not count as the coldest key for the second round to replace
    (the agent would evict another, settled, key for it: a hot one of the new owner's own)."""
    moved = {k(1): 80, k(2): int(30 * REPLACE_MARGIN), k(3): 30}
    held_after_first_round = {k(1): 0, k(10): 30}  # k(1) just warmed; k(10) the new owner's own
    # k(2) and k(3) are not REPLACE_MARGIN times hotter than k(10) (30), and k(1) is as hot as it was (80)
    assert warm_keys(moved, held_after_first_round, free=0) == []
    assert warm_keys({**moved, k(4): 1000}, held_after_first_round, free=0) == [k(4)]  # it beats k(10)


def test_a_paced_insert_idles_as_long_again_and_says_what_the_insert_said() -> None:
    """An operator's drain warms at half duty: each insert is followed by as long doing nothing."""
    calls: list[bytes] = []

    def insert(key: bytes) -> bool:
        calls.append(key)
        time.sleep(0.05)
        return key == k(1)

    t = time.monotonic()
    assert paced(insert, k(1), idle=1.0) is True
    assert time.monotonic() - t >= 0.1
    assert paced(insert, k(2), idle=0.0) is False
    assert calls == [k(1), k(2)]
