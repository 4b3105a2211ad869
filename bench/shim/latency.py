"""Sequential latency from one client: GET (the round-trip floor), PUT of an uncached key, PUT of a key a
switch caches (two-phase coherence with the peer; the shim's invalidation count proves it ran)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.shim.bed import Env
from bench.shim.config import HOST, REPLY_TIMEOUT, VALUE
from client_lib import Client
from distcache.cluster import Cluster
from distcache.wire import DC_PORT


def percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


@dataclass
class Latency:
    p50_us: float
    p99_us: float
    ops: int


def sequential(call: Callable[[], object], ops: int) -> Latency:
    for _ in range(20):  # warm-up: first requests pay for connections and code paths never run before
        call()
    lat = []
    for _ in range(ops):
        t0 = time.perf_counter()
        call()
        lat.append(time.perf_counter() - t0)
    lat.sort()
    return Latency(1e6 * percentile(lat, 0.5), 1e6 * percentile(lat, 0.99), ops)


def write_latency(env: Env, ops: int) -> tuple[dict[str, Latency], dict]:
    """PUT latency of an uncached key vs a key cached by switch 1 (two-phase coherence), one client, sequential.

    GET latency is measured too, as the round-trip floor both PUT figures sit on.
    """
    from distcache.rpc.shim import ShimLink  # gRPC: imported here, after every process is spawned

    cluster = Cluster()
    spine = cluster.spine(0).switch_id
    link = ShimLink(env.control)
    out: dict[str, Latency] = {}
    with Client(cluster, resolve=lambda _host: (HOST, DC_PORT), timeout=REPLY_TIMEOUT, retries=2) as c:
        c.put("bench:lat:hot", VALUE)
        state = link.populate(
            cluster.digest("bench:lat:hot"), spine, 0, 1, b"bench:lat:hot"
        )  # the tag a fresh agent gives slot 0
        if state != "valid":
            raise RuntimeError(f"Populate(bench:lat:hot, switch={spine}) answered {state!r}, expected 'valid'")
        out["get"] = sequential(lambda: c.get("bench:get:0"), ops)
        out["uncached_put"] = sequential(lambda: c.put("bench:lat:plain", VALUE), ops)
        before = link.stats()["coherence"]
        out["cached_put"] = sequential(lambda: c.put("bench:lat:hot", VALUE), ops)
        stats = link.stats()
    done = stats["coherence"]["invalidates"] - before["invalidates"]
    if done < ops:
        raise RuntimeError(f"only {done} invalidations for {ops} writes of a cached key: coherence did not run")
    return out, stats
