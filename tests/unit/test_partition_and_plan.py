"""Controller logic that needs no switch: spine partitions and per-switch entries."""

from __future__ import annotations

import ipaddress
import itertools
from collections import Counter

import numpy as np
import pytest

from distcache import p4names
from distcache.cluster import DATA_NETS, Cluster, ClusterError, Mechanism, PortKind, Role
from distcache.hashing import N_SPINE_BUCKETS, InvalidKeyError, h0, h1, key_bytes
from distcache.partition import spine_buckets
from p4rt.p4info import Match
from p4rt.plan import plan
from p4rt.probes import leaf_address
from tests.common.keys import digest


def test_partition_covers_every_bucket_evenly() -> None:
    ids = list(range(1, 33))
    owner = spine_buckets(ids)
    assert len(owner) == N_SPINE_BUCKETS and set(owner) == set(ids)
    counts = Counter(owner).values()
    assert max(counts) < 3 * N_SPINE_BUCKETS / len(ids)  # virtual nodes keep shares near 1/32


def test_failed_spine_moves_only_its_buckets_and_spreads_them() -> None:
    ids = list(range(1, 33))
    before = spine_buckets(ids)
    after = spine_buckets(ids, alive=set(ids) - {7})
    moved = [b for b in range(N_SPINE_BUCKETS) if before[b] != after[b]]
    assert moved and all(before[b] == 7 for b in moved)
    assert 7 not in after
    assert len({after[b] for b in moved}) > 5  # spread over many spines, not one neighbour
    assert spine_buckets(ids, alive=set(ids)) == before  # recovery restores the original map


def test_no_spine_alive_maps_to_zero() -> None:
    assert set(spine_buckets([1, 2], alive=set())) == {0}


def test_keys_travel_as_bytes_and_switches_see_a_keyed_digest() -> None:
    assert key_bytes("abc") == b"abc" and key_bytes(b"\x00\xff") == b"\x00\xff" and key_bytes("") == b""
    assert key_bytes("é") == "é".encode()
    assert digest("abc") == digest(b"abc") != digest(b"abc\0") and len(digest("k" * 4000)) == 16
    assert len({digest(b""), digest(b"\0"), digest(b"\0\0")}) == 3
    other = Cluster(key_secret="ab" * 32)  # another deployment: other digests, so no crafted collision carries over
    assert other.digest("abc") != digest("abc") and Cluster.from_json(other.to_json()).digest("abc") == other.digest(
        "abc"
    )
    for bad in (5, None, "\ud800", b"k" * 0x10000):
        with pytest.raises(InvalidKeyError):
            digest(bad)  # type: ignore[arg-type]
    for secret in ("zz" * 32, "ab" * 8 + "a", "ab" * 15, "ab" * 65, 7):
        with pytest.raises(ClusterError, match="key_secret"):
            Cluster(key_secret=secret)  # type: ignore[arg-type]


def test_h0_and_h1_are_independent_enough() -> None:
    keys = [digest(f"key{i}") for i in range(4000)]
    servers = Cluster(storage_racks=2, servers_per_rack=2).server_names()
    pairs = Counter((h0(k) % 4, h1(k, servers)) for k in keys)
    assert len(pairs) == 16 and min(pairs.values()) > 150  # every combination appears about 1/16 of the time


def test_plan_small_cluster() -> None:
    c = Cluster()
    sp, sl, cl = c.spine(0), c.storage_leaf(0), c.client_leaf(0)
    buckets = spine_buckets([sp.switch_id])
    p_sl = plan(c, sl, buckets)
    assert p_sl.config == {"switch_id": 64, "role": int(Role.STORAGE_LEAF), "mechanism": 1}
    kinds = {
        e.match_dict[p4names.KEY_INGRESS_PORT]: e.params_dict["kind"]
        for e in p_sl.entries
        if e.table == p4names.PORT_KIND
    }
    assert kinds == {1: PortKind.STORAGE, 2: PortKind.FABRIC}
    routes = {
        (e.match_dict[p4names.KEY_IPV4_DST].value, e.match_dict[p4names.KEY_IPV4_DST].prefix_len): e.params_dict.get(
            "port", e.action
        )
        for e in p_sl.entries
        if e.table == p4names.IPV4_LPM
    }
    assert routes[(0x0A010001, 32)] == 1  # the server, on port 1
    assert routes[(0x0AFF0001, 32)] == 2  # the spine's address, up
    assert routes[(0x0A000000, 8)] == p4names.TRANSIT  # other racks: over the spines (transit_spine)
    p_cl = plan(c, cl, buckets)
    parts = [e for e in p_cl.entries if e.table == p4names.SPINE_PARTITION]
    assert len(parts) == N_SPINE_BUCKETS and {e.params_dict["spine_id"] for e in parts} == {1}
    racks = [e for e in p_cl.entries if e.table == p4names.STORAGE_RACK]
    assert racks[0].match_dict[p4names.KEY_IPV4_DST] == Match(0x0A010000, prefix_len=24)
    assert racks[0].params_dict == {"leaf_id": 64}
    p_sp = plan(c, sp, buckets)
    kinds = {
        e.match_dict[p4names.KEY_INGRESS_PORT]: e.params_dict["kind"]
        for e in p_sp.entries
        if e.table == p4names.PORT_KIND
    }
    assert kinds == {1: PortKind.STORAGE, 2: PortKind.CLIENT}


def test_leaves_get_the_clusters_liveness_times_spines_do_not() -> None:
    c = Cluster(dead_after_ms=45, dead_after_max_ms=400, liveness_hold_ms=250.5, probe_skip_ms=2.5)
    buckets = spine_buckets([c.spine(0).switch_id])
    for sw in (c.client_leaf(0), c.storage_leaf(0)):
        (cfg,) = [e for e in plan(c, sw, buckets).defaults if e.table == p4names.LIVENESS_CONFIG]
        assert (cfg.action, cfg.params_dict) == (
            p4names.SET_LIVENESS,
            {
                "dead_after": 45_000,
                "dead_after_max": 400_000,
                "hold": 250_500,
                "peak_decay_shift": p4names.PEAK_DECAY_SHIFT,
                "probe_skip": 2_500,
                "fenced": 0,
            },
        )
    assert not [e for e in plan(c, c.spine(0), buckets).defaults if e.table == p4names.LIVENESS_CONFIG]
    d = Cluster()
    assert (d.dead_after_ms, d.dead_after_max_ms, d.liveness_hold_ms, d.probe_skip_ms) == (
        p4names.DEAD_AFTER_US / 1000,
        p4names.DEAD_AFTER_MAX_US / 1000,
        p4names.HOLD_US / 1000,
        p4names.PROBE_SKIP_US / 1000,
    )


def test_transit_and_replica_slots_spread_over_live_spines_only() -> None:
    c = Cluster(spines=3, storage_racks=2, client_racks=1)
    spines = [c.spine(i) for i in range(3)]
    live = {spines[0].switch_id, spines[2].switch_id}
    buckets = spine_buckets([s.switch_id for s in spines], live)
    cl = plan(c, c.client_leaf(0), buckets, live)
    port_of = {name: port for port, name in c.ports(c.client_leaf(0).name).items()}
    transit = Counter(e.params_dict["port"] for e in cl.entries if e.table == p4names.TRANSIT_SPINE)
    assert sum(transit.values()) == p4names.TRANSIT_SLOTS
    assert set(transit) == {port_of[spines[0].name], port_of[spines[2].name]}  # sp1 is down: no slot
    assert max(transit.values()) - min(transit.values()) <= 1
    replica = Counter(e.params_dict["spine_id"] for e in cl.entries if e.table == p4names.REPLICA_SPINE)
    assert set(replica) == live and sum(replica.values()) == p4names.REPLICA_SLOTS
    assert max(replica.values()) - min(replica.values()) <= 1
    sl = plan(c, c.storage_leaf(0), buckets, live)
    assert {e.params_dict["port"] for e in sl.entries if e.table == p4names.TRANSIT_SPINE} == {
        p for p, name in c.ports(c.storage_leaf(0).name).items() if name in (spines[0].name, spines[2].name)
    }


@pytest.mark.parametrize("mech", list(Mechanism))
def test_a_client_leaf_never_targets_a_cache_out_of_service(mech: Mechanism) -> None:
    """Shims stop invalidating a spine once it is out of service, so no read may be sent to its cache -- not even
    with every spine out (a fault matrix run served stale values when both spines were failed and the replica
    slots fell back to naming them)."""
    c = Cluster(spines=3, storage_racks=2, client_racks=1, mechanism=mech)
    ids = [c.spine(i).switch_id for i in range(3)]
    hot = [digest("hot-a")]
    for r in range(len(ids) + 1):
        for live in map(set, itertools.combinations(ids, r)):
            cl = plan(c, c.client_leaf(0), spine_buckets(ids, live), live, replicated=hot)
            named = {
                e.params_dict[p]
                for e in cl.entries
                if e.table in (p4names.REPLICA_SPINE, p4names.SPINE_PARTITION)
                for p in ("spine_id", "alt_spine_id")
                if p in e.params_dict
            } - {0}
            assert named <= live, (mech, live, named)
            replica = [e for e in cl.entries if e.table == p4names.REPLICA_SPINE]
            assert len(replica) == (p4names.REPLICA_SLOTS if live else 0), (mech, live)
            transit = {e.params_dict["spine_id"] for e in cl.entries if e.table == p4names.TRANSIT_SPINE}
            assert transit == (live or set(ids)), (mech, live)  # paths, not caches: with none in service, all
            # and every spine out of service is fenced at once, by the one default write (liveness.p4)
            (cfg,) = [e for e in cl.defaults if e.table == p4names.LIVENESS_CONFIG]
            fenced = {s for s in range(p4names.LIVENESS_SPINES) if cfg.params_dict["fenced"] >> s & 1}
            assert fenced == set(ids) - live, (mech, live, fenced)


def test_mechanisms_decide_designated_caches_and_replicated_keys() -> None:
    hot = [digest("hot-a"), digest("hot-b")]
    for mech, leaf_caches, spine_buckets_of_sp0 in (
        (Mechanism.DISTCACHE, True, "own"),
        (Mechanism.PARTITION, True, "own"),
        (Mechanism.REPLICATION, True, "all"),
        (Mechanism.HYBRID, True, "own"),
        (Mechanism.NOCACHE, False, "none"),
    ):
        c = Cluster(spines=2, storage_racks=2, mechanism=mech)
        buckets = spine_buckets([1, 2])
        sl = plan(c, c.storage_leaf(0), buckets)
        assert any(e.table == p4names.HH_RACKS for e in sl.entries) == leaf_caches, mech
        mine = {
            e.match_dict[p4names.KEY_BUCKET]
            for e in plan(c, c.spine(0), buckets).entries
            if e.table == p4names.HH_BUCKETS
        }
        want = {"own": {b for b, s in enumerate(buckets) if s == 1}, "all": set(range(N_SPINE_BUCKETS)), "none": set()}[
            spine_buckets_of_sp0
        ]
        assert mine == want, mech
        cl = plan(c, c.client_leaf(0), buckets, replicated=hot)
        assert {e.match_dict[p4names.KEY_DC_KEY] for e in cl.entries if e.table == p4names.REPLICATED_KEYS} == {
            int.from_bytes(k, "big") for k in hot
        }


def test_cluster_json_round_trip_and_errors() -> None:
    c = Cluster(spines=4, storage_racks=3, servers_per_rack=2, client_racks=2)
    assert Cluster.from_json(c.to_json()) == c
    with pytest.raises(ValueError, match="unknown mechanism"):
        Cluster.from_json('{"mechanism": "magic"}')
    with pytest.raises(ValueError):
        Cluster(spines=0)
    # every link's ends agree with both switches' port maps
    for ln in c.links():
        if ln.a.startswith(("sl", "cl")):
            assert c.ports(ln.a)[ln.a_port] == ln.b
        assert c.ports(ln.b)[ln.b_port] == ln.a


def test_versions_never_repeat_within_an_epoch_in_any_slot() -> None:
    """No two entries of a switch share a tag within an epoch, in the same slot or another.

    The same slot: its valid register may still hold the previous entry's tag.  Another slot: a
    delayed populate of an evicted entry would arm the key's next entry there if it had the same
    version (the model's spec-populate-slot).  A wrapping counter, or one per slot, breaks this.
    """
    from agent.slots import SlotAllocator, VersionsExhaustedError

    alloc = SlotAllocator(2)
    seen: set[int] = set()

    def take() -> int:
        slot, version = alloc.take()
        assert 1 <= version <= 0xFFFF
        assert version not in seen, f"version {version} handed out twice in one epoch (slot {slot})"
        seen.add(version)
        return slot

    held = take()
    for _ in range(0xFFFF - 2):
        alloc.give_back(take())  # the other slot churns through the tags
    alloc.give_back(held)
    take()  # the last version of the epoch
    with pytest.raises(VersionsExhaustedError):
        take()
    assert len(seen) == 0xFFFF
    alloc.new_epoch()  # a new epoch: every tag changed, the versions start again
    assert alloc.take()[1] == 1


def test_shipped_topologies_load_and_describe_themselves() -> None:
    from pathlib import Path

    files = sorted((Path(__file__).resolve().parents[2] / "topologies").glob("*.json"))
    assert len(files) >= 3
    for f in files:
        c = Cluster.load(f)
        assert c.description, f"{f.name} says nothing about itself"
        assert Cluster.from_json(c.to_json()) == c
    with pytest.raises(ValueError, match=r"unknown cluster field\(s\) \['spine'\]"):
        Cluster.from_json('{"spine": 2}')


def test_layers_are_independent_joint_distribution() -> None:
    """The spine a key's h0 bucket maps to and the rack h1 places it in are independent:
    a chi-square test of independence over their joint distribution (4 spines x 4 racks)."""
    from scipy.stats import chi2_contingency

    owner = spine_buckets([1, 2, 3, 4])
    servers = Cluster(storage_racks=4).server_names()
    table = np.zeros((4, 4))
    for i in range(40_000):
        k = digest(f"user:{i}")
        table[owner[h0(k)] - 1, h1(k, servers)] += 1
    _, p, _, _ = chi2_contingency(table)
    assert p > 1e-3, f"spine and rack look dependent (p={p:.2g}):\n{table}"


@pytest.mark.parametrize(("racks", "per_rack"), [(1, 1), (2, 2), (4, 3), (8, 4)])
def test_adding_a_server_moves_only_the_keys_it_wins(racks: int, per_rack: int) -> None:
    """Rendezvous placement: a server added to a rack takes about 1/n of the keys, every one of them from
    another server to itself; no key moves between the servers that were there before."""
    before = Cluster(storage_racks=racks, servers_per_rack=per_rack)
    after = Cluster(storage_racks=racks, servers_per_rack=per_rack + 1)
    keys = [digest(f"user:{i}") for i in range(6000)]
    moved = [(before.server_for_key(k).name, after.server_for_key(k).name) for k in keys]
    added = set(after.server_names()) - set(before.server_names())
    changed = [(a, b) for a, b in moved if a != b]
    assert all(b in added for _, b in changed), "a key moved between two servers that were there before"
    n = len(after.server_names())
    assert abs(len(changed) / len(keys) - len(added) / n) < 0.03, (len(changed), len(added), n)
    assert Counter(b for _, b in moved).keys() == set(after.server_names())  # every server owns some keys


def test_server_names_must_fit_a_blake2b_key() -> None:
    from distcache.hashing import server_score

    with pytest.raises(ValueError, match="1-64 bytes"):
        server_score(digest("k"), "x" * 65)
    with pytest.raises(ValueError, match="no storage servers"):
        h1(digest("k"), ())


@pytest.mark.parametrize("m", [2, 4, 8, 32])
def test_removing_one_of_m_spines_moves_about_one_mth_of_the_buckets(m: int) -> None:
    ids = list(range(1, m + 1))
    before = spine_buckets(ids)
    for failed in ids:
        after = spine_buckets(ids, alive=set(ids) - {failed})
        moved = [b for b in range(N_SPINE_BUCKETS) if before[b] != after[b]]
        assert all(before[b] == failed for b in moved)  # only the failed spine's buckets move
        assert len(moved) == before.count(failed)  # ... and all of them
        assert abs(len(moved) / N_SPINE_BUCKETS - 1 / m) < 0.6 / m  # about 1/m of them
        assert spine_buckets(ids, alive=set(ids)) == before  # recovery moves them back


def test_hybrid_replicates_keys_over_the_rate_with_hysteresis() -> None:
    from controller import hybrid

    rates = {b"a": 100.0, b"b": 40.0, b"c": 26.0, b"d": 5.0}
    assert hybrid.choose(rates, (), rate=30.0, limit=8) == {b"a", b"b"}
    assert hybrid.choose(rates, {b"c", b"d"}, rate=30.0, limit=8) == {b"a", b"b", b"c"}  # c stays: over half
    assert hybrid.choose(rates, (), rate=30.0, limit=1) == {b"a"}  # the hottest first
    assert hybrid.choose(rates, (), rate=0.0, limit=8) == set()  # no rate: Hybrid replicates nothing
    assert hybrid.threshold(Cluster(switch_rate=100.0)) == 50.0
    assert hybrid.threshold(Cluster(switch_rate=100.0, hybrid_rate=7.0)) == 7.0
    assert hybrid.limit(Cluster(cache_slots=16)) == 8


def test_the_addressing_plan_has_one_home() -> None:
    """Every address and id comes from Cluster's plan: hosts in their rack's /24 behind its .254 gateway, the
    leaves' probes from that gateway, the spines' routes and source checks on the same prefixes."""
    c = Cluster(spines=2, storage_racks=3, servers_per_rack=2, client_racks=2, clients_per_rack=2)
    for h in c.hosts():
        leaf = c.switch(h.switch)
        assert ipaddress.ip_address(h.ip) in ipaddress.ip_network(c.rack_prefix(leaf))
        assert h.gateway == c.rack_gateway(leaf) == leaf_address(leaf)
        assert any(ipaddress.ip_address(h.ip) in net for net in DATA_NETS)
        assert c.rack_index(leaf) == h.rack
    assert c.switch_ids(Role.SPINE) == [1, 2] and c.switch_ids(Role.STORAGE_LEAF) == [64, 65, 66]
    assert c.switch_ids(Role.CLIENT_LEAF) == [128, 129]
    routes = {
        str(
            ipaddress.ip_network(
                (e.match_dict[p4names.KEY_IPV4_DST].value, e.match_dict[p4names.KEY_IPV4_DST].prefix_len)
            )
        )
        for e in plan(c, c.spine(0), spine_buckets(c.switch_ids(Role.SPINE))).entries
        if e.table == p4names.IPV4_LPM
    }
    assert routes == {c.rack_prefix(sw) for sw in c.switches() if sw.role != Role.SPINE}
    with pytest.raises(ValueError, match="not a leaf"):
        c.rack_index(c.spine(0))
