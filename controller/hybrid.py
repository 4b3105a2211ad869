"""Which keys Hybrid replicates in every spine: the few too hot for their two DistCache copies.

Why: DistCache gives each hot key two copies (its spine partition's and its
rack leaf's) and splits its reads between them, so a key read faster than two
switches can absorb overloads both whatever the routing does.  Replicating
only such keys in every spine (reads spread over all of them) removes that
ceiling while every other key keeps DistCache's cheap coherence (one path per
write instead of one per spine).  This is the simulator's fifth mechanism
(simulator/model.py); here the controller measures the rates instead of
knowing them: every cached key's hits, summed over the switches holding it,
over the agents' last two hit windows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from distcache import p4names
from distcache.cluster import Cluster
from distcache.replacement import HIT_WINDOWS
from distcache.rpc.protos import agent_pb2


def threshold(cluster: Cluster) -> float:
    """Reads per second above which a key is replicated (0: Hybrid replicates nothing)."""
    return cluster.hybrid_rate or cluster.switch_rate / 2


def key_rates(statuses: Iterable[agent_pb2.AgentStatus], hit_window: float = 1.0) -> dict[bytes, float]:
    """Reads per second served from cache, per key, summed over every switch that holds it."""
    rates: dict[bytes, float] = defaultdict(float)
    for st in statuses:
        for k in st.keys:
            rates[bytes(k.key)] += k.hits / (HIT_WINDOWS * hit_window)
    return dict(rates)


def choose(rates: Mapping[bytes, float], current: Iterable[bytes], rate: float, limit: int) -> set[bytes]:
    """The keys to replicate: those above ``rate``, plus those already replicated still above half of it.

    The hysteresis keeps a key near the threshold from flapping (each change costs cache fills
    and table writes on every spine).  At most ``limit`` keys, the hottest first.
    """
    if rate <= 0:
        return set()
    cur = set(current)
    keep = [k for k, r in rates.items() if r > rate or (k in cur and r > rate / 2)]
    keep.sort(key=lambda k: -rates[k])
    return set(keep[:limit])


def limit(cluster: Cluster) -> int:
    """How many keys may be replicated: every spine must hold them all besides its own partition's keys."""
    return min(p4names.MAX_REPLICATED_KEYS, cluster.cache_slots // 2)
