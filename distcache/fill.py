"""What a cache entry's fill came to: the answer of a shim's Populate (``shim.proto``, ``PopulateReply.state``),
kept by the agent as the entry's state.  A str enum: the values are the strings on the wire and in status."""

from __future__ import annotations

from enum import StrEnum


class Fill(StrEnum):
    VALID = "valid"  # armed with the current value: the switch answers reads of it
    ABSENT = "absent"  # the key has no value: the entry stays invalid
    TOO_LARGE = "too_large"  # the value does not fit a switch slot: the entry stays invalid
    EXPIRES = "expires"  # the key has a time to live: never cached (Redis expires lazily), the entry stays invalid
    FAILED = "failed"  # a phase was not acknowledged (or the shim unreachable): retried
    DOWN = "down"  # the shim holds the switch down (or does not know yet): retried once it is up
    PENDING = "pending"  # the agent asked and waits for the answer
    UNKNOWN = "unknown"  # read back from the switch after an agent restart: what it holds is not known
    UNCACHED = "uncached"  # a shim's refresh found no switch that may hold a copy: nothing to fill
    WRONG_TYPE = "wrong_type"  # the key holds another type than a string (a hash, a list...): never cached
    NO_KEY = "no_key"  # the shim knows the digest but not its key (no request for it yet): retried

    @classmethod
    def of(cls, text: str) -> Fill:
        """A Populate's answer, or FAILED for one this agent does not know (a newer shim's)."""
        try:
            return cls(text)
        except ValueError:
            return cls.FAILED


#: the outcomes an agent retries (the switch or the shim may take the populate later)
RETRIED = frozenset({Fill.FAILED, Fill.DOWN, Fill.NO_KEY})
