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

from distcache.hashing import N_SPINE_BUCKETS

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
