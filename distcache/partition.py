"""Spine partitions: which spine caches the keys of each h0 bucket.

Buckets (``distcache.hashing.h0``) are placed on a consistent-hash ring with
virtual nodes (paper §4.4): each spine owns ``vnodes`` points, a bucket goes to
the first point clockwise whose spine is alive.  When a spine fails only its
buckets move, and they spread over all the others instead of landing on one
neighbour; when it recovers they move back.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Collection

from distcache.cluster import Cluster, Mechanism, Switch
from distcache.hashing import N_SPINE_BUCKETS, h0

DEFAULT_VNODES = 64


def _point(label: str) -> int:
    return int.from_bytes(hashlib.blake2b(label.encode(), digest_size=8, person=b"dc-ring").digest(), "big")


def spine_buckets(spine_ids: list[int], alive: set[int] | None = None, vnodes: int = DEFAULT_VNODES) -> list[int]:
    """Spine id owning each of the N_SPINE_BUCKETS buckets (0 = no spine alive)."""
    live = sorted(set(spine_ids) if alive is None else set(spine_ids) & alive)
    if not live:
        return [0] * N_SPINE_BUCKETS
    ring = sorted((_point(f"spine-{sid}-vnode-{v}"), sid) for sid in live for v in range(vnodes))
    points = [p for p, _ in ring]
    out = []
    for b in range(N_SPINE_BUCKETS):
        i = bisect.bisect(points, _point(f"bucket-{b}")) % len(ring)
        out.append(ring[i][1])
    return out


def cache_switches(
    cluster: Cluster, buckets: list[int], wkey: bytes, replicated: Collection[bytes] = ()
) -> list[Switch]:
    """Where a hot key is cached under the cluster's mechanism, the partition ``buckets`` and
    (Hybrid) the ``replicated`` keys."""
    mech = cluster.mechanism
    if mech == Mechanism.NOCACHE:
        return []
    if mech == Mechanism.REPLICATION or (mech == Mechanism.HYBRID and wkey in replicated):
        return [cluster.switch_by_id(s) for s in sorted(set(buckets) - {0})]  # every live spine
    spine_id = buckets[h0(wkey)]
    spine = [cluster.switch_by_id(spine_id)] if spine_id else []
    if mech == Mechanism.PARTITION:
        return spine
    return [*spine, cluster.storage_leaf(cluster.server_for_key(wkey).rack)]  # DistCache, Hybrid's others
