"""The fault matrix's at-risk pairs (dcnet.at_risk) and what a cell's result makes of them (dcnet.matrix_result)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from dcnet.at_risk import GRACE_NS, HORIZON_NS, Window, pairs, window
from dcnet.matrix_result import Cell, shortfalls, total_line

from distcache.cluster import Cluster
from loadgen.oracle import Finding, Read, Verdict
from tests.common.keys import digest

S = 1_000_000_000
SP0 = 1


def get(key: str, call: int, target: int = 0, served_by: int = 0) -> dict:
    return {"op": "get", "key": key, "value": "v", "call": call, "return": call + 1000, "target": target,
            "served_by": served_by}  # fmt: skip


def put(key: str, call: int, end: int | None = None, error: bool = False) -> dict:
    rec = {"op": "put", "key": key, "value": "v", "call": call, "return": end if end is not None else call + 1000}
    if error:
        rec["error"] = True
    return rec


def test_a_write_in_the_fault_to_a_key_the_switch_held_then_a_read_routed_there_is_one_pair() -> None:
    w = Window("spine_crash", frozenset({SP0}), 10 * S, 12 * S)
    held = get("k", 9 * S, SP0, SP0)  # a hit at sp0 just before the fault: sp0 held k valid
    history = [held, put("k", 11 * S), get("k", 13 * S, target=SP0), get("k", 14 * S, target=SP0)]
    assert pairs(history, [w]) == Counter(spine_crash=1)  # one write, counted once however many reads test it
    # two writes, two pairs
    assert pairs([*history, put("k", 11 * S + 10)], [w]) == Counter(spine_crash=2)
    # a hit at sp0 after the write tests it too (target of a hit is sp0's own)
    assert pairs([held, put("k", 11 * S), get("k", 13 * S, 0, SP0)], [w]) == Counter(spine_crash=1)


def test_nothing_is_at_risk_without_a_cached_copy_a_write_in_the_window_or_a_read_routed_there() -> None:
    w = Window("spine_crash", frozenset({SP0}), 10 * S, 12 * S)
    later = get("k", 13 * S, target=SP0)
    assert pairs([get("k", 9 * S, SP0, 0), put("k", 11 * S), later], [w]) == Counter()  # sp0 never answered k
    assert pairs([get("k", 8 * S, SP0, SP0), put("k", 11 * S), later], [w]) == Counter()  # held too long before
    held = get("k", 9 * S, SP0, SP0)
    assert pairs([held, put("k", 9 * S + 5), later], [w]) == Counter()  # the write came before the fault
    assert pairs([held, put("k", 12 * S + GRACE_NS + 1), later], [w]) == Counter()  # and long after it
    assert pairs([held, put("k", 11 * S), get("k", 13 * S, target=2)], [w]) == Counter()  # read went elsewhere
    assert pairs([held, put("k", 11 * S), get("k", 12 * S + HORIZON_NS + 1, SP0)], [w]) == Counter()  # too late
    assert pairs([held, put("k", 11 * S, error=True), later], [w]) == Counter()  # ERROR: nothing was written
    assert pairs([held, put("k", 11 * S, end=13 * S + 5), later], [w]) == Counter()  # the read overlapped it


def test_a_storage_fault_concerns_its_servers_keys_at_every_cache_switch() -> None:
    cluster = Cluster(spines=2, storage_racks=2, client_racks=1)
    server = cluster.servers()[0].name
    mine = next(f"k{i}" for i in range(100) if cluster.server_for_key(digest(f"k{i}")).name == server)
    other = next(f"k{i}" for i in range(100) if cluster.server_for_key(digest(f"k{i}")).name != server)
    w = window(cluster, "shim_restart", server, 10 * S, 12 * S)
    leaf = cluster.storage_leaf(0).switch_id
    history = []
    for key in (mine, other):
        history += [get(key, 9 * S, leaf, leaf), put(key, 11 * S), get(key, 13 * S, target=leaf)]
    assert pairs(history, [w]) == Counter(shim_restart=1)
    spine = window(cluster, "spine_crash", cluster.spine(1).name, 10 * S, 12 * S)
    assert spine.switches == {cluster.spine(1).switch_id} and spine.keys is None
    assert window(cluster, "fabric_dp_dead", "", 0, 1).switches == {cluster.spine(i).switch_id for i in range(2)}


def test_a_cell_fails_on_a_stale_read_and_on_too_few_pairs_at_risk(tmp_path: Path) -> None:
    ok = Cell("distcache", ops=10, at_risk=Counter(spine_crash=25))
    assert not [p for p in shortfalls(ok, tmp_path, 0, 0, 0.0, 20) if "at risk" in p or "oracle" in p]
    few = Cell("distcache", ops=10, at_risk=Counter(spine_crash=19))
    assert any("19 write-read pairs at risk" in p for p in shortfalls(few, tmp_path, 0, 0, 0.0, 20))
    assert any("0 write-read pairs at risk" in p for p in shortfalls(Cell("nocache", ops=10), tmp_path, 0, 0, 0.0, 20))
    stale = Verdict(reads=5)
    stale.add(Finding("stale", Read("k", "v1", 1, 2, 3), "superseded"))
    bad = Cell("distcache", ops=10, at_risk=Counter(spine_crash=25), oracle=stale)
    assert any("the oracle found stale=1 wrong=0" in p for p in shortfalls(bad, tmp_path, 0, 0, 0.0, 20))
    assert " stale=1 wrong=0 " in bad.line and " at_risk=25 " in bad.line
    assert bad.at_risk_line.startswith("at_risk mechanism=distcache spine_crash=25 ")
    assert total_line([ok, bad]).endswith("stale=1 wrong=0 faults=0 at_risk=50")


def test_a_leafs_faults_concern_that_leaf_and_a_client_leafs_every_cache() -> None:
    """Issue 44: a storage leaf's crash, drain or pause concerns its own cache; a client leaf caches nothing,
    so its faults concern every cache its reads reach; a shim's clock stepped back, that server's keys."""
    cluster = Cluster(spines=2, storage_racks=2, client_racks=2)
    sl1, cl0 = cluster.storage_leaf(1), next(s for s in cluster.switches() if s.name == "cl0")
    caches = {s.switch_id for s in cluster.switches() if s.role.name != "CLIENT_LEAF"}
    for kind in ("storage_leaf_crash", "leaf_keep_running", "leaf_pause"):
        assert window(cluster, kind, sl1.name, 0, 1).switches == {sl1.switch_id}
    for kind in ("client_leaf_crash", "leaf_keep_running", "leaf_pause", "write_flood"):
        assert window(cluster, kind, cl0.name if kind != "write_flood" else "", 0, 1).switches == caches
    for kind in ("spine_pause", "spine_keep_running"):
        assert window(cluster, kind, "sp1", 0, 1).switches == {cluster.spine(1).switch_id}
    server = cluster.server(1, 0)
    mine = next(f"k{i}" for i in range(100) if cluster.server_for_key(digest(f"k{i}")) == server)
    other = next(f"k{i}" for i in range(100) if cluster.server_for_key(digest(f"k{i}")) != server)
    for kind in ("shim_clock_back", "shim_dedup_full"):  # issue 45: a shim refusing writes BUSY, its server's keys
        w = window(cluster, kind, server.name, 0, 1)
        assert w.switches == caches and w.keys is not None
        assert w.keys(mine) and not w.keys(other)
