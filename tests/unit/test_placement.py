"""The placement table (distcache/placement.py) and every part that reads it: the operator's view of where a
key is cached, the agents' choice of what to keep, the planner's detector entries, the shims' coherence set and
the controller's failover warm-up all say the same, per mechanism.  What the switches hold after a Zipf run is
checked against it in tests/e2e/test_e2e_mechanisms.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

from agent.agent import SwitchAgent
from distcache import p4names
from distcache.cluster import Cluster, Mechanism, Role, Switch
from distcache.hashing import h0
from distcache.partition import spine_buckets
from distcache.placement import PLACEMENT, Spines, cache_switches, possible_holders, read_targets
from p4rt.plan import plan
from softswitch.dataplane import PROGRAM
from tests.common.keys import digest

CLUSTER = Cluster(spines=3, storage_racks=2, servers_per_rack=2)
SPINE_IDS = [CLUSTER.spine(i).switch_id for i in range(3)]
LIVE = spine_buckets(SPINE_IDS, {SPINE_IDS[0], SPINE_IDS[2]})  # the middle spine failed
KEYS = [digest(f"key{i}") for i in range(200)]
REPLICATED = frozenset(KEYS[:5])


def its_keys(sw: Switch, keys: list[bytes]) -> list[bytes]:
    """The keys that can reach ``sw``'s cache: all for a spine, its rack's for a storage leaf."""
    if sw.role == Role.SPINE:
        return keys
    return [k for k in keys if CLUSTER.storage_leaf(CLUSTER.server_for_key(k).rack) == sw]


def at(mech: Mechanism) -> Cluster:
    return Cluster(**{**CLUSTER.__dict__, "mechanism": mech})


def test_the_table_says_what_the_paper_compares() -> None:
    """The spines differ per mechanism; the storage-rack layer caches under every caching mechanism and is a
    read target only under DistCache and Hybrid (the second choice)."""
    assert PLACEMENT[Mechanism.NOCACHE].spines == Spines.NONE and not PLACEMENT[Mechanism.NOCACHE].leaf
    assert PLACEMENT[Mechanism.PARTITION].spines == PLACEMENT[Mechanism.DISTCACHE].spines == Spines.OWNER
    assert PLACEMENT[Mechanism.REPLICATION].spines == Spines.EVERY
    assert all(PLACEMENT[m].leaf for m in Mechanism if m != Mechanism.NOCACHE)
    assert {m for m in Mechanism if PLACEMENT[m].leaf_read_target} == {Mechanism.DISTCACHE, Mechanism.HYBRID}
    assert {m for m in Mechanism if PLACEMENT[m].warms_on_failover} == {
        Mechanism.PARTITION,
        Mechanism.DISTCACHE,
        Mechanism.HYBRID,
    }


def test_where_a_key_is_cached_per_mechanism() -> None:
    k = KEYS[42]
    spine = CLUSTER.switch_by_id(LIVE[h0(k)])
    leaf = CLUSTER.storage_leaf(CLUSTER.server_for_key(k).rack)
    assert cache_switches(at(Mechanism.DISTCACHE), LIVE, k) == [spine, leaf]
    assert cache_switches(at(Mechanism.PARTITION), LIVE, k) == [spine, leaf]  # the rack leaf behind its spine
    every = [CLUSTER.spine(0), CLUSTER.spine(2)]  # every spine in service, not the failed one
    assert cache_switches(at(Mechanism.REPLICATION), LIVE, k) == [*every, leaf]
    assert cache_switches(at(Mechanism.HYBRID), LIVE, k, REPLICATED) == [spine, leaf]
    assert cache_switches(at(Mechanism.HYBRID), LIVE, KEYS[0], REPLICATED)[:2] == every
    assert cache_switches(at(Mechanism.NOCACHE), LIVE, k) == []
    assert read_targets(at(Mechanism.DISTCACHE), LIVE, k) == [spine, leaf]
    assert read_targets(at(Mechanism.PARTITION), LIVE, k) == [spine]
    assert read_targets(at(Mechanism.REPLICATION), LIVE, k) == every
    assert read_targets(at(Mechanism.HYBRID), LIVE, KEYS[0], REPLICATED) == every
    assert read_targets(at(Mechanism.NOCACHE), LIVE, k) == []


@pytest.mark.parametrize("mech", list(Mechanism), ids=lambda m: m.name.lower())
def test_the_agents_keep_what_the_table_places(mech: Mechanism, tmp_path: Path) -> None:
    """Each cache switch's agent keeps a key exactly when the table places it there."""
    cluster = at(mech)
    p4info = tmp_path / "p4info.txt"
    p4info.write_text(text_format.MessageToString(PROGRAM.p4info()))
    for sw in cluster.switches():
        if sw.role == Role.CLIENT_LEAF or (sw.role == Role.SPINE and sw.switch_id not in LIVE):
            continue
        agent = SwitchAgent(cluster, sw, p4info, b"", shim_for=lambda _k: None)  # type: ignore[arg-type,return-value]
        agent.buckets, agent.replicated = LIVE, REPLICATED
        for k in its_keys(sw, KEYS):
            placed = sw in cache_switches(cluster, LIVE, k, REPLICATED)
            assert agent.owns(k) == placed, (mech.name, sw.name, k.hex())


@pytest.mark.parametrize("mech", list(Mechanism), ids=lambda m: m.name.lower())
def test_the_detectors_watch_what_the_table_places(mech: Mechanism) -> None:
    """A spine's detector watches a key's bucket, a storage leaf its rack, exactly where the table caches."""
    cluster = at(mech)
    for sw in cluster.switches():
        if sw.role == Role.CLIENT_LEAF or (sw.role == Role.SPINE and sw.switch_id not in LIVE):
            continue
        entries = plan(cluster, sw, LIVE).entries
        watched = {dict(e.match)[p4names.KEY_BUCKET] for e in entries if e.table == p4names.HH_BUCKETS}
        racks = [e for e in entries if e.table == p4names.HH_RACKS]
        for k in its_keys(sw, KEYS[5:]):  # Hybrid's replicated keys are the controller's to place, not a detector's
            placed = sw in cache_switches(cluster, LIVE, k)
            seen = h0(k) in watched if sw.role == Role.SPINE else bool(racks)
            assert seen == placed, (mech.name, sw.name, k.hex())


def test_the_switches_a_shim_counts_are_those_any_mechanism_may_cache_its_keys_in() -> None:
    """possible_holders is what a shim's coherence counts (the compiled shim from internal/dc's generated
    SpinesMayCache and StorageLeafMayCache; tests/unit/test_shim_client.py reads it back from a running one)."""
    all_spines = spine_buckets(SPINE_IDS)
    for server in CLUSTER.servers():
        mine = [k for k in KEYS if CLUSTER.server_for_key(k) == server]
        anywhere = {
            sw.switch_id for m in Mechanism for k in mine for sw in cache_switches(at(m), all_spines, k, REPLICATED)
        }
        assert anywhere == set(possible_holders(CLUSTER, server)), server.name
