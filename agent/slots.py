"""A cache switch's slots and the version tags handed out in them, and what the agent knows of each
cached key (see agent.agent for why tags never repeat)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from distcache.fill import Fill


class CacheFullError(RuntimeError):
    """No free slot: evict a key first."""


class VersionsExhaustedError(RuntimeError):
    """A slot has had every version of this cache epoch: raise the epoch."""


class SlotAllocator:
    """Cache slots and the versions their entries are installed with.

    An entry's tag is (cache epoch, version); the data plane arms an entry only
    for a populate carrying its tag, and a slot's valid register keeps the tag
    of the last entry filled in it after that entry is evicted (only packets
    write registers).  So within an epoch no two entries of this switch may
    share a version, in the same slot or not:

    * the same slot: a new key would hit at once with the previous key's value;
    * another slot: a delayed populate of an evicted entry of key k would arm
      k's next entry in another slot if it had the same version, and fill it
      with a value a write acknowledged since has replaced (the model's
      ``spec-populate-slot`` counterexample).

    Versions therefore count up per switch (1..65535) within a cache epoch and
    never wrap -- the last one raises :class:`VersionsExhaustedError`, and the
    agent starts a new epoch.  Each slot's last version is kept (state file,
    ``claim``) and the counter resumes above the highest of them.
    """

    MAX_VERSION = 0xFFFF

    def __init__(self, slots: int, last_versions: list[int] | None = None) -> None:
        self.slots = slots
        self._free = list(range(slots - 1, -1, -1))
        self._last_version = list(last_versions or [0] * slots)[:slots]
        self._last_version += [0] * (slots - len(self._last_version))
        self._top = max(self._last_version, default=0)

    def __len__(self) -> int:
        """Free slots."""
        return len(self._free)

    def take(self) -> tuple[int, int]:
        """A free slot and a version no entry of this switch had in this epoch; raises CacheFullError."""
        if not self._free:
            raise CacheFullError(f"all {self.slots} cache slots are in use; evict a key first")
        if self._top >= self.MAX_VERSION:
            raise VersionsExhaustedError(f"this switch has had all {self.MAX_VERSION} versions of this epoch")
        slot = self._free.pop()
        self._top += 1
        self._last_version[slot] = self._top
        return slot, self._top

    def claim(self, slot: int, version: int) -> None:
        """Mark ``slot`` used by an entry found on the switch (agent restart)."""
        if slot in self._free:
            self._free.remove(slot)
        self._last_version[slot] = version
        self._top = max(self._top, version)

    def give_back(self, slot: int) -> None:
        self._free.append(slot)

    def versions(self) -> list[int]:
        return list(self._last_version)

    def new_epoch(self) -> None:
        """Every version may be used again (the entries' tags changed with the epoch)."""
        self._last_version = [0] * self.slots
        self._top = 0


@dataclass
class CachedKey:
    slot: int
    version: int
    state: Fill  # what the shim answered (pending until it does; unknown after an agent restart)
    auto: bool = False
    hits: list[int] = field(default_factory=lambda: [0, 0])  # hits in the last two windows
    inserted_at: float = field(default_factory=time.monotonic)
    name: bytes = b""  # the key itself, when the inserter knew it: every populate of the entry passes it on

    @property
    def recent_hits(self) -> int:
        return sum(self.hits)


@dataclass
class AgentCounters:
    digests: int = 0
    auto_inserted: int = 0
    evicted: int = 0
    rate_limited: int = 0
    switch_restarts: int = 0
    not_hotter: int = 0
    partition_evicted: int = 0
    not_owned: int = 0
    epoch_raises: int = 0
    fills_retried: int = 0


def next_epoch(on_switch: int, ours: int | None) -> int:
    """A cache epoch above every one the switch has had (the model's "epoch clock").

    Above the switch's (``on_switch``) and our state's (``ours``), and at least the wall clock's seconds: that is
    what vouches for the epochs of the switch's earlier lives when neither survived (a restarted switch is back at
    0, an agent may lose its state file).  The agent puts an epoch to use only once the clock has passed it
    (``SwitchAgent._raise_epoch``), so any epoch chosen later is above it.
    """
    return max(on_switch + 1, (ours or 0) + 1, int(time.time()))
