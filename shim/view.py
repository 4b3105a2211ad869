"""What a shim knows of the caches: which switches may hold a valid copy of which key, and the
controller's partition and down-set (kept in the shim's state file across restarts).

**Which copies a write invalidates.**  Invariant: every switch in service
that may hold a valid copy of key k is in ``cached[k]`` or not in ``known``
(the switches whose cached keys this shim knows).  An agent's populate adds
its switch to ``cached[k]`` before any copy can become valid; only the agent's
evict, after the entry is gone from the switch, removes it.  A shim that
starts knows nothing (``known`` is empty: switches may hold copies a previous
life of this shim validated, whether or not its state file survived), except
on the deployment's very first start (``fresh``: the switches were just
started empty); the controller's view adds the switches whose agents it
heard from.  A write of k invalidates every such switch not declared down:
one path per spine (each passes the storage leaf) and, if the leaf may hold
a copy and no spine path is taken or acknowledged, a path that ends at the
leaf.  A spine declared down while its path is pending does not count as an
acknowledgement for the leaf before it.  So routing, partition and mechanism
changes, restarts and failovers never leave a stale copy where a read can
reach it: the controller keeps reads away from a spine declared down and
flushes it before it comes back.
"""

from __future__ import annotations

import json
import os
import secrets
from collections import defaultdict
from pathlib import Path

from distcache.cluster import Cluster, Host, Role
from distcache.hashing import N_SPINE_BUCKETS
from distcache.partition import spine_buckets
from distcache.placement import possible_holders


class StaleViewError(ValueError):
    """A cached-key view collected for another incarnation of this shim."""


class CacheView:
    """The module's invariant, kept for one storage server's keys."""

    def __init__(self, cluster: Cluster, server: Host, fresh: bool = False) -> None:
        self.server = server
        self.buckets: list[int] = spine_buckets(cluster.switch_ids(Role.SPINE))
        self.down: set[int] = set()  # switches the controller declared down: no acks awaited from them
        # whether ``down`` is the controller's (from it or our state file): until then no spine is populated,
        # as it may be one the controller declared down, whose copies writes would then skip
        self.down_known = fresh
        self.epoch = 0  # the controller's partition epoch this view came with
        self.leaf_id = cluster.storage_leaf(server.rack).switch_id  # on every coherence path of this server
        self.spine_ids = frozenset(cluster.switch_ids(Role.SPINE))
        # the switches that may cache our keys under any mechanism (it changes while we serve)
        self.cache_switches = possible_holders(cluster, server)
        # switches whose cached keys we know (every other one counts as caching every key)
        self.known: set[int] = set(self.cache_switches) if fresh else set()
        self.incarnation = secrets.randbits(63)  # a view collected before we started is refused (add_view)
        self.cached: dict[bytes, set[int]] = defaultdict(set)  # key -> switch ids caching it

    @property
    def view_known(self) -> bool:
        """Whether we know the cached keys of every cache switch in service."""
        return self.cache_switches <= self.known | self.down

    @property
    def unknown_switches(self) -> list[int]:
        """The cache switches in service whose cached keys we do not know."""
        return sorted(self.cache_switches - self.known - self.down)

    def holders(self, key: bytes) -> set[int]:
        """The switches in service that may hold a valid copy of ``key`` (the module's invariant)."""
        return (self.cached.get(key, set()) | (self.cache_switches - self.known)) - self.down

    def paths(self, key: bytes) -> list[int]:
        """Far ends of the paths a write's phase 1 takes: every spine in service that may hold a copy;
        or, if there is none and the storage leaf may hold one, the leaf itself (it reflects the message)."""
        ends = sorted(self.holders(key) & self.spine_ids)
        return ends or ([self.leaf_id] if self.leaf_id in self.holders(key) else [])

    def evict(self, key: bytes, switch: int) -> bool:
        switches = self.cached.get(key)
        if not switches or switch not in switches:
            return False
        switches.discard(switch)
        if not switches:
            del self.cached[key]
        return True

    def set_partition(self, buckets: list[int], down: list[int] | None = None, epoch: int | None = None) -> None:
        """Adopt the controller's partition (and the switches it declared down), after checking it."""
        if (
            not isinstance(buckets, list)
            or len(buckets) != N_SPINE_BUCKETS
            or not all(isinstance(b, int) and 0 <= b < 256 for b in buckets)
        ):
            raise ValueError(f"partition must list {N_SPINE_BUCKETS} spine ids (0..255)")
        if down is not None and not (isinstance(down, list) and all(isinstance(d, int) and 0 < d < 256 for d in down)):
            raise ValueError("'down' must list switch ids (1..255)")
        self.buckets = list(buckets)
        if down is not None:
            self.down = set(down)
            self.down_known = True
        if epoch is not None:
            self.epoch = int(epoch)

    def add_view(
        self, cached: dict[bytes, list[int]], complete: list[int] | None = None, incarnation: int | None = None
    ) -> None:
        """Merge the controller's view of which switches cache which keys; ``complete``: the switches
        whose every cached key the view lists (their agents answered), which become known.

        A union, never a replacement: an insertion the view missed (it raced with the
        controller's collection) must keep its switch here, and one evicted meanwhile only
        costs an extra invalidation.  ``incarnation`` must be ours (from Stats): a view collected
        before this shim started could miss a copy a previous life validated after the collection.
        """
        complete = list(complete or [])
        if incarnation is not None and incarnation != self.incarnation:
            raise StaleViewError(
                f"view collected for shim incarnation {incarnation}, this is {self.incarnation}; "
                "read Stats again and resend"
            )
        if not all(s in self.cache_switches for s in complete):
            raise ValueError(
                f"complete: switches that cache keys of {self.server.name} are "
                f"{sorted(self.cache_switches)}, got {sorted(complete)}"
            )
        for key, switches in cached.items():
            self.cached[key].update(switches)
        self.known.update(complete)

    def save(self, state_file: Path) -> None:
        """Write the partition, down-set and epoch to ``state_file`` durably (fsync'd, then renamed over it)."""
        tmp = state_file.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({"buckets": self.buckets, "down": sorted(self.down), "epoch": self.epoch}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, state_file)
