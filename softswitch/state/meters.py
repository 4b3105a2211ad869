"""Meters of softswitch's state: two-rate three-colour meters, run as BMv2 runs them.

The pipeline colours packets with :meth:`MeterArray.execute`; the P4Runtime server configures and
reads cells through :class:`softswitch.target.MeterTarget`.
"""

from __future__ import annotations

from softswitch.target import MeterConfig

GREEN, YELLOW, RED = 0, 1, 2
"""Meter colours, as v1model's ``V1MODEL_METER_COLOR_*``."""


class _Bucket:
    """One token bucket of a meter cell, kept as BMv2 keeps it (bm_sim/meters.cpp).

    Tokens are not refilled by the interval since the last packet but from one time
    origin (the switch's start, ``now_us`` 0): ``int(now_us * rate_per_us)`` tokens have
    accrued by ``now_us``, and a packet adds those accrued since the previous one, so
    fractions of a token are never lost.  The bucket starts full when configured.
    """

    __slots__ = ("accrued", "burst", "color", "rate_per_us", "tokens")

    def __init__(self, rate_per_s: int, burst: int, color: int) -> None:
        self.rate_per_us = rate_per_s / 1e6  # BMv2's division, so the same float
        self.burst = burst
        self.tokens = burst
        self.accrued = 0
        self.color = color  # what a packet is coloured when this bucket lacks its tokens


class MeterArray:
    """An indirect P4 meter: ``size`` two-rate three-colour meters (RFC 2698, as BMv2 runs them).

    A cell is unconfigured at start, after :meth:`clear` and after ``configure(i, None)``;
    an unconfigured cell colours every packet GREEN.  A configured cell checks its peak
    bucket first (too few tokens: RED, and the committed bucket is not touched), then its
    committed bucket (too few: YELLOW, the peak tokens stay taken), else GREEN, both taken.
    A packet takes one token from a packets meter and its length from a bytes meter.
    """

    __slots__ = ("_buckets", "_configs", "name", "size", "unit")

    def __init__(self, name: str, size: int, unit: str = "packets") -> None:
        self.name = name
        self.size = size
        self.unit = unit
        self._configs: list[MeterConfig | None] = [None] * size
        self._buckets: list[tuple[_Bucket, _Bucket] | None] = [None] * size  # (peak, committed)

    def execute(self, index: int, now_us: int, nbytes: int = 0) -> int:
        """The colour of one packet of ``nbytes`` bytes at ``now_us`` (us since the switch started).

        An out-of-range index colours GREEN (BMv2 does not check the index).
        """
        if not 0 <= index < self.size:
            return GREEN
        buckets = self._buckets[index]
        if buckets is None:
            return GREEN
        need = 1 if self.unit == "packets" else nbytes
        for b in buckets:
            accrued = int(now_us * b.rate_per_us)
            if accrued > b.accrued:  # (a clock that went back only delays the next refill)
                b.tokens = min(b.tokens + accrued - b.accrued, b.burst)
                b.accrued = accrued
            if b.tokens < need:
                return b.color
            b.tokens -= need
        return GREEN

    def configure(self, index: int, config: MeterConfig | None) -> None:
        """Set a cell's rates (its buckets start full), or make it unconfigured (None).

        Out of range is ignored; rates must be validated by the caller (``cir <= pir``).
        """
        if not 0 <= index < self.size:
            return
        self._configs[index] = config
        self._buckets[index] = (
            None
            if config is None
            else (_Bucket(config.pir, config.pburst, RED), _Bucket(config.cir, config.cburst, YELLOW))
        )

    def config(self, index: int) -> MeterConfig | None:
        """A cell's configuration; None if unconfigured or out of range."""
        if 0 <= index < self.size:
            return self._configs[index]
        return None

    def clear(self) -> None:
        self._configs = [None] * self.size
        self._buckets = [None] * self.size
