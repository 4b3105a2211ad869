"""How long a client waits for a reply before it sends its request again: TCP's retransmission timeout.

A fixed timeout has to cover the slowest reply a healthy system gives, so a request whose copy was lost
on a dead path waits all of it before its retry (by default half a second: the whole fabric stalls for
that long when a spine dies).  A retransmission timeout learned from the round-trip times the client
actually sees is a few milliseconds in a healthy fabric, and grows by itself when replies slow down.
This is RFC 6298, per destination (storage server address), with the client's numbers:

* the first sample R sets SRTT = R and RTTVAR = R/2; each later one R' sets
  RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R'| and then SRTT = 7/8 SRTT + 1/8 R';
* RTO = SRTT + max(G, 4 RTTVAR), kept within [floor, cap]; before any sample it is ``initial``;
* Karn's rule: a reply to a request that was sent more than once gives no sample (it cannot be told which
  copy it answers), so retransmissions cannot shrink the RTO on a path that loses packets;
* back-off: a timeout doubles the destination's RTO (up to the cap) until the next sample; timeouts of
  requests sent before the last change count once, so many requests in flight on one dead path double it
  once, not once each.  Each request also doubles its own wait from one copy to the next (``wait``).

The pure arithmetic lives here, shared by ``Client`` and ``AsyncClient``; :class:`Schedule` adds when a
request gives up: never later than ``(retries + 1) * cap`` after its first copy, as with the fixed timeout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALPHA = 1 / 8  # SRTT gain (RFC 6298 2.3)
BETA = 1 / 4  # RTTVAR gain
K = 4  # RTTVAR multiplier
#: seconds.  Above the scheduling jitter of an emulated fabric on a loaded host, where a round trip of a few
#: ms now and then takes 15-25 ms (make run's read p99): at 5 ms, 7 % of requests were sent twice for
#: nothing (94,595 copies for 87,668 requests, 6,740 late replies), each copy a read of the other cache or
#: the server; at 20 ms, 0.4 % (108,468 for 107,993), and a read through a spine that crashed still went
#: around it within the crash second's p99 of 34 ms
DEFAULT_FLOOR = 0.02
DEFAULT_GRANULARITY = 0.001  # G: the event loop's and the kernel's timer granularity, roughly


@dataclass
class Rto:
    """The retransmission timeout of one destination (RFC 6298), in seconds."""

    initial: float
    floor: float = DEFAULT_FLOOR
    cap: float = math.inf
    granularity: float = DEFAULT_GRANULARITY
    srtt: float | None = None
    rttvar: float = 0.0
    backoff: int = 0  # doublings since the last sample (RFC 6298 5.5)
    generation: int = 0  # changes with every sample and back-off: which timeouts still count
    samples: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.floor <= self.cap:
            raise ValueError(f"RTO floor {self.floor}s and cap {self.cap}s: need 0 < floor <= cap")
        if not self.floor <= self.initial <= self.cap:
            raise ValueError(f"initial RTO {self.initial}s outside [{self.floor}s, {self.cap}s]")
        if self.granularity < 0:
            raise ValueError(f"clock granularity {self.granularity}s: expected >= 0")

    @property
    def base(self) -> float:
        """SRTT + max(G, 4 RTTVAR) within [floor, cap]; ``initial`` before the first sample."""
        if self.srtt is None:
            return self.initial
        return min(self.cap, max(self.floor, self.srtt + max(self.granularity, K * self.rttvar)))

    @property
    def current(self) -> float:
        """The RTO a request sent now starts with: ``base`` doubled per back-off, at most ``cap``."""
        return min(self.cap, self.base * 2.0**self.backoff)

    def sample(self, rtt: float) -> None:
        """A round-trip time measured on a request sent once (Karn's rule is the caller's: it knows)."""
        rtt = max(0.0, rtt)
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = (1 - BETA) * self.rttvar + BETA * abs(self.srtt - rtt)
            self.srtt = (1 - ALPHA) * self.srtt + ALPHA * rtt
        self.backoff = 0
        self.generation += 1
        self.samples += 1

    def timed_out(self, generation: int) -> None:
        """A copy sent while ``generation`` was current got no reply in time: back off, once per generation."""
        if generation != self.generation:
            return  # a sample or another timeout since it was sent already said what it says
        if self.base * 2.0**self.backoff < self.cap:
            self.backoff += 1
        self.generation += 1


@dataclass
class Schedule:
    """One request's copies: how long each waits, and when the request gives up.

    Copy ``k`` waits ``min(cap, max(rto.current, 2 * previous wait))``, and copies are sent while time
    is left: the request gives up ``(retries + 1) * cap`` after its first copy, the fixed timeout's
    bound, having sent at most ``retries + 1`` copies at the cap's spacing plus the
    ``ceil(log2(cap / floor))`` shorter ones before them.  So copies keep coming, ever more slowly,
    for as long as a fixed timeout would have waited: a path that heals a few hundred milliseconds
    into a failure still carries a late copy.  ``retries=0`` sends one copy, which waits ``cap``
    (a caller that wants no retransmission gets none).  Before its destination has a sample the
    RTO is the cap, so a client's first requests behave exactly as with a fixed timeout.
    """

    rto: Rto
    retries: int
    start: float = 0.0  # when the first copy was sent
    deadline: float = math.inf
    wait: float = 0.0  # the current copy's wait
    sent: int = 0  # copies sent so far; the next copy's attempt number
    generation: int = 0

    def next_copy(self, now: float) -> float | None:
        """Record a copy sent at ``now`` and return until when to wait for it; None: give up (not sent)."""
        if self.sent == 0:
            self.start, self.deadline = now, now + (self.retries + 1) * self.rto.cap
        elif now >= self.deadline - 1e-6 or self.retries == 0:  # (a microsecond: sums of waits round)
            return None
        if self.retries == 0:
            self.wait = self.rto.cap
        elif self.sent == 0:
            self.wait = self.rto.current
        else:
            self.wait = min(self.rto.cap, max(self.rto.current, 2 * self.wait))
        self.generation = self.rto.generation
        self.sent += 1
        return min(now + self.wait, self.deadline)

    def timed_out(self) -> None:
        """The current copy's wait ended without a reply."""
        self.rto.timed_out(self.generation)

    def replied(self, now: float) -> None:
        """A reply came at ``now``: a sample of the round trip only if one copy was sent (Karn's rule)."""
        if self.sent == 1:
            self.rto.sample(now - self.start)
