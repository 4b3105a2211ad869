"""Hot keys cache themselves, end to end in Mininet (softswitch; BMv2 where installed).

A Zipf-0.99 workload runs from the client host with nothing cached by hand: the
cache switches' detectors report hot keys, the agents insert them and the shims
fill them.  The scenarios run in order on one deployment per target:

1. the hit ratio of the last seconds comes close to the ideal for the cache size;
2. with the caches full, keys that become hot replace the coldest, not the hottest;
3. an agent killed and restarted loses no correctness and gets its cache back;
4. the insertions never exceed the agents' budget (token bucket), even when
   many keys get hot at once.

The ideal compared with: every cache switch holds ``SLOTS`` keys; under DistCache
a hot key takes one slot in its spine and one in its rack's leaf, so with two
spines and two racks the caches hold about ``2 * SLOTS`` distinct keys, at best
the hottest ones.  Their Zipf mass is the best hit ratio a read-only workload can
reach (writes make copies invalid for a moment; unbalanced partitions cost a little).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from dcnet.deploy import Deployment

from distcache.cluster import Cluster
from tests.e2e.targets import targets

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

SLOTS, KEYS, RATE, BURST = 16, 2000, 5.0, 5
CLUSTER = Cluster(
    spines=2, storage_racks=2, client_racks=1, cache_slots=SLOTS, hh_threshold=4, insert_rate=RATE, insert_burst=BURST
)
CLIENT = CLUSTER.client(0, 0)

TARGETS = targets()


def zipf_mass(top: int, n: int, theta: float = 0.99) -> float:
    w = 1.0 / np.arange(1, n + 1) ** theta
    return float(w[:top].sum() / w.sum())


class Run:
    def __init__(self, dep: Deployment) -> None:
        self.dep = dep
        self.started = time.monotonic()

    def bench(self, **cfg: object) -> tuple[dict, list[dict]]:
        seconds, report = [], None
        base = {
            "keys": KEYS,
            "zipf": 0.99,
            "read_ratio": 0.98,
            "value_size": 32,
            "concurrency": 16,
            "duration": 10,
            "load_keys": KEYS,
        }
        for msg in self.dep.bench(CLIENT, {**base, **cfg}):
            if msg["type"] == "second":
                seconds.append(msg)
            elif msg["type"] == "report":
                report = msg
        assert report is not None
        return report, seconds

    def agents(self, with_keys: bool = False) -> dict:
        assert self.dep.controller is not None
        return self.dep.controller.agent_status(with_keys)


@pytest.fixture(scope="module", params=TARGETS)
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with Deployment(CLUSTER, target=request.param, run_dir=tmp_path_factory.mktemp("run")) as d:
        yield Run(d)


def test_hot_keys_get_cached_and_hit_ratio_nears_the_ideal(run: Run) -> None:
    report, seconds = run.bench(duration=14)
    assert report["error_count"] == 0, report["errors"]
    st = run.agents()
    assert sum(s.auto_inserted for s in st.values()) >= 2 * SLOTS  # no key was cached by hand
    print("keys cached:", {k: s.occupied for k, s in st.items()})
    tail = seconds[-5:]
    reached = sum(s["hits"] for s in tail) / sum(s["reads"] for s in tail)
    ideal = zipf_mass(2 * SLOTS, KEYS)
    print(f"hit ratio of the last 5 s: {reached:.3f}; ideal (Zipf mass of the top {2 * SLOTS} keys): {ideal:.3f}")
    assert reached >= 0.8 * ideal
    assert seconds[0]["hit_ratio"] < reached  # the caches started empty
    # a loaded fabric without failures: the controller failed no switch.  A leaf's data plane may still have
    # taken a spine for dead for a moment (a spine process that waited past the 30 ms threshold for a CPU of a
    # busy 2-core host); such a death costs a detour, never a failover (make run reports their count)
    st = json.loads(run.dep.ctl("status", "--json"))
    assert not any(s["failed"] for s in st["switches"]), [s["name"] for s in st["switches"] if s["failed"]]
    assert st["failovers"] == 0
    print("spine deaths seen by the leaves:", [(d["leaf"], d["spine"], d["silent_s"]) for d in st["spine_deaths"]])


def test_new_hot_keys_replace_the_coldest(run: Run) -> None:
    before = {name: {k.key for k in s.keys} for name, s in run.agents(with_keys=True).items()}
    evicted_before = sum(s.evicted for s in run.agents().values())
    # the first phase's workload goes on (its hottest keys stay hot) while 8 new keys get as hot
    results: dict = {}
    old = threading.Thread(target=lambda: results.update(old=run.bench(duration=8, load_keys=0)[0]))
    old.start()
    report, _ = run.bench(duration=8, keys=8, prefix="new", zipf=0.0, load_keys=8, concurrency=8)
    old.join(60)
    assert report["error_count"] == 0 and results["old"]["error_count"] == 0, (report["errors"], results)
    after = run.agents(with_keys=True)
    assert sum(s.evicted for s in after.values()) > evicted_before
    digest = run.dep.cluster.digest
    new = {digest(f"new{i}") for i in range(8)}
    cached_new = set().union(*({k.key for k in s.keys} for s in after.values())) & new
    assert len(cached_new) >= 3, f"only {len(cached_new)} of the 8 new hot keys got cached"
    # the workload's hottest keys stay cached: a switch evicts what is cold *there* (with two choices, a hot
    # key's copy at one switch may be read rarely while the other copy takes its reads), but never all copies
    hottest = {digest(f"key{i}") for i in range(4)}
    assert hottest <= set().union(*({k.key for k in s.keys} for s in after.values()))
    for name, s in after.items():
        now = {k.key for k in s.keys}
        if len(before[name]) == SLOTS and now & new:  # a full cache made room for new keys ...
            assert before[name] - now, name  # ... by evicting (which: the coldest there, tests/p4runtime/test_agent.py)


def test_agent_restart_keeps_reads_right_and_cache_comes_back(run: Run) -> None:
    """The agent of sp0 is killed mid-workload and started again: the switch keeps serving meanwhile,
    and the restarted agent reads its cache back from the switch (same keys, slots and versions)."""
    from distcache import p4names

    result: dict = {}
    t = threading.Thread(target=lambda: result.update(r=run.bench(duration=6, load_keys=0)))
    t.start()
    time.sleep(1.5)
    run.dep.kill_agent("sp0")
    on_switch = {
        int(m[p4names.KEY_DC_KEY]).to_bytes(16, "big"): (p["slot"], p["version"])
        for m, _, p in run.dep.controller.conns["sp0"].read_table(p4names.CACHE_LOOKUP)
    }
    time.sleep(1.0)
    run.dep.restart_agent("sp0")
    back = {k.key: (k.slot, k.version) for k in run.agents(with_keys=True)["sp0"].keys}
    assert on_switch and all(back.get(k) == v for k, v in on_switch.items())  # every entry read back as it was
    t.join(60)
    report, seconds = result["r"]
    assert report["error_count"] == 0, report["errors"]
    assert all(s["hits"] > 0 for s in seconds[1:3])  # the caches kept serving while the agent was gone


def test_insertions_stay_within_the_budget(run: Run) -> None:
    """60 keys become hot at once (each reported every window): the agents act on at most their budget."""
    report, _ = run.bench(duration=5, keys=60, prefix="burst", zipf=0.0, load_keys=60, read_ratio=1.0)
    assert report["error_count"] == 0, report["errors"]
    elapsed = time.monotonic() - run.started
    for name, s in run.agents().items():
        assert s.auto_inserted <= BURST + RATE * elapsed, (name, s.auto_inserted, elapsed)
    assert sum(s.rate_limited for s in run.agents().values()) > 0  # the flood of reports was capped
