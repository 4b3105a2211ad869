"""Checks against the paper's analysis (§3.2).

* The optimum of the fractional matching problem (Definition 1), as a linear
  program: split each two-copy key's reads between its spine and leaf copies
  to minimize the most loaded cache.  The power of two choices should come
  close to it without knowing it.
* Lemma 3: without the power of two choices (a fixed split, or always the
  spine) some cache is overloaded at rates the two choices sustain, so its
  queue grows without bound.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from scipy.optimize import linprog

from simulator.model import Model, SimConfig


def cache_bound(model: Model, x: np.ndarray, both: np.ndarray) -> float:
    """The rate at which the most loaded cache saturates for a given split ``x`` of the two-copy keys."""
    rt = model.routing("distcache")
    rt.x[both] = x
    cache, _ = model.loads(rt, 1.0)
    return model.cfg.cap / float(cache.max())


def lp_optimum(model: Model) -> float:
    """Largest read rate the caches can absorb under the best split (reads only)."""
    rt = model.routing("distcache")
    both = rt.b >= 0
    keys = np.flatnonzero(both)
    n, m = keys.size, model.n_caches
    single = ~both & (rt.a >= 0)
    base = np.bincount(rt.a[single], weights=model.p[single], minlength=m)
    # variables: x_0..x_{n-1} (share to the spine copy), t (max load); minimize t
    c = np.zeros(n + 1)
    c[-1] = 1.0
    a_ub = np.zeros((m, n + 1))
    b_ub = -base.copy()
    for j, i in enumerate(keys):
        pa, pb = rt.a[i], rt.b[i]
        a_ub[pa, j] += model.p[i]
        a_ub[pb, j] -= model.p[i]
        b_ub[pb] -= model.p[i]
    a_ub[:, -1] = -1.0
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=[(0, 1)] * n + [(0, None)], method="highs")
    if not res.success:
        raise RuntimeError(f"LP failed: {res.message}")
    return model.cfg.cap / float(res.x[-1])


def compare_with_optimum(cfg: SimConfig, seeds: range) -> list[tuple[int, float, float]]:
    """(seed, power-of-two-choices cache bound, LP optimum) per seed."""
    out = []
    for seed in seeds:
        m = Model(replace(cfg, seed=seed))
        rt = m.routing("distcache")
        both = rt.b >= 0
        out.append((seed, cache_bound(m, rt.x[both], both), lp_optimum(m)))
    return out


def without_two_choices(cfg: SimConfig) -> dict[str, float]:
    """DistCache's throughput under each routing policy (same placement and caches)."""
    return {
        policy: Model(replace(cfg, routing=policy)).evaluate("distcache").throughput
        for policy in ("p2c", "random", "spine")
    }
