"""The controller's P4Runtime client against a softswitch running the DistCache pipeline."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from distcache import p4names
from distcache.cluster import Cluster
from distcache.partition import spine_buckets
from p4rt.client import P4RuntimeError, SwitchConnection
from p4rt.p4info import Match
from p4rt.plan import Entry, SwitchPlan, plan
from p4rt.reconcile import apply_plan
from softswitch.dataplane import PROGRAM, DistCachePipeline
from softswitch.switch import SoftSwitch

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def conn() -> Iterator[SwitchConnection]:
    sw = SoftSwitch(DistCachePipeline(), device_id=9, grpc_addr="127.0.0.1:0")
    sw.start()
    c = SwitchConnection(sw.server.address, 9, name="t")
    try:
        c.connect()
        c.set_pipeline(PROGRAM.p4info())
        yield c
    finally:
        c.close()
        sw.close()


def test_entries_round_trip_by_name(conn: SwitchConnection) -> None:
    conn.insert(
        p4names.IPV4_LPM,
        {p4names.KEY_IPV4_DST: Match(0x0A010000, prefix_len=24)},
        p4names.SET_NHOP,
        {"dmac": 0x020000000001, "port": 3},
    )
    conn.insert(p4names.CACHE_LOOKUP, {p4names.KEY_DC_KEY: 2**127 + 5}, p4names.CACHE_HIT, {"slot": 7, "version": 1})
    assert conn.read_table(p4names.IPV4_LPM) == [
        (
            {p4names.KEY_IPV4_DST: Match(0x0A010000, prefix_len=24)},
            p4names.SET_NHOP,
            {"dmac": 0x020000000001, "port": 3},
        )
    ]
    conn.modify(p4names.CACHE_LOOKUP, {p4names.KEY_DC_KEY: 2**127 + 5}, p4names.CACHE_HIT, {"slot": 8, "version": 2})
    assert conn.read_table(p4names.CACHE_LOOKUP)[0][2] == {"slot": 8, "version": 2}
    conn.delete(p4names.CACHE_LOOKUP, {p4names.KEY_DC_KEY: 2**127 + 5})
    assert conn.read_table(p4names.CACHE_LOOKUP) == []


def test_errors_carry_the_per_update_code(conn: SwitchConnection) -> None:
    conn.insert(p4names.PORT_KIND, {p4names.KEY_INGRESS_PORT: 1}, p4names.SET_PORT_KIND, {"kind": 2})
    with pytest.raises(P4RuntimeError) as e:
        conn.insert(p4names.PORT_KIND, {p4names.KEY_INGRESS_PORT: 1}, p4names.SET_PORT_KIND, {"kind": 2})
    assert e.value.code == "ALREADY_EXISTS" and "already exists" in str(e.value)
    with pytest.raises(P4RuntimeError) as e:
        conn.delete(p4names.PORT_KIND, {p4names.KEY_INGRESS_PORT: 2})
    assert e.value.code == "NOT_FOUND"
    with pytest.raises(P4RuntimeError, match="no table"):
        conn.insert("DcIngress.nope", {}, p4names.NO_ACTION)
    with pytest.raises(ValueError, match="does not fit"):
        conn.insert(p4names.PORT_KIND, {p4names.KEY_INGRESS_PORT: 1024}, p4names.SET_PORT_KIND, {"kind": 1})


def test_default_action_and_counters(conn: SwitchConnection) -> None:
    conn.set_default(p4names.SWITCH_CONFIG, p4names.SET_CONFIG, {"switch_id": 64, "role": 2, "mechanism": 1})
    cells = conn.read_counter(p4names.DC_DROPS)
    assert sorted(cells) == list(range(p4names.N_DROP_REASONS)) and all(v == (0, 0) for v in cells.values())
    assert conn.read_counter(p4names.CACHE_HITS, 5) == {5: (0, 0)}


def _plan() -> SwitchPlan:
    """Client leaf cl0's plan: 1,024 spine-partition entries among others."""
    cluster = Cluster()
    return plan(cluster, cluster.switch("cl0"), spine_buckets([cluster.spine(0).switch_id]))


def _partition(conn: SwitchConnection) -> dict[object, int]:
    return {
        m[p4names.KEY_BUCKET]: prm["spine_id"] for m, _, prm in conn.read_table(p4names.SPINE_PARTITION)
    }  # exact: ints


def test_a_plan_on_the_same_connection_writes_only_its_difference(conn: SwitchConnection) -> None:
    """The switch ends up holding each plan exactly, whether the previous one was read back or remembered."""
    first = _plan()
    assert apply_plan(conn, first) == len(first.entries)
    assert conn.applied is first
    assert apply_plan(conn, first) == 0  # nothing changed: nothing written
    moved = {e for e in first.entries if e.table == p4names.SPINE_PARTITION and dict(e.match)[p4names.KEY_BUCKET] < 3}
    changed = dataclasses.replace(
        first,
        entries=[
            dataclasses.replace(e, params=(("spine_id", 2),)) if e in moved else e
            for e in first.entries
            if e.table != p4names.PORT_KIND
        ],
    )
    kinds = sum(e.table == p4names.PORT_KIND for e in first.entries)
    assert apply_plan(conn, changed) == len(moved) + kinds  # 3 modified, the port kinds deleted
    assert conn.read_table(p4names.PORT_KIND) == []
    held = _partition(conn)
    assert len(held) == p4names.SPINE_BUCKETS
    assert {b: s for b, s in held.items() if s == 2} == {0: 2, 1: 2, 2: 2}


def test_a_failed_plan_makes_the_next_one_read_back(conn: SwitchConnection) -> None:
    """A plan that fails part-way leaves the connection knowing nothing: the next one reads the switch back
    (here, an entry written behind the plan's back is found stale and deleted)."""
    first = _plan()
    apply_plan(conn, first)
    conn.insert(p4names.PORT_KIND, {p4names.KEY_INGRESS_PORT: 200}, p4names.SET_PORT_KIND, {"kind": 1})  # in no plan
    broken = dataclasses.replace(first, defaults=[*first.defaults, Entry("DcIngress.nope", (), p4names.NO_ACTION)])
    with pytest.raises(P4RuntimeError):
        apply_plan(conn, broken)
    assert conn.applied is None
    assert apply_plan(conn, first) == 1  # the stray entry deleted
    assert {m[p4names.KEY_INGRESS_PORT] for m, _, _ in conn.read_table(p4names.PORT_KIND)} == {
        dict(e.match)[p4names.KEY_INGRESS_PORT] for e in first.entries if e.table == p4names.PORT_KIND
    }


def test_a_pipeline_pushed_again_makes_the_next_plan_read_back(conn: SwitchConnection) -> None:
    first = _plan()
    apply_plan(conn, first)
    conn.set_pipeline(PROGRAM.p4info())  # every table empty again
    assert conn.applied is None
    assert apply_plan(conn, first) == len(first.entries)
    assert len(_partition(conn)) == p4names.SPINE_BUCKETS
