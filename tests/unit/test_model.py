"""The coherence protocol's model (model/distcache.m), checked exhaustively by Rumur.

The protocol must hold in a small configuration (every reachable state, with the faults of that
configuration), and each seeded bug must give a counterexample that breaks the invariant the bug
is about: a model that never fails proves nothing.  ``make verify`` checks the larger
configurations (model/run.py --suite verify).  The verifiers are built with -O1 or -O0 (quicker to
compile; _opt) and cached under build/model/; make test builds them ahead in the background (build_ahead).
"""

from __future__ import annotations

import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from model import config, render, report, suites, verifier

needs_rumur = pytest.mark.skipif(
    shutil.which("rumur") is None or shutil.which("cc") is None,
    reason="needs rumur and cc (make deps installs Debian's rumur and gcc)",
)

TEST_CONFIGS = {c.name: c for c in suites.suite("test")}
FINDINGS = {c.name: c for c in suites.suite("findings")}


def _opt(cfg: config.Config) -> str:
    """-O1 for a configuration that must hold (up to a quarter of a million states, all searched); -O0 for one
    that must break: its search stops at the first counterexample, within a second, and -O0 builds in ~10 s
    where -O1 took ~16."""
    return "-O1" if cfg.expect == "ok" else "-O0"


def _check(cfg: config.Config) -> verifier.Result:
    return verifier.check(cfg, threads=1, timeout=240, opt=_opt(cfg))


def checked() -> list[config.Config]:
    """Every configuration this module checks (the bug configurations with and without their bug)."""
    cfgs = [*TEST_CONFIGS.values(), FINDINGS["spec-populate-slot"]]
    return cfgs + [config.without_bug(c) for c in cfgs if c.expect != "ok"]


def build_ahead(workers: int = 2) -> None:
    """Build every verifier this module runs, ``workers`` at a time.  make test starts this in the background
    at idle priority when the session begins (tests/conftest.py) and runs this module last: the ~4 minutes of
    compiling fill the CPU the Mininet scenarios leave idle, and each test finds its verifier built (or builds
    it itself, if the background has not got to it yet)."""
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda c: verifier.build(c, 1, _opt(c)), checked()))


def _covers(cfg: config.Config) -> set[str]:
    return set(re.findall(r'^\s*cover "([^"]+)"', render.render(cfg), re.M))


def test_the_model_is_the_protocol_with_every_fix_and_no_bug() -> None:
    """docs/protocol.md specifies the protocol with every fix the model found: the model's own constants
    say so, and run.py knows every fix and bug constant the model has (so none is left out of a suite)."""
    consts = render.effective(config.Config("defaults", {}))
    model_fixes = {k for k in consts if k.startswith("FIX_")}
    model_bugs = {k for k in consts if k.startswith("BUG_")}
    assert model_fixes == set(config.FIXES) and model_bugs == set(config.BUGS)
    assert all(consts[f] == 1 for f in config.FIXES), {f: consts[f] for f in config.FIXES}
    assert all(consts[b] == 0 for b in config.BUGS), {b: consts[b] for b in config.BUGS}
    # every fix but one has a configuration without it that must give a counterexample
    off = {f for c in FINDINGS.values() for f in config.FIXES if not c.consts[f]}
    assert off == set(config.FIXES) - {"FIX_DOWNSET_FIRST"}


def test_a_cover_is_demanded_only_where_the_fault_budget_reaches_it() -> None:
    """A retried write answered from its Redis marker needs a shim restart and a duplicate: two faults.
    With one fault in all it is unreachable and must not be demanded; with two it must be."""
    small = TEST_CONFIGS["small"]
    marker = "a retried write was answered from its Redis marker"
    every = "every fault kind happened in one trace"
    assert small.consts["B_FAULTS"] == 1
    assert marker not in _covers(small)
    two = replace(small, consts={**small.consts, "B_FAULTS": 2})
    assert marker in _covers(two) and every not in _covers(two)
    ten = replace(small, consts={**small.consts, "B_FAULTS": 10})
    # eleven kinds: loss ... mechanism change, a data-plane death, a failed storage leaf, a dead kernel client leaf
    assert every not in _covers(ten)
    eleven = replace(small, consts={**small.consts, "B_FAULTS": 11})
    assert every in _covers(eleven)
    # a configuration that must give a counterexample demands no cover at all
    assert _covers(TEST_CONFIGS["bug-ack-before-p1"]) == set()


@needs_rumur
def test_protocol_holds_in_the_small_configuration() -> None:
    res = _check(TEST_CONFIGS["small"])
    assert res.result == "ok", res.line() + "\n" + res.message + "\n" + report.brief_trace(res.trace)
    # not vacuous: the state space is real, and every cover of the configuration was reached
    assert res.states > 100_000
    assert res.covers_missed == []
    assert res.covers["two writes of one key overlap"] > 0 and res.covers["fault: shim restart"] > 0
    # a data plane dies: in some traces the controller fails the spine over for it, in others the spine
    # forwards again first and serves the copies it kept, with no flush in between
    assert res.covers["fault: a data-plane death happens"] > 0
    assert res.covers["the controller failed a spine over for its dead data plane"] > 0
    assert res.covers["a spine serves its copies again: its data plane revived before a failover"] > 0


@needs_rumur
@pytest.mark.parametrize("name", [n for n, c in TEST_CONFIGS.items() if c.expect != "ok"])
def test_seeded_bug_gives_a_counterexample(name: str) -> None:
    cfg = TEST_CONFIGS[name]
    res = _check(cfg)
    assert res.result == "violation", res.line()
    assert res.invariant == cfg.expect, f"{name}: broke {res.invariant!r}, expected {cfg.expect!r}: {res.message}"
    steps = report.brief_trace(res.trace).splitlines()
    assert steps[0].startswith("broken: ") and steps[1] == "start" and len(steps) > 3, res.trace[:2000]


@needs_rumur
def test_the_same_configurations_hold_without_the_seeded_bug() -> None:
    """Each bug configuration with the bug switched off holds: the counterexample is the bug's."""
    for name, cfg in TEST_CONFIGS.items():
        if cfg.expect == "ok":
            continue
        res = _check(config.without_bug(cfg))
        assert res.result == "ok", f"{name} without its bug: " + res.line() + " " + res.message


def _breaks_and_holds_without_its_bug(cfg: config.Config, invariant: str) -> tuple[str, verifier.Result]:
    """``cfg`` breaks ``invariant`` and holds, same bounds, without its bug or with its fix: the counterexample's
    steps (report.brief_trace) and the result without the bug."""
    res = _check(cfg)
    assert res.result == "violation" and res.invariant == invariant, res.line()
    fixed = _check(config.without_bug(cfg))
    assert fixed.result == "ok", fixed.line()
    return report.brief_trace(res.trace), fixed


@needs_rumur
def test_a_populate_arms_only_the_slot_it_was_asked_for() -> None:
    """Versions count per slot, so after an eviction the key's next entry in another slot can get the
    evicted entry's tag; a delayed copy of the old populate must not arm it (FIX_POPULATE_SLOT)."""
    steps, _ = _breaks_and_holds_without_its_bug(FINDINGS["spec-populate-slot"], "StaleAfterAck")
    assert "agent evicts a key" in steps and "the network duplicates a packet" in steps


@needs_rumur
def test_a_spine_failed_for_its_dead_data_plane_is_flushed_before_it_serves_again() -> None:
    """Issue 16: a spine whose data plane died keeps its registers and its agent; while it is declared down,
    writes are acknowledged without it (it hears no invalidation), so skipping the recovery's flush because
    it never restarted (BUG_DP_NO_FLUSH) serves a copy older than an acknowledged write; with the flush
    the same bounds hold."""
    steps, _ = _breaks_and_holds_without_its_bug(TEST_CONFIGS["bug-dp-no-flush"], "StaleAfterAck")
    for step in (
        "a spine's data plane dies",
        "failover 1 (its data plane is dead)",
        "failover 2: the shims are told the spine is down",
        "recovery 3: client leaves send reads",
    ):
        assert step in steps, steps
    assert "spine process crashes" not in steps and "agent restarts" not in steps


@needs_rumur
def test_a_recovering_spine_warmed_before_its_routes_stays_up_in_every_push() -> None:
    """Issue 16: recover() warms a spine off the controller's lock, after the shims were told it is up and its
    cache was flushed, before reads are routed to it.  A down-set pushed meanwhile that names it down again
    (BUG_REJOIN_DOWN: controller/shims.py shim_down without ``_rejoining``) lets a write be acknowledged
    without invalidating the copy just warmed, which the spine serves once the routes lead to it; with every
    push keeping it up the same bounds hold, and the warm-up itself is in them (its cover is reached)."""
    steps, fixed = _breaks_and_holds_without_its_bug(TEST_CONFIGS["bug-rejoin-down"], "StaleAfterAck")
    for step in (
        "recovery 2: the spine's agent flushes its cache",
        "agent inserts a key",
        "controller pushes its partition and down-set to the shim",
        "recovery 3: client leaves send reads",
    ):
        assert step in steps, steps
    assert steps.index("recovery 2: the spine's agent flushes") < steps.index("agent inserts a key")
    assert fixed.covers.get("a recovering spine was warmed before reads were routed to it", 0) > 0, fixed.covers


@needs_rumur
def test_a_failed_storage_leaf_stays_among_every_keys_holders() -> None:
    """Issue 44: a failed storage leaf (kept running, paused past its probes and resumed, a kernel leaf whose
    process died) still answers reads from its cache.  Put in the shims' down-set (BUG_LEAF_DOWN: every failed
    non-spine switch was, before), it is dropped from its keys' holders while it holds a valid copy, and a
    write of a key only it holds would be acknowledged with no INVALIDATE; kept among them, the same bounds
    hold, recovered with a flush and without."""
    steps, fixed = _breaks_and_holds_without_its_bug(TEST_CONFIGS["bug-leaf-down"], "Holders")
    assert "controller fails the storage leaf" in steps, steps
    for cover in ("the storage leaf was recovered with a flush", "the storage leaf was recovered without a flush"):
        assert fixed.covers.get(cover, 0) > 0, fixed.covers


@needs_rumur
def test_a_dead_kernel_client_leaf_counts_as_routing_until_fenced() -> None:
    """Issue 44: a kernel client leaf's programs outlive its process and go on routing reads by their old
    routes.  Taking the dead process for a data plane that routes nothing (BUG_DP_FROM_PROCESS: the controller's
    process check) lets the shims stop invalidating a failed spine those programs still send reads to; counted
    as routing until the controller takes its data plane down, the same bounds hold."""
    steps, _ = _breaks_and_holds_without_its_bug(TEST_CONFIGS["bug-dp-from-process"], "StaleAfterAck")
    for step in (
        "a kernel client leaf's process dies",
        "failover 1: client leaves stop sending reads",
        "failover 2: the shims are told the spine is down",
    ):
        assert step in steps, steps
    assert "the controller takes the dead client leaf's data plane down" not in steps
