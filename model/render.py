"""A configuration's Murphi text: the model with its constants set and its unreachable cover goals removed.

A cover goal the configuration cannot reach (its fault budget does not allow the faults the goal
needs) would be reported missed; :data:`COVER_NEEDS` says, per goal, what it needs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from model.config import FAULTS, Config, Consts

MODEL = Path(__file__).resolve().parent / "distcache.m"


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
    "a recovering spine was warmed before reads were routed to it": lambda c: (
        int(c["B_INS"]) >= 1 and _spine_caches(c) and (_on("B_FAIL")(c) or _on("B_DPDEAD")(c))
    ),
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
    "fault: the storage leaf failed": _on("B_LEAF"),
    "fault: a kernel client leaf's process died": _on("B_CLDIE"),
    "the storage leaf was recovered with a flush": _on("B_LEAF"),
    "the storage leaf was recovered without a flush": _on("B_LEAF"),
    "fault: view pushed": _on("B_VIEW", "B_SHIM"),
    # B_BUSY takes from B_FAULTS but is not among FAULTS: "every fault kind happened" predates it
    "fault: a write refused BUSY": lambda c: int(c["B_BUSY"]) > 0 and int(c["B_FAULTS"]) >= 1,
    "a write refused BUSY": lambda c: int(c["B_BUSY"]) > 0 and int(c["B_FAULTS"]) >= 1,
    # an expiry is not a fault (Redis does it on its own): it takes nothing from B_FAULTS
    "Redis expired a key": lambda c: int(c["B_EXP"]) > 0 and int(c["ALLOW_TTL"]) == 1,
    "a key expired in Redis": lambda c: int(c["B_EXP"]) > 0 and int(c["ALLOW_TTL"]) == 1,
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
