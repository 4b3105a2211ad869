"""The configurations model/run.py checks, by suite: make test's, the findings', make verify's.

Each suite is a list of :class:`model.config.Config`; every fault is off and every fix on unless a
configuration says otherwise.  model/README.md lists what each one showed (states, seconds).
"""

from __future__ import annotations

from model.config import ALL_FIXES, FAULTS, NO_FAULTS, Config, Consts


def _c(name: str, doc: str, expect: str = "ok", fixes: Consts | None = None, **consts: object) -> Config:
    """A configuration: every fault off and every fix on unless it says otherwise."""
    return Config(name, {**NO_FAULTS, **ALL_FIXES, **(fixes or {}), **consts}, expect, doc)


ALL_KINDS: Consts = {f: 1 for f in (*FAULTS, "B_VIEW")}
#: the base of most configurations: 2 keys that share the storage leaf's one slot (so tags and tenures
#: matter; key 1 may also be cached at spine 1), 2 spines and the storage leaf
BASE: Consts = {"NK": 2, "NSP": 2, "NSLOT": 1, "K1_SPINES": 1}

SUITES: dict[str, list[Config]] = {
    # make test (tests/unit/test_model.py): seconds each
    "test": [
        _c(
            "small",
            "the protocol: 2 keys sharing the leaf's slot, 2 spines, 2 overlapping writes; any one fault of every kind",
            **BASE,
            NW=2,
            B_INS=1,
            MAXSEQ=3,
            B_FAULTS=1,
            **ALL_KINDS,
        ),
        _c(
            "bug-ack-before-p1",
            "seeded bug: Redis written and the client answered before phase 1",
            "StaleAfterAck",
            **BASE,
            NW=1,
            B_INS=1,
            MAXSEQ=2,
            BUG_ACK_BEFORE_P1=True,
        ),
        _c(
            "bug-dead-spine-done",
            "seeded bug: a spine declared down completes its pending invalidations (no leaf-only path)",
            "StaleAfterAck",
            **BASE,
            NW=1,
            B_INS=2,
            MAXSEQ=3,
            B_FAIL=1,
            B_FAULTS=1,
            BUG_DEAD_SPINE_DONE=True,
        ),
        _c(
            "bug-no-epoch-bump",
            "seeded bug: an agent without its state resets its versions in the same epoch",
            "OtherKey",
            **{**BASE, "K1_SPINES": 0},
            NW=1,
            B_INS=2,
            MAXSEQ=2,
            B_AGENT=1,
            B_FAULTS=1,
            BUG_NO_EPOCH_BUMP=True,
        ),
        _c(
            "bug-any-inv-arms",
            "seeded bug: any INVALIDATE arms a new tenure, not only its own populate",
            "StaleAfterAck",
            **{**BASE, "K1_SPINES": 0},
            NW=2,
            B_INS=2,
            MAXSEQ=4,
            B_DUP=1,
            B_FAULTS=1,
            BUG_ANY_INV_ARMS=True,
        ),
        _c(
            "bug-shim-trusts-view",
            "seeded bug: a restarted shim takes its empty view as complete",
            "Holders",
            **BASE,
            NW=1,
            B_INS=1,
            MAXSEQ=2,
            B_SHIM=1,
            B_FAULTS=1,
            BUG_SHIM_TRUSTS_VIEW=True,
        ),
        _c(
            "bug-dp-no-flush",
            "seeded bug: a spine failed over for its dead data plane is recovered without "
            "the flush (it did not restart, its agent kept running: its cache looks intact)",
            "StaleAfterAck",
            **BASE,
            NW=1,
            B_INS=1,
            MAXSEQ=2,
            B_DPDEAD=1,
            B_FAULTS=1,
            BUG_DP_NO_FLUSH=True,
        ),
        _c(
            "bug-rejoin-down",
            "seeded bug: a down-set pushed while a recovering spine is warmed (told up, flushed, its routes "
            "not back yet) names it down again",
            "StaleAfterAck",
            **BASE,
            NW=1,
            B_INS=1,
            MAXSEQ=2,
            B_FAIL=1,
            B_FAULTS=1,
            BUG_REJOIN_DOWN=True,
        ),
        _c(
            "bug-leaf-down",
            "seeded bug: a failed storage leaf (kept running, or paused and resumed) is in the shims' down-set; "
            "a write of a key only it holds would be acknowledged with no INVALIDATE",
            "Holders",
            **{**BASE, "K1_SPINES": 0},
            NW=1,
            B_INS=1,
            MAXSEQ=2,
            B_LEAF=1,
            B_FAULTS=1,
            BUG_LEAF_DOWN=True,
        ),
        _c(
            "bug-dp-from-process",
            "seeded bug: a kernel client leaf whose process died is taken for one that routes nothing; the "
            "shims stop invalidating a failed spine its programs still send reads to",
            "StaleAfterAck",
            **BASE,
            NW=1,
            B_INS=1,
            MAXSEQ=2,
            B_FAIL=1,
            B_CLDIE=1,
            B_FAULTS=2,
            BUG_DP_FROM_PROCESS=True,
        ),
    ],
    # the protocol as specified before each fix the model found: a counterexample each.  (FIX_DOWNSET_FIRST
    # has none: the recovery tells the shims a spine is up before its agent flushes it; model/README.md)
    "findings": [
        _c(
            "spec-unarmed-floor",
            "as specified: INVALIDATEs that pass a new entry before its populate are not recorded",
            "StaleAfterAck",
            {"FIX_UNARMED_FLOOR": False},
            **{**BASE, "K1_SPINES": 0},
            NW=2,
            B_INS=1,
            MAXSEQ=3,
            B_DUP=1,
            B_FAULTS=1,
        ),
        _c(
            "spec-claim-versions",
            "as specified: an epoch bump resets the version counters below the entries kept",
            "OtherKey",
            {"FIX_CLAIM_VERSIONS": False},
            **{**BASE, "K1_SPINES": 0},
            NW=1,
            B_INS=2,
            MAXSEQ=3,
            B_AGENT=1,
            B_REPOP=1,
            B_FAULTS=1,
        ),
        _c(
            "spec-view-incarnation",
            "as specified: a view collected before a shim restart is applied after it",
            "Holders",
            {"FIX_VIEW_INCARNATION": False},
            **{**BASE, "K1_SPINES": 0},
            NW=1,
            B_INS=1,
            MAXSEQ=2,
            B_SHIM=1,
            B_VIEW=1,
            B_FAULTS=1,
        ),
        _c(
            "spec-error-marker",
            "as specified: a restarted shim forgets a write it answered ERROR; a late copy of it is applied",
            "DoubleAck",
            {"FIX_ERROR_MARKER": False},
            **BASE,
            NW=1,
            B_INS=1,
            MAXSEQ=3,
            B_SHIM=1,
            B_DUP=1,
            B_FAULTS=2,
        ),
        _c(
            "spec-epoch-clock",
            "as specified: a switch that came up empty keeps epoch 0 and an agent without "
            "state counts from 1 again: a delayed populate of its earlier life arms a new entry",
            "StaleAfterAck",
            {"FIX_EPOCH_CLOCK": False},
            **BASE,
            NW=1,
            B_INS=2,
            MAXSEQ=2,
            B_CRASH=1,
            B_AGENT=1,
            B_DUP=1,
            B_FAULTS=3,
        ),
        _c(
            "spec-populate-slot",
            "without the slot check: versions count per slot, so a delayed populate of "
            "an evicted entry arms the key's next entry in another slot that got the same version",
            "StaleAfterAck",
            {"FIX_POPULATE_SLOT": False},
            **{**BASE, "NSLOT": 2, "K1_SPINES": 0},
            NW=1,
            B_INS=2,
            MAXSEQ=2,
            B_DUP=1,
            B_FAULTS=1,
        ),
    ],
    # make verify: the protocol in larger bounds (model/README.md lists states and seconds of each)
    "protocol": [
        _c(
            "p-writes",
            "2 keys sharing the leaf's slot, 2 spines, 2 overlapping writes; every fault kind, any 2 faults in a trace",
            **BASE,
            NW=2,
            B_INS=1,
            MAXSEQ=3,
            B_FAULTS=2,
            **ALL_KINDS,
        ),
        _c(
            "p-any3",
            "one write; every fault kind, any 3 faults in a trace",
            **BASE,
            NW=1,
            B_INS=1,
            MAXSEQ=2,
            B_FAULTS=3,
            **ALL_KINDS,
        ),
        _c(
            "p-insertions",
            "2 overlapping writes and 2 insertions (spine and leaf, or churn); every fault kind, any one in a trace",
            **BASE,
            NW=2,
            B_INS=2,
            MAXSEQ=3,
            B_FAULTS=1,
            **ALL_KINDS,
        ),
        _c(
            "p-restarts",
            "shim, agent, controller restart and spine crash, all four in one trace (and the view)",
            **BASE,
            NW=1,
            B_INS=1,
            MAXSEQ=2,
            B_SHIM=1,
            B_AGENT=1,
            B_CTRL=1,
            B_CRASH=1,
            B_VIEW=1,
            B_FAULTS=4,
        ),
        _c(
            "p-netfail",
            "2 overlapping writes; loss, duplication, failover and mechanism change, all four in one trace",
            **BASE,
            NW=2,
            B_INS=1,
            MAXSEQ=3,
            B_LOSS=1,
            B_DUP=1,
            B_FAIL=1,
            B_MECH=1,
            B_FAULTS=4,
        ),
        _c(
            "p-dpdead",
            "spine and leaf both caching the written key; a spine's data "
            "plane dies (failed over for it or not), an operator failover and a packet lost, all three in one "
            "trace",
            **BASE,
            NW=1,
            B_INS=2,
            MAXSEQ=3,
            B_DPDEAD=1,
            B_FAIL=1,
            B_LOSS=1,
            B_FAULTS=3,
        ),
        _c(
            "p-leaves",
            "issue 44: the storage leaf failed while its data plane goes on (recovered with or without a "
            "flush), a kernel client leaf's process dying with its programs routing on, a spine failover and a "
            "packet lost, all four in one trace",
            **BASE,
            NW=1,
            B_INS=2,
            MAXSEQ=3,
            B_LEAF=1,
            B_CLDIE=1,
            B_FAIL=1,
            B_LOSS=1,
            B_FAULTS=4,
        ),
        _c(
            "p-failover",
            "spine and leaf both caching the written key; failover, spine crash and controller "
            "restart, all three in one trace",
            **BASE,
            NW=1,
            B_INS=2,
            MAXSEQ=3,
            B_FAIL=1,
            B_CRASH=1,
            B_CTRL=1,
            B_FAULTS=3,
        ),
        _c(
            "p-keys",
            "both keys written and both cacheable in the spines; DELETEs and values too large to "
            "cache; duplication and agent restart in one trace",
            **BASE,
            NW=2,
            WRITE_KEYS=2,
            K2_SPINES=True,
            ALLOW_NC=True,
            B_INS=1,
            MAXSEQ=3,
            B_DUP=1,
            B_AGENT=1,
            B_FAULTS=2,
        ),
        _c(
            "p-tags",
            "3 insertions, version counters that wrap (1 per slot and epoch), epochs up to 3; agent "
            "restart and spine crash in one trace",
            **BASE,
            NW=1,
            B_INS=3,
            MAXSEQ=3,
            VMAX=1,
            EMAX=3,
            B_AGENT=1,
            B_CRASH=1,
            B_FAULTS=2,
        ),
        _c(
            "p-slots",
            "2 slots per switch: a key's next entry may take another slot; duplication and agent restart in one trace",
            **{**BASE, "NSLOT": 2},
            NW=1,
            B_INS=2,
            MAXSEQ=3,
            B_DUP=1,
            B_AGENT=1,
            B_FAULTS=2,
        ),
        _c(
            "p-no-downset-first",
            "the protocol without FIX_DOWNSET_FIRST holds too (recovery tells the shims "
            "a spine is up before its agent flushes it); shim restart, failover and controller restart in one "
            "trace",
            "ok",
            {"FIX_DOWNSET_FIRST": False},
            **BASE,
            NW=1,
            B_INS=2,
            MAXSEQ=3,
            B_SHIM=1,
            B_FAIL=1,
            B_CTRL=1,
            B_FAULTS=3,
        ),
    ],
}

SUITES["bugs"] = [c for c in SUITES["test"] if c.expect != "ok"]
SUITES["verify"] = SUITES["bugs"] + SUITES["findings"] + SUITES["protocol"]


def suite(name: str) -> list[Config]:
    return list(SUITES[name])
