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


class CacheAgent:
    def __init__(self, conn: SwitchConnection, switch: Switch, cluster: Cluster,
                 shim_for: Callable[[bytes], ShimLink], slots: int = n.CACHE_SLOTS) -> None:
        self.conn, self.switch, self.cluster, self.shim_for = conn, switch, cluster, shim_for
        self.slots = min(slots, n.CACHE_SLOTS)
        self._free = list(range(self.slots - 1, -1, -1))
        self._next_version = 1
        self.cached: dict[bytes, CachedKey] = {}

    def _version(self) -> int:
        v = self._next_version
        self._next_version = v % 0xFFFF + 1  # 1..65535: 0 means invalid
        return v

    def insert(self, wkey: bytes) -> CachedKey:
        """Cache ``wkey`` here and have its server fill the value in."""
        if wkey in self.cached:
            return self.cached[wkey]
        if not self._free:
            raise CacheFull(f"{self.switch.name}: all {self.slots} cache slots are in use; evict a key first")
        slot, version = self._free.pop(), self._version()
        try:
            self.conn.insert(n.CACHE_LOOKUP, {n.KEY_DC_KEY: int.from_bytes(wkey, "big")}, n.CACHE_HIT,
                             {"slot": slot, "version": version})
        except P4RuntimeError:
            self._free.append(slot)
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
        self._free.append(entry.slot)
        self.shim_for(wkey).call("evict", key=wkey.hex(), switch=self.switch.switch_id)
        return True

    def hits(self) -> dict[bytes, int]:
        """Per-key hit counts from the per-slot P4 counter."""
        cells = self.conn.read_counter(n.CACHE_HITS)
        return {k: cells.get(e.slot, (0, 0))[0] for k, e in self.cached.items()}
