"""What a model configuration is: the model's invariants, fault budgets, seeded bugs and fixes, by name.

A configuration (:class:`Config`) is model/distcache.m with some constants changed; the tables of
them are in :mod:`model.suites`.  The names here are the model's own (tests/unit/test_model.py holds
them to the constants distcache.m declares), so a suite cannot leave one out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

#: The invariants (names the model's invariant and assertion messages start with).
INVARIANTS = (
    "OtherKey",
    "ErrorValue",
    "Uncommitted",
    "StaleAfterAck",
    "StaleAfterRead",
    "Holders",
    "DoubleAck",
    "DoubleApply",
)

FAULTS = (
    "B_LOSS",
    "B_DUP",
    "B_SHIM",
    "B_AGENT",
    "B_CTRL",
    "B_CRASH",
    "B_FAIL",
    "B_MECH",
    "B_DPDEAD",
    "B_LEAF",
    "B_CLDIE",
)
BUGS = (
    "BUG_ACK_BEFORE_P1",
    "BUG_DEAD_SPINE_DONE",
    "BUG_NO_EPOCH_BUMP",
    "BUG_ANY_INV_ARMS",
    "BUG_SHIM_TRUSTS_VIEW",
    "BUG_DP_NO_FLUSH",
    "BUG_REJOIN_DOWN",
    "BUG_LEAF_DOWN",
    "BUG_DP_FROM_PROCESS",
    "BUG_BUSY_FORGETS",
    "BUG_TTL_CACHED",
)
#: The changes the model showed the protocol as specified needs (model/README.md, "Findings").
FIXES = (
    "FIX_UNARMED_FLOOR",
    "FIX_CLAIM_VERSIONS",
    "FIX_VIEW_INCARNATION",
    "FIX_ERROR_MARKER",
    "FIX_DOWNSET_FIRST",
    "FIX_EPOCH_CLOCK",
    "FIX_POPULATE_SLOT",
)

Consts = dict[str, object]


@dataclass(frozen=True)
class Config:
    """One model configuration: constant overrides and the result it must give."""

    name: str
    consts: Consts
    expect: str = "ok"  # "ok", or the invariant its counterexample must break
    doc: str = ""


NO_FAULTS: Consts = {b: 0 for b in (*FAULTS, "B_BUSY", "B_EXP", "B_VIEW", "B_REPOP")}
ALL_FIXES: Consts = {f: True for f in FIXES}


def without_bug(cfg: Config) -> Config:
    """The same bounds with the seeded bug (or the missing fix) put right: it must hold."""
    return replace(
        cfg, name=cfg.name + "-fixed", expect="ok", consts={**cfg.consts, **{b: False for b in BUGS}, **ALL_FIXES}
    )
