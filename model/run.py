"""Check the coherence model (model/distcache.m) with Rumur, one configuration at a time.

A configuration is the model with some constants changed: bounds, fault budgets, a seeded bug, a
proposed fix switched off.  For each, this writes the Murphi file, has ``rumur`` generate the C
verifier, compiles it with ``cc`` (cached by content under build/model/), runs it and prints:

    model=<name> states=<n> rules_fired=<n> result=ok|violation|cover-missed|error seconds=<s> [invariant=<name>]

A configuration passes when it gives the result it expects: ``ok`` for the protocol (no invariant
broken in any reachable state, and every ``cover`` goal of the configuration reached: each fault it
allows happens in some trace), or a counterexample breaking a named invariant for a seeded bug or
for the protocol as specified without one of the fixes the model found necessary (model/README.md).

    python -m model.run --suite test                     # tests/test_model.py's configurations
    python -m model.run --suite verify --save runs/verify --show-trace     # make verify
    python -m model.run --list
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL = HERE / "distcache.m"
CACHE = HERE.parent / "build" / "model"

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

FAULTS = ("B_LOSS", "B_DUP", "B_SHIM", "B_AGENT", "B_CTRL", "B_CRASH", "B_FAIL", "B_MECH", "B_DPDEAD")
BUGS = (
    "BUG_ACK_BEFORE_P1",
    "BUG_DEAD_SPINE_DONE",
    "BUG_NO_EPOCH_BUMP",
    "BUG_ANY_INV_ARMS",
    "BUG_SHIM_TRUSTS_VIEW",
    "BUG_DP_NO_FLUSH",
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


# ---------------------------------------------------------------------------------------------------
# configurations

NO_FAULTS: Consts = {b: 0 for b in (*FAULTS, "B_VIEW", "B_REPOP")}
ALL_FIXES: Consts = {f: True for f in FIXES}


def _c(name: str, doc: str, expect: str = "ok", fixes: Consts | None = None, **consts: object) -> Config:
    """A configuration: every fault off and every fix on unless it says otherwise."""
    return Config(name, {**NO_FAULTS, **ALL_FIXES, **(fixes or {}), **consts}, expect, doc)


ALL_KINDS: Consts = {f: 1 for f in (*FAULTS, "B_VIEW")}
#: the base of most configurations: 2 keys that share the storage leaf's one slot (so tags and tenures
#: matter; key 1 may also be cached at spine 1), 2 spines and the storage leaf
BASE: Consts = {"NK": 2, "NSP": 2, "NSLOT": 1, "K1_SPINES": 1}

SUITES: dict[str, list[Config]] = {
    # make test (tests/test_model.py): seconds each
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


def without_bug(cfg: Config) -> Config:
    """The same bounds with the seeded bug (or the missing fix) put right: it must hold."""
    return replace(
        cfg, name=cfg.name + "-fixed", expect="ok", consts={**cfg.consts, **{b: False for b in BUGS}, **ALL_FIXES}
    )


# ---------------------------------------------------------------------------------------------------
# cover goals: each is expected only where the configuration makes it reachable


def _on(*names: str) -> Callable[[Consts], bool]:
    """Each named budget is at least 1, and the total fault budget lets every named fault happen in
    one trace (B_VIEW and B_REPOP are bounds, not faults: they take nothing from B_FAULTS)."""
    faults = sum(n in FAULTS for n in names)
    return lambda c: all(int(c[n]) > 0 for n in names) and int(c["B_FAULTS"]) >= faults


def _spine_caches(c: Consts) -> bool:
    return int(c["K1_SPINES"]) >= 1 or bool(c["K2_SPINES"])


COVER_NEEDS: dict[str, Callable[[Consts], bool]] = {
    # a write's only spine path released, no path acked, the leaf may hold the key: a spine and the
    # leaf both caching it (two populates and the write: three seq numbers)
    "a dead spine's pending path was replaced by a leaf-only path": lambda c: (
        int(c["K1_SPINES"]) >= 1
        and int(c["B_INS"]) >= 2
        and int(c["MAXSEQ"]) >= 3
        and int(c["NW"]) >= 1
        and (_on("B_FAIL")(c) or _on("B_DPDEAD")(c))
    ),
    "a populate was refused": lambda c: (
        int(c["B_INS"]) >= 1 and _spine_caches(c) and (_on("B_FAIL")(c) or _on("B_SHIM")(c) or _on("B_DPDEAD")(c))
    ),
    "a retried write was answered from its Redis marker": _on("B_SHIM", "B_DUP"),
    "a version counter wrapped: epoch bumped": lambda c: int(c["B_INS"]) > int(c["VMAX"]),
    "a key took a slot that held another key's value": lambda c: int(c["B_INS"]) >= 2,
    "agent restarted with its state": _on("B_AGENT"),
    "agent restarted without its state": _on("B_AGENT"),
    "shim restarted with its state": _on("B_SHIM"),
    "shim restarted without its state": _on("B_SHIM"),
    "controller restarted with its state": _on("B_CTRL"),
    "controller restarted without its state": _on("B_CTRL"),
    "a spine recovered": lambda c: _on("B_FAIL")(c) or _on("B_DPDEAD")(c),
    "the controller failed a spine over for its dead data plane": _on("B_DPDEAD"),
    "a spine serves its copies again: its data plane revived before a failover": lambda c: (
        _on("B_DPDEAD")(c) and _spine_caches(c)
    ),
    "every fault kind happened in one trace": _on(*FAULTS),
    "fault: packet loss": _on("B_LOSS"),
    "fault: packet duplication": _on("B_DUP"),
    "fault: shim restart": _on("B_SHIM"),
    "fault: agent restart": _on("B_AGENT"),
    "fault: controller restart": _on("B_CTRL"),
    "fault: spine crash": _on("B_CRASH"),
    "fault: spine failover": _on("B_FAIL"),
    "fault: mechanism change": _on("B_MECH"),
    "fault: a data-plane death happens": _on("B_DPDEAD"),
    "fault: view pushed": _on("B_VIEW", "B_SHIM"),
    "two writes of one key overlap": lambda c: int(c["NW"]) >= 2,
    "a spine serves a value": lambda c: int(c["K1_SPINES"]) >= 1,
    "a read sent before a routing change is answered from a cache": lambda c: (
        _on("B_MECH")(c) or ((_on("B_FAIL")(c) or _on("B_DPDEAD")(c)) and int(c["K1_SPINES"]) >= 1)
    ),
}

_CONST = re.compile(r"^\s*([A-Z][A-Z0-9_]*)\s*:\s*([^;]+);", re.M)
_COVER = re.compile(r'^\s*cover "([^"]+)".*$', re.M)


def effective(cfg: Config) -> Consts:
    """The model's constants with this configuration's values."""
    text = MODEL.read_text()
    const_block = text[text.index("\nconst\n") : text.index("\ntype\n")]
    consts: Consts = {m.group(1): m.group(2).strip() for m in _CONST.finditer(const_block)}
    for k, v in cfg.consts.items():
        consts[k] = ("true" if v else "false") if isinstance(v, bool) else v
    for k, v in list(consts.items()):
        if isinstance(v, str) and v in ("true", "false"):
            consts[k] = int(v == "true")
    return consts


def render(cfg: Config) -> str:
    """The model text for this configuration (constants set, unreachable cover goals removed)."""
    text = MODEL.read_text()
    for name, value in cfg.consts.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        pat = re.compile(rf"^(\s*{re.escape(name)}\s*:\s*)[^;]+;", re.M)
        text, n = pat.subn(lambda m, v=value: f"{m.group(1)}{v};", text, count=1)
        if n != 1:
            raise SystemExit(f"model/run.py: configuration {cfg.name}: no constant {name} in {MODEL.name}")
    consts = effective(cfg)
    expected = cfg.expect == "ok"

    def keep(m: re.Match) -> str:
        need = COVER_NEEDS.get(m.group(1))
        return m.group(0) if expected and (need is None or need(consts)) else ""

    return _COVER.sub(keep, text)


# ---------------------------------------------------------------------------------------------------
# running one configuration


@dataclass
class Result:
    name: str
    result: str  # ok | violation | cover-missed | error
    states: int = 0
    rules: int = 0
    seconds: float = 0.0
    invariant: str = ""
    message: str = ""
    trace: str = ""
    covers_missed: list[str] = field(default_factory=list)
    covers: dict[str, int] = field(default_factory=dict)
    output: str = ""

    def passed(self, cfg: Config) -> bool:
        if cfg.expect == "ok":
            return self.result == "ok"
        return self.result == "violation" and self.invariant == cfg.expect

    def line(self) -> str:
        s = (
            f"model={self.name} states={self.states} rules_fired={self.rules} result={self.result} "
            f"seconds={self.seconds:.1f}"
        )
        if self.invariant:
            s += f" invariant={self.invariant}"
        if self.covers_missed:
            s += " covers_missed=" + ";".join(c.replace(" ", "_") for c in self.covers_missed)
        return s


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"model/run.py: {name} not found on PATH (make deps installs Debian's rumur and a C compiler)")
    return path


def build(cfg: Config, threads: int, opt: str = "-O3") -> Path:
    """Generate and compile the verifier; cached by content, so a re-run skips both steps."""
    text = render(cfg)
    flags = [
        "--deadlock-detection",
        "off",
        "--threads",
        str(threads),
        "--counterexample-trace",
        "diff",
        "--pack-state",
        "off",
    ]
    cflags = ["-std=c11", opt, "-march=native", "-mcx16"]
    digest = hashlib.sha256("\0".join([text, *flags, *cflags]).encode()).hexdigest()[:16]
    CACHE.mkdir(parents=True, exist_ok=True)
    exe = CACHE / f"{cfg.name}-{digest}"
    if exe.exists():
        return exe
    src, csrc = exe.with_suffix(".m"), exe.with_suffix(".c")
    src.write_text(text)
    r = subprocess.run(
        [tool("rumur"), "--quiet", *flags, "--output", str(csrc), str(src)], capture_output=True, text=True
    )
    if r.returncode != 0:
        raise SystemExit(f"model/run.py: rumur rejected {cfg.name}:\n{r.stderr.strip()}")
    tmp = exe.with_suffix(".tmp")
    r = subprocess.run([tool("cc"), *cflags, "-o", str(tmp), str(csrc), "-lpthread"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"model/run.py: cc failed on {csrc}:\n{r.stderr.strip()[:2000]}")
    tmp.rename(exe)
    csrc.unlink()
    return exe


_EXPLORED = re.compile(r"(\d+) states, (\d+) rules fired in")
_PROGRESS = re.compile(r"(\d+) states explored in \d+s, with (\d+) rules fired and (\d+) states in the queue")
_VIOLATION = re.compile(r'Assertion failed: \S+: (.*)|invariant "([^"]*)" failed')
_HIT = re.compile(r'cover "([^"]+)" hit (\d+) times')
_NOT_HIT = re.compile(r'cover "([^"]+)" not hit')


def parse(name: str, out: str, seconds: float) -> Result:
    """The verifier's human-readable output, read back."""
    res = Result(name=name, result="error", seconds=seconds, output=out)
    m = _EXPLORED.search(out)
    if m:
        res.states, res.rules = int(m.group(1)), int(m.group(2))
    else:
        prog = _PROGRESS.findall(out)
        if prog:  # cut short: how far it got
            res.states, res.rules = int(prog[-1][0]), int(prog[-1][1])
            res.message = f"{prog[-1][2]} states still queued"
    res.covers = {c: int(n) for c, n in _HIT.findall(out)}
    v = _VIOLATION.search(out)
    missed = _NOT_HIT.findall(out)
    if v:
        res.result = "violation"
        res.message = (v.group(1) or v.group(2)).strip()
        res.invariant = res.message.split(":", 1)[0]
        start = out.find("The following is the error trace")
        end = out.find("End of the error trace.")
        if start >= 0:
            res.trace = out[start : end + len("End of the error trace.")]
    elif missed:
        res.result = "cover-missed"
        res.covers_missed = missed
    elif "No error found." in out:
        res.result = "ok"
    return res


def check(cfg: Config, threads: int = 1, timeout: float | None = None, opt: str = "-O3") -> Result:
    """Build (or reuse) and run the verifier of one configuration."""
    exe = build(cfg, threads, opt)
    t0 = time.monotonic()
    try:
        r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=timeout)
        out = r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        raw = e.stdout or b""
        out = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        res = parse(cfg.name, out, time.monotonic() - t0)
        res.result, res.message = "error", f"stopped after {timeout:.0f} s ({res.message})"
        return res
    return parse(cfg.name, out, time.monotonic() - t0)


_RULE = re.compile(r'^Rule "(.*)"(?:, (.*))? fired\.$')


def brief_trace(trace: str) -> str:
    """A counterexample as numbered steps (the saved trace also shows every variable that changed)."""
    steps, n = [], 0
    for line in trace.splitlines():
        if line.startswith("Startstate"):
            steps.append("start")
        m = _RULE.match(line)
        if m:
            n += 1
            steps.append(f"{n:2}. {m.group(1)}" + (f"  [{m.group(2)}]" if m.group(2) else ""))
        elif "failed" in line and ("invariant" in line or "Assertion" in line):
            steps.insert(0, "broken: " + line.strip())
    return "\n".join(steps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", action="append", default=[], help=f"one of {', '.join(SUITES)} (repeatable)")
    ap.add_argument("--config", action="append", default=[], help="one configuration by name (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the configurations and exit")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="CONST=VALUE",
        help="override a constant of the chosen configurations (exploring bounds)",
    )
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--timeout", type=float, help="stop each verifier after this many seconds")
    ap.add_argument(
        "--opt",
        help="C optimisation level for the verifiers (default: -O3 for a configuration "
        "that must hold, whose whole state space is searched; -O1, quicker to build, for one that "
        "must give a counterexample)",
    )
    ap.add_argument("--save", type=Path, help="directory for each configuration's output and counterexample")
    ap.add_argument("--show-trace", action="store_true", help="print each counterexample's steps")
    args = ap.parse_args(argv)
    every = {c.name: c for cs in SUITES.values() for c in cs}
    if args.list:
        print("suites: bugs = the bug configurations of test; verify = bugs + findings + protocol")
        for sname, cs in SUITES.items():
            if sname in ("bugs", "verify"):
                continue
            for c in cs:
                print(f"{sname:9} {c.name:24} expect={c.expect:14} {c.doc}")
        return 0
    chosen: list[Config] = []
    for sname in args.suite:
        if sname not in SUITES:
            print(f"model/run.py: no suite {sname!r} (one of {', '.join(SUITES)})", file=sys.stderr)
            return 2
        chosen += SUITES[sname]
    for cname in args.config:
        if cname not in every:
            print(f"model/run.py: no configuration {cname!r} (see --list)", file=sys.stderr)
            return 2
        chosen.append(every[cname])
    if not chosen:
        chosen = SUITES["test"]
    if args.set:
        bad = [a for a in args.set if "=" not in a]
        if bad:
            print(f"model/run.py: --set wants CONST=VALUE, got {bad[0]!r}", file=sys.stderr)
            return 2
        over = dict(a.split("=", 1) for a in args.set)
        chosen = [replace(c, name=c.name + "+", consts={**c.consts, **over}) for c in chosen]
    failed = 0
    for cfg in chosen:
        res = check(cfg, args.threads, args.timeout, args.opt or ("-O3" if cfg.expect == "ok" else "-O1"))
        ok = res.passed(cfg)
        failed += not ok
        print(res.line() + f" expected={cfg.expect} {'PASS' if ok else 'FAIL'}", flush=True)
        if res.result == "violation":
            print(f"  counterexample ({cfg.doc}):")
            if args.show_trace:
                print("    " + brief_trace(res.trace).replace("\n", "\n    "), flush=True)
        elif res.result == "error":
            print("  " + (res.message or res.output[-1500:]).replace("\n", "\n  "))
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / f"{cfg.name}.out").write_text(res.output)
            if res.trace:
                (args.save / f"{cfg.name}.trace").write_text(brief_trace(res.trace) + "\n\n" + res.trace + "\n")
    print(f"model: {len(chosen) - failed}/{len(chosen)} configurations as expected")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
