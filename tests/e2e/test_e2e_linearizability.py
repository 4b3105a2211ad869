"""Linearizability of the running system under faults, checked with porcupine (tools/lincheck), in Mininet.

A short seeded cell of ``make linearizability``'s matrix on each target: DistCache with one
fault of every kind (packet loss, bursts, duplicates and reordering by the eBPF injector,
spine crashes, operator failovers, controller crashes also mid-failover, a spine's data plane
dead while its P4Runtime server answers, agent, shim and Redis restarts with and without state,
mechanism changes, a hot-set shift; and, issue 44, storage- and client-leaf crashes, drains of leaves
and spines (``fail --keep-running``), paused switch processes, a shim restarted under a clock stepped
back, a write flood) must record no
violation, no stale or wrong read, and put at least 20 write-read pairs at risk.  That each check
catches a protocol broken on purpose is tests/e2e/test_e2e_breaks.py's.
"""

from __future__ import annotations

import pytest
from dcnet.fault_schedule import PROCESS_KINDS
from dcnet.matrix_cell import run_cell
from dcnet.matrix_result import LINCHECK

from tests.e2e.targets import targets

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not LINCHECK.exists(), reason="build/lincheck missing: `make deps` builds it (needs Go)"),
    pytest.mark.timeout(600),
]

TARGETS = targets()


@pytest.mark.parametrize("target", TARGETS)
def test_a_seeded_cell_under_faults_is_linearizable_and_a_broken_protocol_is_caught(target: str, tmp_path) -> None:  # noqa: ANN001
    cell = run_cell("distcache", tmp_path, target, duration=35, clients=6, seed=7, per_kind=1)
    assert cell.violations == 0 and cell.unknown_keys == 0, f"see {cell.html}"
    assert cell.oracle.stale == cell.oracle.wrong == 0 and cell.oracle.reads > 100, cell.oracle.findings
    assert cell.at_risk.total() >= 20, cell.at_risk_line  # its faults met cached keys
    assert cell.ops > 500 and cell.reads > 100 and cell.cached_reads > 0
    for kind in ("loss", "duplicate", "reorder"):
        assert cell.tally.effects[kind] > 0, f"{kind} never took effect: {cell.tally.summary()}"
    # seed 7 kills sp0's data plane for 1.2 s; reads went on.  Whether the controller fails it over depends on
    # the leaves' lane: a client leaf paused or down meanwhile cannot report the death in time (the failover
    # of a dead data plane itself is tests/e2e/test_e2e_failover.py's)
    assert cell.tally.effects["spine_dp_dead"] == 1, f"{cell.tally.summary()}; not applied: {cell.tally.failed}"
    assert any(line.startswith("spine_dp_dead: sp0's data plane dead for 1.20 s") for line in cell.tally.log), (
        cell.tally.log
    )
    applied = [k for k in PROCESS_KINDS if cell.tally.effects[k]]
    assert len(applied) >= len(PROCESS_KINDS) - 1, f"faults not applied: {cell.tally.failed}"
