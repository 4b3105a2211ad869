"""Four spines, two storage racks: every cached read is a hit, and a spine answers only for keys that
h0 maps to it — which proves the client-rack switch's P4 hash agrees with distcache.hashing.h0."""

from __future__ import annotations

import pytest
from dcnet.deploy import Deployment

from distcache.cluster import Cluster
from distcache.hashing import h0
from tests.e2e.targets import targets

pytestmark = [
    pytest.mark.timeout(240),
]

TARGETS = targets()


@pytest.mark.parametrize("target", TARGETS)
def test_reads_hit_the_h0_spine_or_the_rack_leaf(target: str, tmp_path) -> None:  # noqa: ANN001
    cluster = Cluster(spines=4, storage_racks=2, client_racks=1)
    with Deployment(cluster, target=target, run_dir=tmp_path / "run") as d:
        client = d.client()
        keys = [f"mk{i}" for i in range(24)]
        for k in keys:
            r = client.call("put", k, "v-" + k)
            assert r["ok"], r
            d.controller.cache(k)
        spines_used = set()
        for _ in range(2):
            for k in keys:
                r = client.get_first_path(k)
                assert r["ok"] and r["value"] == "v-" + k and r["cached"] and r["attempts"] == 1, (k, r)
                wkey = d.cluster.digest(k)
                leaf = cluster.storage_leaf(cluster.server_for_key(wkey).rack).switch_id
                spine = d.controller.buckets[h0(wkey)]
                assert r["served_by"] in (spine, leaf), (k, r["served_by"], spine, leaf)
                if r["served_by"] == spine:
                    spines_used.add(spine)
        assert len(spines_used) >= 3  # the partition really spreads keys over spines
