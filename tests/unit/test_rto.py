"""The client's retransmission timeout (client_lib/rto.py): RFC 6298 arithmetic, Karn's rule, back-off, and
the bounds of one request's copies (issue 16, item 3).  Pure arithmetic: no sockets, no clock."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client_lib.rto import Rto, Schedule

rtts = st.floats(min_value=0.0, max_value=2.0, allow_nan=False)


def test_rfc6298_first_and_second_sample() -> None:
    """Worked by hand from RFC 6298 2.2-2.3: R=0.1 then R'=0.2 (floor and G out of the way)."""
    r = Rto(initial=1.0, floor=1e-6, cap=10.0, granularity=0.0)
    assert r.base == r.current == 1.0  # no sample yet: the initial RTO
    r.sample(0.1)
    assert (r.srtt, r.rttvar) == pytest.approx((0.1, 0.05))
    assert r.base == pytest.approx(0.1 + 4 * 0.05)
    r.sample(0.2)
    assert r.rttvar == pytest.approx(0.75 * 0.05 + 0.25 * 0.1)  # uses SRTT before this sample's update
    assert r.srtt == pytest.approx(0.875 * 0.1 + 0.125 * 0.2)
    assert r.base == pytest.approx(0.1125 + 4 * 0.0625)


def test_granularity_floor_and_cap() -> None:
    r = Rto(initial=0.5, floor=0.005, cap=0.5, granularity=0.001)
    r.sample(0.0001)
    assert r.base == 0.005  # 0.0001 + max(G, 0.0002) is under the floor
    for _ in range(200):
        r.sample(0.004)  # RTTVAR decays towards 0: G takes over from 4 * RTTVAR
    assert r.base == pytest.approx(0.005, abs=1e-4)
    r.sample(30.0)
    assert r.base == 0.5  # capped


@settings(max_examples=200, deadline=None)
@given(st.lists(rtts, min_size=1, max_size=50), st.floats(1e-4, 0.1), st.floats(0.1, 5.0))
def test_rto_stays_within_floor_and_cap(samples: list[float], floor: float, cap: float) -> None:
    r = Rto(initial=cap, floor=floor, cap=cap)
    for s in samples:
        r.sample(s)
        assert floor <= r.base <= cap
        assert r.srtt is not None and min(samples) - 1e-12 <= r.srtt <= max(samples) + 1e-12
    for _ in range(40):
        r.timed_out(r.generation)
        assert r.base <= r.current <= cap


def test_backoff_doubles_once_per_generation_and_a_sample_resets_it() -> None:
    r = Rto(initial=0.5, floor=0.005, cap=0.5)
    r.sample(0.002)
    base = r.base
    gen = r.generation
    for _ in range(16):  # sixteen requests in flight on one dead path: one doubling, not sixteen
        r.timed_out(gen)
    assert r.current == pytest.approx(2 * base)
    r.timed_out(r.generation)  # a copy sent after that back-off times out too: doubles again
    assert r.current == pytest.approx(4 * base)
    for _ in range(20):
        r.timed_out(r.generation)
    assert r.current == 0.5 and r.backoff < 20  # stops at the cap
    r.sample(0.002)
    assert r.backoff == 0 and r.current == pytest.approx(r.base)


def test_karn_no_sample_from_a_request_sent_twice() -> None:
    r = Rto(initial=0.5, floor=0.005, cap=0.5)
    s = Schedule(r, retries=3)
    s.next_copy(0.0)
    s.timed_out()
    s.next_copy(0.5)
    s.replied(0.51)  # answers the first copy or the second: cannot tell
    assert r.samples == 0 and r.srtt is None
    s = Schedule(r, retries=3)
    s.next_copy(1.0)
    s.replied(1.003)
    assert r.samples == 1 and r.srtt == pytest.approx(0.003)


def test_cold_schedule_is_the_fixed_timeout() -> None:
    """No sample yet: retries + 1 copies, one every ``cap``, as before the RTO existed."""
    s = Schedule(Rto(initial=0.5, floor=0.005, cap=0.5), retries=3)
    now, sends = 10.0, []
    while (until := s.next_copy(now)) is not None:
        sends.append(now)
        s.timed_out()
        now = until
    assert sends == pytest.approx([10.0, 10.5, 11.0, 11.5])
    assert now == pytest.approx(12.0) == pytest.approx(s.deadline)


def test_no_retries_is_one_copy_waiting_the_cap() -> None:
    r = Rto(initial=0.5, floor=0.005, cap=0.5)
    r.sample(0.001)
    s = Schedule(r, retries=0)
    assert s.next_copy(0.0) == 0.5
    s.timed_out()
    assert s.next_copy(0.5) is None and s.sent == 1


@settings(max_examples=300, deadline=None)
@given(st.floats(1e-3, 0.05), st.floats(0.05, 2.0), st.integers(0, 8), st.lists(rtts, max_size=5), st.integers(0, 6))
def test_schedule_bounds(floor: float, cap: float, retries: int, samples: list[float], backoffs: int) -> None:
    """Every timeout in a row: waits double (up to the cap), the request gives up (retries + 1) * cap after
    its first copy, and sends at most retries + 1 + ceil(log2(cap / floor)) copies."""
    r = Rto(initial=cap, floor=floor, cap=cap)
    for x in samples:
        r.sample(x)
    for _ in range(backoffs):
        r.timed_out(r.generation)
    s = Schedule(r, retries)
    now, waits = 0.0, []
    while (until := s.next_copy(now)) is not None:
        waits.append(s.wait)
        s.timed_out()
        assert until <= s.deadline
        now = until
    assert now == pytest.approx((retries + 1) * cap)
    assert len(waits) <= (1 if retries == 0 else retries + 1 + math.ceil(math.log2(cap / floor)))
    assert all(floor <= w <= cap for w in waits)
    assert all(b >= min(cap, 2 * a) - 1e-12 for a, b in itertools.pairwise(waits))


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="floor"):
        Rto(initial=0.5, floor=0.0, cap=0.5)
    with pytest.raises(ValueError, match="floor"):
        Rto(initial=0.5, floor=1.0, cap=0.5)
    with pytest.raises(ValueError, match="initial"):
        Rto(initial=2.0, floor=0.005, cap=0.5)
