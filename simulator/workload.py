"""Zipf workloads over up to 10^8 keys without 10^8-element arrays.

The ``head`` most popular keys get exact probabilities; the remaining keys
(the tail) are only ever needed as a total mass and, for sampling, as a rank
drawn from the continuous approximation of the Zipf law.  Generalized harmonic
numbers use Euler–Maclaurin beyond the head, accurate to ~1e-9 relative.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

DEFAULT_HEAD = 1 << 17


def _power_integral(a: float, b: float, alpha: float) -> float:
    """∫_a^b x^-alpha dx."""
    if abs(alpha - 1.0) < 1e-12:
        return float(np.log(b / a))
    return (b ** (1 - alpha) - a ** (1 - alpha)) / (1 - alpha)


def harmonic(n: int, alpha: float, start: int = 1) -> float:
    """Σ_{i=start}^{n} i^-alpha, exact for short ranges, Euler–Maclaurin otherwise."""
    if n < start:
        return 0.0
    if n - start < 200_000:
        i = np.arange(start, n + 1, dtype=np.float64)
        return float(np.sum(i**-alpha))
    if start < 1000:  # Euler–Maclaurin needs smooth terms: sum the first ones exactly
        return harmonic(999, alpha, start) + harmonic(n, alpha, 1000)
    a, b = float(start), float(n)
    f = lambda x: x**-alpha  # noqa: E731
    d1 = lambda x: -alpha * x ** (-alpha - 1)  # noqa: E731
    d3 = lambda x: -alpha * (alpha + 1) * (alpha + 2) * x ** (-alpha - 3)  # noqa: E731
    return _power_integral(a, b, alpha) + (f(a) + f(b)) / 2 + (d1(b) - d1(a)) / 12 - (d3(b) - d3(a)) / 720


@dataclass
class Zipf:
    """Query popularity: key of rank i (0-based) has probability ∝ (i+1)^-alpha."""

    n_keys: int
    alpha: float
    head: int = DEFAULT_HEAD
    p: np.ndarray = field(init=False, repr=False)  # probabilities of the head keys, most popular first
    tail_mass: float = field(init=False)

    def __post_init__(self) -> None:
        if self.n_keys < 1 or self.alpha < 0:
            raise ValueError("need n_keys >= 1 and alpha >= 0")
        self.head = min(self.head, self.n_keys)
        ranks = np.arange(1, self.head + 1, dtype=np.float64)
        w = ranks**-self.alpha
        head_sum = float(w.sum())
        tail_sum = harmonic(self.n_keys, self.alpha, start=self.head + 1)
        total = head_sum + tail_sum
        self.p = w / total
        self.tail_mass = tail_sum / total

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` query ranks (0-based, int64) drawn from the full distribution over all keys."""
        u = rng.random(n)
        out = np.empty(n, dtype=np.int64)
        in_head = u < 1.0 - self.tail_mass
        cdf = np.cumsum(self.p)
        out[in_head] = np.minimum(np.searchsorted(cdf, u[in_head], side="right"), self.head - 1)
        m = int((~in_head).sum())
        if m:
            # continuous inverse CDF of x^-alpha on [head+1, n_keys+1)
            v = rng.random(m)
            a, b, al = self.head + 1.0, self.n_keys + 1.0, self.alpha
            if abs(al - 1.0) < 1e-12:
                x = a * (b / a) ** v
            else:
                x = (a ** (1 - al) + v * (b ** (1 - al) - a ** (1 - al))) ** (1 / (1 - al))
            out[~in_head] = np.minimum(np.floor(x).astype(np.int64) - 1, self.n_keys - 1)
        return out
