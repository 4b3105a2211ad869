"""Which switches cache a key and where its reads go, per mechanism: the one table every part reads.

The paper compares its mechanisms by what they do with the upper layer, the spines (§6.1): CachePartition splits
the hot keys between them, CacheReplication puts every hot key in every spine, DistCache puts each key in one spine
and lets the client choose between it and the lower layer; NoCache caches "in both layers" nothing. The lower layer,
each storage rack's leaf caching its own rack's hot keys for balance inside the rack (§3.1), is the same under every
caching mechanism; what differs is whether a client-rack leaf may send a read to it directly (DistCache's second
choice) or only meets it on the way to the server (a read the spine missed goes on through the key's rack leaf,
which answers it from its cache). So the storage-rack layer caches under Partition and Replication too: the agent,
the planner, the controller, the shims and the operator's view all say so by reading :data:`PLACEMENT`.

Hybrid is DistCache plus the keys the controller found too hot for two copies, which are placed as under
Replication (every live spine, reads spread over them): :func:`placement` gives a key's row.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum

from distcache.cluster import Cluster, Host, Mechanism, Role, Switch
from distcache.hashing import h0


class Spines(Enum):
    """Which spines cache a hot key (and take its reads: :func:`read_targets`)."""

    NONE = "none"
    OWNER = "owner"  # the spine the partition gives the key's h0 bucket
    EVERY = "every"  # every spine in service


@dataclass(frozen=True)
class Placement:
    """One mechanism's rule (or, under Hybrid, one kind of key's)."""

    spines: Spines  # which spines cache the key
    leaf: bool  # whether the key's storage-rack leaf caches it
    leaf_read_target: bool  # whether a client-rack leaf may send a read straight to that leaf (the second choice)
    warms_on_failover: bool  # whether a spine's buckets moving warms their new owners with the buckets' hot keys


#: the mechanisms' rules.  A failover under Replication warms nothing: every spine in service already holds every
#: hot key, and no bucket decides where one is cached.
PLACEMENT: dict[Mechanism, Placement] = {
    Mechanism.NOCACHE: Placement(Spines.NONE, leaf=False, leaf_read_target=False, warms_on_failover=False),
    Mechanism.PARTITION: Placement(Spines.OWNER, leaf=True, leaf_read_target=False, warms_on_failover=True),
    Mechanism.REPLICATION: Placement(Spines.EVERY, leaf=True, leaf_read_target=False, warms_on_failover=False),
    Mechanism.DISTCACHE: Placement(Spines.OWNER, leaf=True, leaf_read_target=True, warms_on_failover=True),
    Mechanism.HYBRID: Placement(Spines.OWNER, leaf=True, leaf_read_target=True, warms_on_failover=True),
}

#: Hybrid's replicated keys: in every spine in service, reads spread over them, the rack leaf behind them
HYBRID_REPLICATED = Placement(Spines.EVERY, leaf=True, leaf_read_target=False, warms_on_failover=True)


def placement(mechanism: Mechanism, wkey: bytes | None = None, replicated: Collection[bytes] = ()) -> Placement:
    """The rule for ``wkey`` under ``mechanism`` (Hybrid's ``replicated`` keys have their own)."""
    if mechanism == Mechanism.HYBRID and wkey is not None and wkey in replicated:
        return HYBRID_REPLICATED
    return PLACEMENT[mechanism]


def spine_holds(
    mechanism: Mechanism, spine_id: int, buckets: list[int], wkey: bytes, replicated: Collection[bytes] = ()
) -> bool:
    """Whether spine ``spine_id`` should cache ``wkey`` under the partition ``buckets`` (owner per h0 bucket, 0 for
    none; empty before the controller gave one).  Whether the spine is in service is the caller's to know."""
    rule = placement(mechanism, wkey, replicated).spines
    if rule != Spines.OWNER:
        return rule == Spines.EVERY
    b = h0(wkey)
    return b < len(buckets) and buckets[b] == spine_id


def cache_switches(
    cluster: Cluster, buckets: list[int], wkey: bytes, replicated: Collection[bytes] = ()
) -> list[Switch]:
    """The switches that cache ``wkey`` once it is hot: spines in service (in the partition ``buckets``) first, in
    id order, then its rack's leaf."""
    rule = placement(cluster.mechanism, wkey, replicated)
    live = sorted(set(buckets) - {0})
    spines = [sid for sid in live if spine_holds(cluster.mechanism, sid, buckets, wkey, replicated)]
    leaf = [cluster.storage_leaf(cluster.server_for_key(wkey).rack)] if rule.leaf else []
    return [*(cluster.switch_by_id(s) for s in spines), *leaf]


def read_targets(cluster: Cluster, buckets: list[int], wkey: bytes, replicated: Collection[bytes] = ()) -> list[Switch]:
    """The caches a client-rack leaf may send a read of ``wkey`` to (none: straight to the storage server)."""
    rule = placement(cluster.mechanism, wkey, replicated)
    held = cache_switches(cluster, buckets, wkey, replicated)
    return [sw for sw in held if sw.role == Role.SPINE or rule.leaf_read_target]


def possible_holders(cluster: Cluster, server: Host) -> frozenset[int]:
    """Every switch that may cache a key of ``server`` under some mechanism: the mechanism changes while the
    cluster serves, so a shim's coherence counts all of them (its spines if any rule caches in spines, its rack's
    leaf if any rule caches there)."""
    spines = any(p.spines != Spines.NONE for p in (*PLACEMENT.values(), HYBRID_REPLICATED))
    leaf = any(p.leaf for p in (*PLACEMENT.values(), HYBRID_REPLICATED))
    ids = set(cluster.switch_ids(Role.SPINE)) if spines else set()
    return frozenset(ids | ({cluster.storage_leaf(server.rack).switch_id} if leaf else set()))


def detector_designates(mechanism: Mechanism, role: Role, bucket_owner: int, switch_id: int) -> bool:
    """Whether a cache switch's hot-key detector watches the keys of one h0 bucket (a spine: per bucket; a storage
    leaf watches its rack's keys whenever it caches)."""
    p = PLACEMENT[mechanism]
    if role == Role.STORAGE_LEAF:
        return p.leaf
    return (p.spines == Spines.EVERY and bucket_owner != 0) or (p.spines == Spines.OWNER and bucket_owner == switch_id)
