"""Saturation throughput of a leaf-spine storage cluster with in-network caches.

The model (every choice is listed in docs/evaluation.md):

* ``n`` storage servers in racks, each serving ``server_rate`` queries per
  unit time; every rack's leaf and every spine is a cache switch serving
  ``switch_rate`` (default: the rack's aggregate server rate, as the paper's
  rate limiters set it).  Throughput is the largest total query rate R at which
  no server and no cache switch is over its rate, normalized to one server.
* Keys: Zipf over ``n_keys``; the ``head`` hottest keys are placed one by one
  (owner server by hash h1, spine bucket by hash h0, both modelled as
  independent uniform draws); the tail's load spreads evenly over servers.
* Each cache switch holds ``cache_per_switch`` keys.  The spine layer depends
  on the mechanism: DistCache and CachePartition cache each spine's hottest
  keys of its h0 partition; CacheReplication caches the global hottest keys in
  every spine; Hybrid replicates only the keys too hot for two copies and uses
  DistCache otherwise.  Leaves cache the hottest keys of their rack that reach
  them, as the data plane does: under DistCache (and Hybrid's other keys) every
  key of the rack; under CachePartition and CacheReplication those no spine
  copy answers (a read a spine misses goes on through the leaf, which answers
  it from its cache).
* Reads of a key cached in two places are routed by the power of two choices:
  a stream of sampled queries picks the less loaded cache according to loads
  refreshed every ``telemetry_batch`` queries (the telemetry delay).
* Writes go to the owning server and cost it ``1 + 2·coherence_cost·paths``
  request-equivalents (two phases on each coherence path: one path covers a
  key's leaf and spine copies; a key replicated in S spines needs S paths), and
  make the key's copies invalid for ``invalid_window`` server service times,
  during which its reads go to the server.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import numpy as np

from distcache.cluster import Cluster
from distcache.hashing import N_SPINE_BUCKETS, h0, h1
from distcache.partition import spine_buckets
from simulator.workload import DEFAULT_HEAD, Zipf

MECHANISMS = ("nocache", "partition", "replication", "distcache", "hybrid")


@dataclass(frozen=True)
class SimConfig:
    cluster: Cluster
    n_keys: int = 100_000_000
    alpha: float = 0.99
    cache_per_switch: int = 100
    server_rate: float = 1.0
    switch_rate: float | None = None  # default: servers_per_rack * server_rate
    write_ratio: float = 0.0
    coherence_cost: float = 1.0
    invalid_window: float = 0.05
    telemetry_batch: int = 256
    samples: int = 400_000
    seed: int = 1
    failed_spines: frozenset[int] = frozenset()  # spine indexes (0-based)
    remapped: bool = True
    head: int = DEFAULT_HEAD
    routing: str = "p2c"  # p2c | random | spine (for the theory checks)
    # the workload's key names (``<prefix><rank>``, loadgen.workload): place keys by the project's own h1
    # and h0 instead of uniform draws, as a running system does (make emulate); None: uniform draws
    key_prefix: str | None = None

    @property
    def cap(self) -> float:
        return self.switch_rate if self.switch_rate is not None else self.cluster.servers_per_rack * self.server_rate

    @property
    def n_servers(self) -> int:
        return self.cluster.storage_racks * self.cluster.servers_per_rack


@dataclass
class Routing:
    """Where each head key's reads go: ``a`` with fraction ``x``, ``b`` with ``1-x`` (-1 = none),
    or evenly over all alive spines when ``replicated``; servers otherwise."""

    a: np.ndarray
    b: np.ndarray
    x: np.ndarray
    replicated: np.ndarray
    cached: np.ndarray
    paths: np.ndarray  # coherence paths a write must cover


@dataclass
class Result:
    mechanism: str
    throughput: float  # normalized to one server
    bottleneck: str
    cache_load: np.ndarray = field(repr=False)  # per cache switch, fraction of R (spines then leaves)
    server_load: np.ndarray = field(repr=False)  # per server, fraction of R
    spine_transit: np.ndarray = field(repr=False)  # per spine, fraction of all queries crossing it


@functools.lru_cache(maxsize=16)
def _zipf(n_keys: int, alpha: float, head: int) -> Zipf:
    return Zipf(n_keys, alpha, head)


@functools.lru_cache(maxsize=16)
def _placement(
    servers: tuple[str, ...], head: int, seed: int, key_prefix: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(owner server, spine bucket) of each head key: uniform draws, or the real hashes of named keys."""
    if key_prefix is not None:
        digest = Cluster().digest  # the placement of named keys under the development secret
        keys = [digest(f"{key_prefix}{rank}") for rank in range(head)]
        return np.array([h1(k, servers) for k in keys]), np.array([h0(k) for k in keys])
    rng = np.random.default_rng(seed)
    return rng.integers(0, len(servers), head), rng.integers(0, N_SPINE_BUCKETS, head)


def _top_k_per_group(group: np.ndarray, k: int, n_groups: int, eligible: np.ndarray | None = None) -> np.ndarray:
    """Mask of the k most popular keys (lowest index) of each group."""
    out = np.zeros(group.size, dtype=bool)
    if k <= 0:
        return out
    idx = np.arange(group.size) if eligible is None else np.flatnonzero(eligible)
    g = group[idx]
    valid = g >= 0
    idx, g = idx[valid], g[valid]
    order = np.argsort(g, kind="stable")  # stable: popularity order within a group
    idx, g = idx[order], g[order]
    starts = np.searchsorted(g, np.arange(n_groups))
    rank_in_group = np.arange(g.size) - starts[g]
    out[idx[rank_in_group < k]] = True
    return out


class Model:
    """One cluster + workload; evaluates any mechanism on it."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        c = cfg.cluster
        self.S, self.R, self.L = c.spines, c.storage_racks, c.servers_per_rack
        self.zipf = _zipf(cfg.n_keys, cfg.alpha, cfg.head)
        self.p = self.zipf.p
        self.server, bucket = _placement(c.server_names(), self.zipf.head, cfg.seed, cfg.key_prefix)
        self.rack = self.server // self.L
        ids = [i + 1 for i in range(self.S)]
        self.alive = np.array([i not in cfg.failed_spines for i in range(self.S)])
        live_ids = {i + 1 for i in range(self.S) if self.alive[i]}
        owner = np.array(spine_buckets(ids, live_ids if cfg.remapped else None)) - 1  # spine index, -1 = none
        spine = owner[bucket]
        if not cfg.remapped:  # keys of failed spines lose their spine copy until the controller remaps
            spine = np.where((spine >= 0) & self.alive[np.maximum(spine, 0)], spine, -1)
        self.spine = spine
        self.n_caches = self.S + self.R

    # -- cache contents and routing -----------------------------------------------------------
    def routing(self, mechanism: str, hybrid_set: np.ndarray | None = None) -> Routing:
        cfg, n = self.cfg, self.p.size
        k = cfg.cache_per_switch
        a = np.full(n, -1)
        b = np.full(n, -1)
        x = np.ones(n)
        replicated = np.zeros(n, dtype=bool)
        if mechanism == "nocache":
            return Routing(a, b, x, replicated, np.zeros(n, dtype=bool), np.zeros(n))
        n_alive = int(self.alive.sum())
        if mechanism == "replication":
            replicated[: min(k, n)] = n_alive > 0
            spine_cached = np.zeros(n, dtype=bool)
        elif mechanism == "hybrid":
            replicated = hybrid_set.copy() if hybrid_set is not None else replicated
            replicated &= n_alive > 0
            left = k - int(replicated.sum())
            spine_cached = _top_k_per_group(self.spine, left, self.S, eligible=~replicated)
        elif mechanism in ("partition", "distcache"):
            spine_cached = _top_k_per_group(self.spine, k, self.S)
        else:
            raise ValueError(f"unknown mechanism {mechanism!r}; use one of {MECHANISMS}")
        # A leaf caches its rack's hottest keys among those reaching it: with two choices (DistCache, Hybrid's
        # other keys) every key of its rack; otherwise only the keys no spine copy answers, since reads a
        # spine answers never reach the leaf (its detector does not see them).
        if mechanism == "distcache":
            leaf = _top_k_per_group(self.rack, k, self.R)
        elif mechanism == "hybrid":
            leaf = _top_k_per_group(self.rack, k, self.R, eligible=~replicated)
        else:
            leaf = _top_k_per_group(self.rack, k, self.R, eligible=~(spine_cached | replicated))
        both = spine_cached & leaf
        only_spine, only_leaf = spine_cached & ~leaf, leaf & ~spine_cached
        a[only_spine | both] = self.spine[only_spine | both]
        a[only_leaf] = self.S + self.rack[only_leaf]
        b[both] = self.S + self.rack[both]
        if mechanism == "partition":
            b[both] = -1  # no choice: the spine partition serves it
        elif both.any():
            x[both] = self._split(both, a, b, replicated)
        cached = replicated | spine_cached | leaf
        paths = np.where(replicated, n_alive, np.where(cached, 1, 0)).astype(float)
        return Routing(a, b, x, replicated, cached, paths)

    def _split(self, both: np.ndarray, a: np.ndarray, b: np.ndarray, replicated: np.ndarray) -> np.ndarray:
        """Fraction of each two-choice key's reads sent to its spine copy."""
        cfg = self.cfg
        if cfg.routing == "random":
            return np.full(int(both.sum()), 0.5)
        if cfg.routing == "spine":
            return np.ones(int(both.sum()))
        # deterministic load from every other cached read, in fractions of the read rate
        single = ~both & (a >= 0)
        base = np.bincount(a[single], weights=self.p[single], minlength=self.n_caches)
        if replicated.any():
            base[: self.S] += self.alive * self.p[replicated].sum() / max(1, self.alive.sum())
        keys = np.flatnonzero(both)
        w = self.p[keys]
        mass = w.sum()
        rng = np.random.default_rng(cfg.seed + 7)
        q = cfg.samples
        stream = keys[np.searchsorted(np.cumsum(w) / mass, rng.random(q), side="right").clip(0, keys.size - 1)]
        tie = rng.random(q) < 0.5
        counts = np.zeros(self.n_caches)
        to_spine = np.zeros(self.p.size)
        seen = np.zeros(self.p.size)
        batch = max(1, cfg.telemetry_batch)
        unit = mass / q
        for start in range(0, q, batch):
            ks = stream[start : start + batch]
            load = base * (start / q) + counts * unit  # what the client leaf last heard
            la, lb = load[a[ks]], load[b[ks]]
            pick_a = (la < lb) | ((la == lb) & tie[start : start + batch])
            chosen = np.where(pick_a, a[ks], b[ks])
            counts += np.bincount(chosen, minlength=self.n_caches)
            np.add.at(to_spine, ks, pick_a)
            np.add.at(seen, ks, 1)
        frac = np.where(seen[keys] > 0, to_spine[keys] / np.maximum(seen[keys], 1), 0.5)
        return frac

    # -- loads and saturation -------------------------------------------------------------------
    def loads(self, rt: Routing, rate: float) -> tuple[np.ndarray, np.ndarray]:
        """(cache loads, server loads) in queries per unit time at total rate ``rate``."""
        cfg = self.cfg
        w = cfg.write_ratio
        reads, writes = (1 - w) * self.p * rate, w * self.p * rate
        invalid = np.minimum(1.0, writes * cfg.invalid_window / cfg.server_rate) * rt.cached
        served = reads * (1 - invalid) * rt.cached
        cache = np.zeros(self.n_caches)
        hit = rt.a >= 0
        cache += np.bincount(rt.a[hit], weights=(served * rt.x)[hit], minlength=self.n_caches)
        two = rt.b >= 0
        cache += np.bincount(rt.b[two], weights=(served * (1 - rt.x))[two], minlength=self.n_caches)
        n_alive = max(1, int(self.alive.sum()))
        cache[: self.S] += self.alive * served[rt.replicated].sum() / n_alive
        to_server = reads - served + writes * (1 + 2 * cfg.coherence_cost * rt.paths)
        server = np.bincount(self.server, weights=to_server, minlength=cfg.n_servers)
        server += self.zipf.tail_mass * rate / cfg.n_servers
        return cache, server

    def saturation(self, rt: Routing) -> tuple[float, str]:
        cfg = self.cfg
        caps = np.full(self.n_caches, cfg.cap)
        caps[: self.S] = np.where(self.alive, cfg.cap, 0.0)

        def worst(rate: float) -> tuple[float, str]:
            cache, server = self.loads(rt, rate)
            with np.errstate(divide="ignore", invalid="ignore"):
                cu = np.where(caps > 0, cache / caps, np.where(cache > 0, np.inf, 0.0))
            su = server / cfg.server_rate
            ci, si = int(np.argmax(cu)), int(np.argmax(su))
            if cu[ci] >= su[si]:
                name = f"spine {ci}" if ci < self.S else f"leaf {ci - self.S}"
                return float(cu[ci]), name
            return float(su[si]), f"server {si}"

        if cfg.write_ratio == 0:  # loads are linear in the rate
            u, name = worst(1.0)
            return 1.0 / u, name
        lo, hi = 0.0, (cfg.n_servers * cfg.server_rate + self.n_caches * cfg.cap) * 2
        for _ in range(60):
            mid = (lo + hi) / 2
            if worst(mid)[0] <= 1.0:
                lo = mid
            else:
                hi = mid
        return lo, worst(hi)[1]

    def spine_transit(self, rt: Routing) -> np.ndarray:
        """Share of all queries crossing each spine: reads targeted at it, the rest spread evenly."""
        served = (1 - self.cfg.write_ratio) * self.p * rt.cached
        targeted = np.zeros(self.S)
        m = (rt.a >= 0) & (rt.a < self.S)
        targeted += np.bincount(rt.a[m], weights=(served * rt.x)[m], minlength=self.S)[: self.S]
        targeted += self.alive * served[rt.replicated].sum() / max(1, self.alive.sum())
        return targeted + (1.0 - targeted.sum()) / self.S

    def evaluate(self, mechanism: str) -> Result:
        hybrid_set = None
        if mechanism == "hybrid":
            r_rep, _ = self.saturation(self.routing("replication"))
            hybrid_set = (1 - self.cfg.write_ratio) * self.p * r_rep > self.cfg.cap / 2
            hybrid_set[self.cfg.cache_per_switch :] = False
        rt = self.routing(mechanism, hybrid_set)
        rate, bottleneck = self.saturation(rt)
        cache, server = self.loads(rt, 1.0)
        return Result(mechanism, rate / self.cfg.server_rate, bottleneck, cache, server, self.spine_transit(rt))


def throughput(cfg: SimConfig, mechanism: str) -> float:
    return Model(cfg).evaluate(mechanism).throughput


def paper_config(**overrides: object) -> SimConfig:
    """The paper's default setup: 32 spines, 32 racks x 32 servers, 100 M keys, Zipf-0.99, 100 keys/switch."""
    cluster = Cluster(spines=32, storage_racks=32, servers_per_rack=32, client_racks=1)
    cfg = SimConfig(cluster=cluster)
    return replace(cfg, **overrides)  # type: ignore[arg-type]
