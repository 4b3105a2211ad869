"""The simulator against first principles and the paper's analysis, on instances small enough to check."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from distcache.cluster import Cluster
from simulator import theory
from simulator.model import MECHANISMS, Model, SimConfig, paper_config
from simulator.workload import Zipf, harmonic

SMALL = SimConfig(
    cluster=Cluster(spines=8, storage_racks=8, servers_per_rack=8, client_racks=1),
    n_keys=1_000_000,
    alpha=0.99,
    cache_per_switch=10,
    samples=100_000,
    telemetry_batch=16,
)


@pytest.mark.parametrize("alpha", [0.0, 0.9, 0.99, 1.2])
def test_zipf_probabilities_and_tail_mass(alpha: float) -> None:
    n = 300_000
    z = Zipf(n, alpha, head=1000)
    brute = np.arange(1, n + 1, dtype=float) ** -alpha
    brute /= brute.sum()
    assert z.p.sum() + z.tail_mass == pytest.approx(1.0, abs=1e-12)
    assert z.tail_mass == pytest.approx(brute[1000:].sum(), rel=1e-6)
    assert np.allclose(z.p, brute[:1000], rtol=1e-6)


def test_harmonic_numbers_at_paper_scale() -> None:
    exact_head = float(np.sum(np.arange(1, 200_001, dtype=float) ** -0.99))
    assert harmonic(200_000, 0.99) == pytest.approx(exact_head, rel=1e-12)
    big = harmonic(100_000_000, 0.99)
    assert 19 < big < 22 and harmonic(100_000_000, 1.0) == pytest.approx(np.log(1e8) + 0.5772156649, rel=1e-6)


def test_sampling_follows_the_distribution() -> None:
    z = Zipf(100_000_000, 0.99)
    s = z.sample(400_000, np.random.default_rng(3))
    assert s.min() >= 0 and s.max() < 100_000_000
    assert (s == 0).mean() == pytest.approx(z.p[0], rel=0.05)
    assert (s >= z.head).mean() == pytest.approx(z.tail_mass, rel=0.02)


def test_nocache_equals_the_analytic_hottest_server() -> None:
    m = Model(SMALL)
    per_server = np.zeros(SMALL.n_servers)
    for key, srv in enumerate(m.server):
        per_server[srv] += m.p[key]
    per_server += m.zipf.tail_mass / SMALL.n_servers
    assert m.evaluate("nocache").throughput == pytest.approx(1 / per_server.max(), rel=1e-9)


def test_uniform_load_needs_no_cache() -> None:
    m = Model(replace(SMALL, alpha=0.0))
    for mech in MECHANISMS:
        assert m.evaluate(mech).throughput == pytest.approx(SMALL.n_servers, rel=0.05)


def test_two_choices_reach_the_matching_optimum() -> None:
    for seed, p2c, lp in theory.compare_with_optimum(replace(SMALL, n_keys=100_000), range(1, 4)):
        assert p2c <= lp * (1 + 1e-9), seed
        assert p2c >= 0.97 * lp, seed


def test_without_two_choices_the_caches_overload_first() -> None:
    t = theory.without_two_choices(paper_config(samples=200_000))
    assert t["random"] < 0.9 * t["p2c"] and t["spine"] < 0.5 * t["p2c"]


def test_mechanisms_order_under_skewed_reads() -> None:
    m = Model(paper_config(samples=200_000))
    r = {mech: m.evaluate(mech).throughput for mech in MECHANISMS}
    assert r["replication"] >= r["distcache"] > r["partition"] > r["nocache"]
    assert r["hybrid"] >= r["distcache"]
    # only two copies of the hottest key: DistCache cannot pass 2 * switch rate / p_max
    assert r["distcache"] <= 2 * m.cfg.cap / m.p[0] * 1.01


def test_writes_hurt_replication_more_than_distcache() -> None:
    def at(w: float) -> dict[str, float]:
        m = Model(paper_config(write_ratio=w, samples=200_000))
        return {mech: m.evaluate(mech).throughput for mech in ("replication", "distcache", "nocache")}

    r0, r2 = at(0.0), at(0.2)
    assert r2["replication"] / r0["replication"] < r2["distcache"] / r0["distcache"]
    assert r2["nocache"] == pytest.approx(r0["nocache"], rel=1e-6)  # writes cost a server what reads do


def test_failed_spines_lose_capacity_until_remapped() -> None:
    cfg = paper_config(samples=200_000)
    full = Model(cfg).evaluate("distcache").throughput
    failed = frozenset({0, 1, 2, 3})
    stale = Model(replace(cfg, failed_spines=failed, remapped=False)).evaluate("distcache").throughput
    remapped = Model(replace(cfg, failed_spines=failed, remapped=True)).evaluate("distcache").throughput
    assert stale <= remapped <= full
    r = Model(replace(cfg, failed_spines=failed, remapped=True)).evaluate("distcache")
    assert np.all(r.cache_load[:4] == 0)  # failed spines carry nothing
