"""Every caching mechanism's routing and caching, end to end in Mininet (softswitch; BMv2 where installed).

One deployment per target (2 spines, 2 storage racks, 1 client rack, 16
slots per cache switch) runs a Zipf-0.99 workload with 5 % writes under each
mechanism in turn, switched on the running system with ``distcache-ctl
mechanism``; the workload checks every value it reads, so a stale read fails
the test.  What each mechanism must show, from the switches' own counters and
the agents' cache contents:

* NoCache: no switch caches or answers anything, no read is marked for a cache,
  and transit spreads over both spines (each stamps replies);
* CachePartition: reads go to the key's spine only, each spine caches its own
  partition, and a read its spine misses is answered by the key's rack leaf;
  under every mechanism the switches' cache tables, read back over P4Runtime,
  hold each key only where distcache.placement places it;
* CacheReplication: reads go to any spine; the hottest keys are cached in both
  spines and both answer them; rack leaves answer what the spines miss;
* DistCache: both layers cache and reads go to both;
* Hybrid: the keys hotter than ``hybrid_rate`` are replicated in both spines
  (and read from both); every other key a spine caches is of its own partition;
* switching mechanism every two seconds under load never returns a stale value.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from dcnet.deploy import Deployment

from distcache import p4names
from distcache.cluster import Cluster, Mechanism
from distcache.hashing import h0
from distcache.partition import spine_buckets
from distcache.placement import PLACEMENT, Spines, cache_switches
from tests.e2e.targets import targets

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

KEYS = 1000
# hybrid_rate: on BMv2 (a few hundred reads/s here) only the hottest keys pass it; on softswitch a few more
CLUSTER = Cluster(spines=2, storage_racks=2, client_racks=1, cache_slots=16, hh_threshold=4, hybrid_rate=10.0)
CLIENT = CLUSTER.client(0, 0)
SP0, SP1 = CLUSTER.spine(0), CLUSTER.spine(1)
SPINES = (SP0.name, SP1.name)
LEAVES = (CLUSTER.storage_leaf(0).name, CLUSTER.storage_leaf(1).name)
CL0 = CLUSTER.client_leaf(0).name
BUCKETS = spine_buckets([SP0.switch_id, SP1.switch_id])
WORKLOAD = {"keys": KEYS, "zipf": 0.99, "read_ratio": 0.95, "value_size": 32, "concurrency": 8, "load_keys": KEYS}

TARGETS = targets()


class Run:
    def __init__(self, dep: Deployment) -> None:
        self.dep = dep
        self.loaded = False

    def workload(self, seconds: float) -> dict:
        """Run the checked workload; fail on any error (wrong or stale value, timeout)."""
        report = None
        cfg = {**WORKLOAD, "duration": seconds, "load": not self.loaded}
        for msg in self.dep.bench(CLIENT, cfg):
            if msg["type"] == "report":
                report = msg
        assert report is not None
        assert report["error_count"] == 0, report["errors"]
        self.loaded = True
        return report

    @contextlib.contextmanager
    def background(self, seconds: float, **cfg: object) -> Iterator[dict]:
        """The checked workload in a thread while the body runs; its report lands in the yielded dict."""
        result: dict = {}

        def load() -> None:
            try:
                for msg in self.dep.bench(CLIENT, {**WORKLOAD, "duration": seconds, "load": False, **cfg}):
                    if msg["type"] == "report":
                        result["report"] = msg
            except Exception as e:  # noqa: BLE001 - reported below
                result["error"] = e

        t = threading.Thread(target=load)
        t.start()
        try:
            yield result
        finally:
            t.join(seconds + 60)
        assert "error" not in result, result.get("error")
        assert "report" in result

    def stats(self) -> dict[str, dict[int, int]]:
        out = {}
        for name in (*SPINES, *LEAVES, CL0):
            cells = self.dep.controller.conns[name].read_counter(p4names.DC_STATS)
            out[name] = {int(s): cells.get(int(s), (0, 0))[0] for s in p4names.Stat}
        return out

    def mechanism(self, name: str) -> None:
        self.dep.ctl("mechanism", name)

    def cached(self) -> dict[str, dict[bytes, int]]:
        """Per cache switch: its cached keys and their recent hits."""
        return {
            name: {bytes(k.key): k.hits for k in st.keys}
            for name, st in self.dep.controller.agent_status(with_keys=True).items()
        }

    def held(self) -> dict[str, set[bytes]]:
        """Per cache switch: the keys of its cache table, read back from the switch over P4Runtime."""
        out = {}
        for name in (*SPINES, *LEAVES):
            rows = self.dep.controller.conns[name].read_table(p4names.CACHE_LOOKUP)
            keys = (m[p4names.KEY_DC_KEY] for m, action, _ in rows if action == p4names.CACHE_HIT)
            out[name] = {(k if isinstance(k, int) else k.value).to_bytes(16, "big") for k in keys}
        return out

    def placed_as_the_table_says(self, mechanism: str) -> dict[str, set[bytes]]:
        """What the switches hold, each key where distcache.placement places it under ``mechanism``; and every
        layer the table caches in holds something."""
        cluster = replace(CLUSTER, mechanism=Mechanism[mechanism.upper()])
        held = self.held()
        for name, keys in held.items():
            wrong = [k.hex() for k in keys if name not in {sw.name for sw in cache_switches(cluster, BUCKETS, k)}]
            assert wrong == [], f"{mechanism}: {name} holds keys the table does not place there: {wrong}"
        rule = PLACEMENT[cluster.mechanism]
        assert any(held[leaf] for leaf in LEAVES) == rule.leaf, {k: len(v) for k, v in held.items()}
        assert all(held[sp] for sp in SPINES) == (rule.spines != Spines.NONE), {k: len(v) for k, v in held.items()}
        return held

    def measure(self, mechanism: str, seconds: float = 6.0) -> tuple[dict, dict, dict]:
        """Switch to ``mechanism``, warm the caches, then count one workload: (counter deltas, caches, report)."""
        self.mechanism(mechanism)
        self.workload(3.0)  # the detectors find the hot keys, the agents cache them
        before = self.stats()
        report = self.workload(seconds)
        after = self.stats()
        delta = {sw: {s: after[sw][s] - before[sw][s] for s in after[sw]} for sw in after}
        return delta, self.cached(), report


@pytest.fixture(scope="module", params=TARGETS)
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with Deployment(CLUSTER, target=request.param, run_dir=tmp_path_factory.mktemp("run")) as d:
        yield Run(d)


def wait_for(what: str, cond, timeout: float) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def hits(delta: dict, name: str) -> int:
    return delta[name][int(p4names.Stat.READ_HIT)]


def routed(delta: dict, where: p4names.Stat) -> int:
    return delta[CL0][int(where)]


def test_nocache_caches_nothing_and_transit_uses_every_spine(run: Run) -> None:
    delta, cached, _ = run.measure("nocache", 4.0)
    run.placed_as_the_table_says("nocache")
    assert all(not keys for keys in cached.values()), {k: len(v) for k, v in cached.items()}
    assert all(hits(delta, sw) == 0 for sw in (*SPINES, *LEAVES))
    assert routed(delta, p4names.Stat.ROUTED_SPINE) == routed(delta, p4names.Stat.ROUTED_LEAF) == 0
    for sw in SPINES:  # replies of some keys came back through each spine, carrying its load
        assert delta[sw][int(p4names.Stat.REPLY_STAMPED)] > 0, sw
    assert delta[CL0][int(p4names.Stat.LOAD_RECORDED)] > 0


def test_partition_reads_only_the_keys_spine(run: Run) -> None:
    delta, cached, _ = run.measure("partition")
    run.placed_as_the_table_says("partition")
    assert routed(delta, p4names.Stat.ROUTED_LEAF) == 0 and routed(delta, p4names.Stat.ROUTED_SPINE) > 0
    for sp in (SP0, SP1):
        assert all(BUCKETS[h0(k)] == sp.switch_id for k in cached[sp.name]), sp.name
    assert sum(hits(delta, sw) for sw in SPINES) > 0
    assert sum(hits(delta, sw) for sw in LEAVES) > 0  # no read was marked for a leaf: these the spines missed


def test_replication_caches_hot_keys_in_every_spine_and_reads_both(run: Run) -> None:
    delta, cached, _ = run.measure("replication")
    run.placed_as_the_table_says("replication")
    assert routed(delta, p4names.Stat.ROUTED_LEAF) == 0 and routed(delta, p4names.Stat.ROUTED_SPINE) > 0
    both = set(cached[SP0.name]) & set(cached[SP1.name])
    assert both, "no key is cached in both spines"
    hottest = max(both, key=lambda k: cached[SP0.name][k] + cached[SP1.name][k])
    assert cached[SP0.name][hottest] > 0 and cached[SP1.name][hottest] > 0  # each replica answered reads
    # keys of both partitions are in each spine: replicas are not limited to the spine's own buckets
    for sp in (SP0, SP1):
        assert any(BUCKETS[h0(k)] != sp.switch_id for k in cached[sp.name]), sp.name
    assert hits(delta, SP0.name) > 0 and hits(delta, SP1.name) > 0


def test_distcache_caches_in_both_layers_and_reads_both(run: Run) -> None:
    delta, cached, _ = run.measure("distcache")
    run.placed_as_the_table_says("distcache")
    assert routed(delta, p4names.Stat.ROUTED_LEAF) > 0 and routed(delta, p4names.Stat.ROUTED_SPINE) > 0
    assert any(cached[leaf] for leaf in LEAVES) and all(cached[sp] for sp in SPINES)
    for sp in (SP0, SP1):  # a spine keeps only its partition's keys (the replicas of before were evicted)
        assert all(BUCKETS[h0(k)] == sp.switch_id for k in cached[sp.name]), sp.name
    assert sum(hits(delta, sw) for sw in LEAVES) > 0 and sum(hits(delta, sw) for sw in SPINES) > 0


def test_hybrid_replicates_only_the_hottest_keys(run: Run) -> None:
    run.mechanism("hybrid")
    run.workload(3.0)  # caches fill; the controller measures rates from the agents' hit windows (about 2 s)
    snapshot: dict = {}

    def replicas_in_place() -> bool:
        before = set(run.dep.controller.ctl.status().replicated)
        cached = run.cached()
        rep = {bytes.fromhex(k) for k in before & set(run.dep.controller.ctl.status().replicated)}  # digests
        snapshot.update(rep=rep, cached=cached)
        # DistCache for the rest: a spine's other keys are its partition's. A key just dropped from the
        # replicated set keeps its copies for one drain until the spines are reconfigured, so the two
        # conditions are waited for together (the controller re-chooses every few seconds under load).
        partitioned = all(BUCKETS[h0(k)] == sp.switch_id for sp in (SP0, SP1) for k in cached[sp.name] if k not in rep)
        return bool(rep) and partitioned and all(k in cached[SP0.name] and k in cached[SP1.name] for k in rep)

    with run.background(16.0) as result:
        wait_for("every replicated key in both spines, the rest in their partition's", replicas_in_place, timeout=15.0)
    assert result["report"]["error_count"] == 0, result["report"]["errors"]
    assert len(snapshot["rep"]) <= CLUSTER.cache_slots // 2
    delta, cached, _ = run.measure("hybrid")
    assert hits(delta, SP0.name) > 0 and hits(delta, SP1.name) > 0
    assert routed(delta, p4names.Stat.ROUTED_LEAF) > 0  # the rest still has two choices
    assert any(cached[leaf] for leaf in LEAVES)


def test_switching_mechanism_under_load_never_reads_stale(run: Run) -> None:
    with run.background(14.0, read_ratio=0.9) as result:
        for mech in ("replication", "distcache", "partition", "hybrid", "nocache", "distcache"):
            time.sleep(2.0)
            run.mechanism(mech)
    report = result["report"]
    assert report["error_count"] == 0, report["errors"]
    assert report["reads"] > 0 and report["writes"] > 0
