"""A token bucket: the one rate limiter (agents' insertion budget, storage servers' request rate)."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a token bucket needs rate > 0 and burst >= 1")
        self.rate, self.burst, self._clock = rate, burst, clock
        self._tokens, self._at = float(burst), clock()
        self.spent = 0.0  # tokens taken, reserved or charged since creation: the work admitted

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def take(self) -> bool:
        """Take a token if one is there now."""
        self._refill()
        if self._tokens >= 1:
            self._tokens -= 1
            self.spent += 1
            return True
        return False

    def reserve(self, max_wait: float) -> float | None:
        """Reserve the next token: seconds until it is there (0: now), or None (nothing reserved) if that
        is more than ``max_wait`` away.  Callers that wait their turn are served at ``rate`` in order."""
        self._refill()
        wait = max(0.0, (1 - self._tokens) / self.rate)
        if wait > max_wait:
            return None
        self._tokens -= 1  # may go negative: tokens owed to the callers already waiting
        self.spent += 1
        return wait

    def charge(self, tokens: float) -> None:
        """Spend ``tokens`` for work done without asking (it may leave a debt later callers wait out)."""
        self._refill()
        self._tokens -= tokens
        self.spent += tokens
