"""The fault matrix's schedules (mininet/dcnet/fault_schedule.py): what ``make linearizability`` draws and counts.

Issue 16: a spine's data plane that dies while its P4Runtime server answers is a fault kind of its own
(``spine_dp_dead``), drawn per spine with a length either side of the controller's 0.5 s detection, so
that some deaths are only routed around by the leaves and others are failed over and recovered; it is
listed in every cell's summary line and held to the same minimum of effects as every other kind.
``fabric_dp_dead`` kills every spine's data plane at once, past the detection: no spine is left in service
(a run served stale values there: the replica slots fell back to naming the failed spines).
"""

from __future__ import annotations

import pytest
from dcnet.fault_schedule import DP_DEAD_S, FABRIC_DP_DEAD_S, KINDS, LANES, PROCESS_KINDS, Tally, draw
from dcnet.matrix_result import Cell, kinds_for

SPINES = ["sp0", "sp1"]
LEAVES = ["sl0", "sl1", "cl0", "cl1"]


def _draw(seed: int, kinds: tuple[str, ...] = PROCESS_KINDS, per_kind: int = 3, duration: float = 60.0):  # noqa: ANN202
    return draw(
        seed,
        duration,
        spines=SPINES,
        cache_switches=["sp0", "sp1", "sl0", "sl1"],
        servers=["s0", "s1"],
        leaves=LEAVES,
        mechanism="distcache",
        per_kind=per_kind,
        kinds=kinds,
    )


def test_a_data_plane_death_is_drawn_per_spine_with_a_length_either_side_of_the_controllers_detection() -> None:
    sched = _draw(11, kinds=("spine_dp_dead",), per_kind=60)
    deaths = sched.faults
    assert len(deaths) == 60 and {f.kind for f in deaths} == {"spine_dp_dead"}
    assert {f.target for f in deaths} == set(SPINES)
    holds = [f.hold for f in deaths]
    assert all(DP_DEAD_S[0] <= h <= DP_DEAD_S[1] for h in holds) and DP_DEAD_S == (0.1, 2.0)
    # some end before the controller's 0.5 s of unanswered probes (routed around only), most after (failover)
    assert any(h < 0.45 for h in holds) and any(h > 0.7 for h in holds)
    assert all(0.05 * 60 <= f.at <= 0.80 * 60 for f in deaths)
    # it stops a spine: it runs in the fabric lane, one after another with crashes and operator failovers
    assert LANES["spine_dp_dead"] == "fabric" and sched.lanes == ["fabric"]
    # the same seed, the same schedule (replayable), lengths included
    assert _draw(11, kinds=("spine_dp_dead",), per_kind=60).faults == deaths


def test_every_other_kind_has_no_length_and_keeps_its_schedule_under_a_seed() -> None:
    """New kinds are drawn last: a seed replays the other kinds' faults exactly as before they existed."""
    full = _draw(5)
    for kind in PROCESS_KINDS:
        assert sum(f.kind == kind for f in full.faults) == 3
    for i in range(len(PROCESS_KINDS)):
        before = PROCESS_KINDS[:i]
        assert [f for f in full.faults if f.kind in before] == _draw(5, kinds=before).faults
    first = PROCESS_KINDS[: PROCESS_KINDS.index("spine_dp_dead")]
    assert all(f.hold == 0.0 for f in _draw(5, kinds=first).faults)


def test_every_spine_dies_at_once_past_the_controllers_detection() -> None:
    sched = _draw(13, kinds=("fabric_dp_dead",), per_kind=40)
    assert len(sched.faults) == 40 and {f.target for f in sched.faults} == {""}
    assert FABRIC_DP_DEAD_S[0] > 0.5 + 0.2  # past 0.5 s of unanswered probes and a check's lag: all failed over
    assert all(FABRIC_DP_DEAD_S[0] <= f.hold <= FABRIC_DP_DEAD_S[1] for f in sched.faults)
    assert LANES["fabric_dp_dead"] == "fabric" and sched.lanes == ["fabric"]


def test_the_summary_line_and_the_minimum_of_effects_count_data_plane_deaths() -> None:
    assert "spine_dp_dead" in KINDS
    for mechanism in ("nocache", "partition", "replication", "distcache", "hybrid"):
        assert "spine_dp_dead" in kinds_for(mechanism)
    tally = Tally()
    tally.took_effect("spine_dp_dead", "sp1's data plane dead for 1.20 s (0 DistCache packets dropped)", 0)
    assert tally.effects["spine_dp_dead"] == 0 and tally.log == []  # nothing dropped: no effect
    assert "spine_dp_dead" in tally.short_of(1)
    tally.took_effect("spine_dp_dead", "sp1's data plane dead for 1.20 s (84 DistCache packets dropped)")
    assert "spine_dp_dead" not in tally.short_of(1) and "spine_dp_dead" in tally.short_of(2)
    cell = Cell("distcache", ops=10, tally=tally)
    assert " spine_dp_dead=1 fabric_dp_dead=0 " in cell.line and " hot_shift=0 " in cell.line


@pytest.mark.parametrize("per_kind", [0, 1, 4])
def test_a_schedule_has_per_kind_faults_of_every_process_kind(per_kind: int) -> None:
    sched = _draw(3, per_kind=per_kind)
    assert len(sched.faults) == per_kind * len(PROCESS_KINDS)
    assert all(sum(f.kind == k for f in sched.faults) == per_kind for k in PROCESS_KINDS)
    assert [f.at for f in sched.faults] == sorted(f.at for f in sched.faults)


def test_every_switch_role_pauses_and_drains_and_each_leaf_kind_targets_leaves() -> None:
    """Issue 44: storage and client leaves crash, any leaf is drained (``fail --keep-running``) or paused
    (SIGSTOP for PAUSE_S, either side of the controller's detection), spines too; a shim restarts under a clock
    stepped back; another client floods the servers with writes."""
    from dcnet.fault_schedule import DRAIN_S, PAUSE_S

    kinds = ("storage_leaf_crash", "client_leaf_crash", "leaf_keep_running", "leaf_pause", "spine_pause",
             "spine_keep_running", "shim_clock_back", "write_flood")  # fmt: skip
    sched = _draw(17, kinds=kinds, per_kind=40)
    by = {k: [f for f in sched.faults if f.kind == k] for k in kinds}
    assert {f.target for f in by["storage_leaf_crash"]} == {"sl0", "sl1"}
    assert {f.target for f in by["client_leaf_crash"]} == {"cl0", "cl1"}
    assert {f.target for f in by["leaf_pause"]} == set(LEAVES) == {f.target for f in by["leaf_keep_running"]}
    assert {f.target for f in by["spine_pause"]} == set(SPINES) == {f.target for f in by["spine_keep_running"]}
    assert {f.target for f in by["shim_clock_back"]} == {"s0", "s1"} and {f.target for f in by["write_flood"]} == {""}
    for k in ("leaf_pause", "spine_pause"):
        holds = [f.hold for f in by[k]]
        assert all(PAUSE_S[0] <= h <= PAUSE_S[1] for h in holds) and PAUSE_S == (0.5, 5.0)
        assert any(h < 0.5 for h in holds) is False and any(h > 1.0 for h in holds)
    assert all(DRAIN_S[0] <= f.hold <= DRAIN_S[1] for f in by["leaf_keep_running"] + by["spine_keep_running"])
    assert all(f.hold == 0.0 for k in ("storage_leaf_crash", "client_leaf_crash", "write_flood") for f in by[k])
    # a spine's pause and drain stop a spine: the fabric lane; the leaves' faults have a lane of their own
    assert {LANES[k] for k in ("spine_pause", "spine_keep_running")} == {"fabric"}
    assert {LANES[k] for k in ("storage_leaf_crash", "client_leaf_crash", "leaf_keep_running", "leaf_pause")} == {
        "leaves"
    }


def test_a_shims_dedup_table_fills_for_a_drawn_length_on_one_server() -> None:
    """Issue 45: a shim whose dedup table is at its bound (refusing writes BUSY) for DEDUP_FULL_S, in the storage
    lane, on a storage server; drawn after every earlier kind, so their times under a seed stay as they were."""
    from dcnet.fault_schedule import DEDUP_FULL_S, SHIM_KINDS

    sched = _draw(5, kinds=("shim_dedup_full",), per_kind=40)
    assert {f.target for f in sched.faults} == {"s0", "s1"} and LANES["shim_dedup_full"] == "storage"
    assert all(DEDUP_FULL_S[0] <= f.hold <= DEDUP_FULL_S[1] for f in sched.faults)
    assert "shim_dedup_full" in SHIM_KINDS and PROCESS_KINDS[-2] == "shim_dedup_full"


def test_a_gateway_is_killed_on_a_client_host_in_a_lane_of_its_own() -> None:
    """Issue 47: a client host's gateway killed and started again, drawn last (the earlier kinds' times under a
    seed stay as they were), in its own lane: it overlaps every other fault."""
    sched = draw(9, 60.0, spines=["sp0"], cache_switches=["sp0"], servers=["s0"], clients=["c0h0", "c1h0"],
                 mechanism="distcache", per_kind=30, kinds=("gateway_restart",))  # fmt: skip
    assert {f.target for f in sched.faults} == {"c0h0", "c1h0"} and LANES["gateway_restart"] == "gateways"
    assert PROCESS_KINDS[-1] == "gateway_restart" and all(f.hold == 0 for f in sched.faults)
