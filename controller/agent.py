"""The local agent of one cache switch: what is cached where, in which slot.

Insertion follows the paper (§4.3): the agent installs the key in the cache
table pointing at a free slot with a fresh *version* tag, which leaves the key
invalid (the slot's valid register holds another tag or 0); then it asks the
key's storage server to populate it, and the shim writes the value and the tag
with a coherence UPDATE packet, serialized with writes.  No register is ever
written by the control plane.  Eviction deletes the table entry and tells the
shim, so later writes to the key skip the coherence phases for this switch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from controller.p4rt import P4RuntimeError, SwitchConnection
from controller.shim_link import ShimLink
from distcache import p4names as n
from distcache.cluster import Cluster, Switch

log = logging.getLogger(__name__)


class CacheFull(RuntimeError):
    """No free slot: evict a key first."""


@dataclass
class CachedKey:
    slot: int
    version: int
    state: str  # what the shim answered: valid / absent / too_large / failed


class SlotAllocator:
    """Cache slots and the version tags their entries are installed with.

    A slot's valid register keeps the tag of the last entry that was filled
    in it after that entry is evicted (only packets write registers).  A new
    entry in the slot is valid only once its own tag is written there, so the
    tag it gets must differ from every tag the register may still hold: each
    slot counts its own tags (1..65535, 0 means invalid) and never gets its
    previous one back.  A single global counter would wrap and could hand a
    slot the very tag its register holds, making a new key hit with the old
    key's value.
    """

    MAX_VERSION = 0xFFFF

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._free = list(range(slots - 1, -1, -1))
        self._last_version = [0] * slots

    def __len__(self) -> int:
        """Free slots."""
        return len(self._free)

    def take(self) -> tuple[int, int]:
        """A free slot and a version tag it has not had just before; raises CacheFull."""
        if not self._free:
            raise CacheFull(f"all {self.slots} cache slots are in use; evict a key first")
        slot = self._free.pop()
        version = self._last_version[slot] % self.MAX_VERSION + 1
        self._last_version[slot] = version
        return slot, version

    def give_back(self, slot: int) -> None:
        self._free.append(slot)


class CacheAgent:
    def __init__(self, conn: SwitchConnection, switch: Switch, cluster: Cluster,
                 shim_for: Callable[[bytes], ShimLink], slots: int = n.CACHE_SLOTS) -> None:
        self.conn, self.switch, self.cluster, self.shim_for = conn, switch, cluster, shim_for
        self.slots = min(slots, n.CACHE_SLOTS)
        self._alloc = SlotAllocator(self.slots)
        self.cached: dict[bytes, CachedKey] = {}

    def insert(self, wkey: bytes) -> CachedKey:
        """Cache ``wkey`` here and have its server fill the value in."""
        if wkey in self.cached:
            return self.cached[wkey]
        try:
            slot, version = self._alloc.take()
        except CacheFull as e:
            raise CacheFull(f"{self.switch.name}: {e}") from None
        try:
            self.conn.insert(n.CACHE_LOOKUP, {n.KEY_DC_KEY: int.from_bytes(wkey, "big")}, n.CACHE_HIT,
                             {"slot": slot, "version": version})
        except P4RuntimeError:
            self._alloc.give_back(slot)
            raise
        entry = CachedKey(slot, version, "pending")
        self.cached[wkey] = entry
        reply = self.shim_for(wkey).call("populate", key=wkey.hex(), switch=self.switch.switch_id)
        entry.state = str(reply.get("state", "failed")) if reply.get("ok") else "failed"
        log.info("%s: cached %s in slot %d (v%d): %s", self.switch.name, wkey.hex(), slot, version, entry.state)
        return entry

    def evict(self, wkey: bytes) -> bool:
        entry = self.cached.pop(wkey, None)
        if entry is None:
            return False
        self.conn.delete(n.CACHE_LOOKUP, {n.KEY_DC_KEY: int.from_bytes(wkey, "big")})
        self._alloc.give_back(entry.slot)
        self.shim_for(wkey).call("evict", key=wkey.hex(), switch=self.switch.switch_id)
        return True

    def hits(self) -> dict[bytes, int]:
        """Per-key hit counts from the per-slot P4 counter."""
        cells = self.conn.read_counter(n.CACHE_HITS)
        return {k: cells.get(e.slot, (0, 0))[0] for k, e in self.cached.items()}
