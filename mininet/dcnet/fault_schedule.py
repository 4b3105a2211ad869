"""Randomized fault schedules for ``make linearizability`` (Jepsen style), drawn from a seed.

A schedule is pure data: which fault happens when, in which lane.  Faults of one
lane run one after another (each waits for its own effect: a spine declared dead,
a process answering again); the lanes run side by side, so faults overlap.  The
same seed gives the same schedule, so a run can be replayed with
``make linearizability SEED=<n>`` (the packet faults and the thread timing are
not replayed exactly: the schedule is).

Effects are counted by what happened, not by what was attempted
(:class:`Tally`): a fault counts only if it took effect while the clients were
running, and a kind that took effect fewer than ``min_effects`` times in a cell is
reported as such.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

# Every kind of fault, in the order the summary lists them.  Packet kinds are counted in packets
# (the injector's counters); the others in events (a process killed and back, a failover logged...).
PACKET_KINDS = ("loss", "loss_burst", "duplicate", "reorder")
PROCESS_KINDS = (
    "spine_crash",
    "spine_operator",
    "agent_restart",
    "agent_restart_stateless",
    "shim_restart",
    "shim_restart_stateless",
    "controller_restart",
    "controller_mid_failover",
    "redis_kill",
    "mechanism_change",
    "hot_shift",
    "spine_dp_dead",
    "fabric_dp_dead",
    # issue 44: every switch role, paused processes, an operator's drain, a shim's clock, write floods
    "storage_leaf_crash",
    "client_leaf_crash",
    "leaf_keep_running",
    "spine_keep_running",
    "leaf_pause",
    "spine_pause",
    "shim_clock_back",
    "write_flood",
    # issue 45: a shim's dedup table at its memory bound refuses writes BUSY (each recorded, never applied)
    "shim_dedup_full",
    # issue 47: a client host's Redis-protocol gateway killed (SIGKILL, mid-request) and started again
    "gateway_restart",
)
KINDS = PACKET_KINDS + PROCESS_KINDS

# How long a spine's data plane stays dead (``spine_dp_dead``): drawn per fault, either side of the controller's
# 0.5 s of unanswered probes (controller/timing.py DP_MISSES): a short death is only routed around by the leaves, a
# longer one is failed over and then recovered by the controller once the spine answers its probes again.
DP_DEAD_S = (0.1, 2.0)
# How long every spine's data plane stays dead at once (``fabric_dp_dead``): past the controller's detection, so
# every spine is failed over (no spine left in service: no read may be sent to any spine's cache, whose copies the
# writes of the outage no longer invalidate), and each is recovered once it answers again.
FABRIC_DP_DEAD_S = (0.8, 1.6)
# How long a paused switch process (SIGSTOP .. SIGCONT: a GC pause, a wedged host) stays paused: either side of
# the controller's detection, so some pauses are only ridden out and others are declared dead, failed over,
# and resumed into a deployment that has moved on.
PAUSE_S = (0.5, 5.0)
# How long an operator's drain (``fail --keep-running``) lasts before its ``recover``.
DRAIN_S = (1.0, 3.0)
# How long a shim runs with a dedup table too small for its writes (``shim_dedup_full``): it refuses most of
# them BUSY for that long, then is restarted with its usual bound.
DEDUP_FULL_S = (1.0, 3.0)
DEDUP_FULL_MEMORY = 2 << 10
"""The dedup memory of a shim under ``shim_dedup_full``: 2 KB, 6 writes per retry span."""
# the kinds that act on one storage server's shim or Redis (their target is a server; their at-risk keys its own)
SHIM_KINDS = frozenset({"shim_restart", "shim_restart_stateless", "redis_kill", "shim_clock_back", "shim_dedup_full"})

# Which lane a process fault runs in.  Faults that stop spines or the controller share one lane (two of them
# at once would fight over the same process); mechanism changes, agent restarts and storage faults (shims,
# Redis, the hot set) each have a lane of their own, so they overlap with everything else.
LANES = {
    "spine_crash": "fabric",
    "spine_operator": "fabric",
    "controller_restart": "fabric",
    "controller_mid_failover": "fabric",
    "spine_dp_dead": "fabric",
    "fabric_dp_dead": "fabric",
    "mechanism_change": "mechanism",
    "agent_restart": "agents",
    "agent_restart_stateless": "agents",
    "shim_restart": "storage",
    "shim_restart_stateless": "storage",
    "redis_kill": "storage",
    "hot_shift": "storage",
    "spine_keep_running": "fabric",
    "spine_pause": "fabric",
    "storage_leaf_crash": "leaves",
    "client_leaf_crash": "leaves",
    "leaf_keep_running": "leaves",
    "leaf_pause": "leaves",
    "shim_clock_back": "storage",
    "write_flood": "flood",
    "shim_dedup_full": "storage",
    "gateway_restart": "gateways",
}
# the kinds whose length is drawn (Fault.hold), and from where
HOLDS = {
    "spine_dp_dead": DP_DEAD_S,
    "fabric_dp_dead": FABRIC_DP_DEAD_S,
    "leaf_pause": PAUSE_S,
    "spine_pause": PAUSE_S,
    "leaf_keep_running": DRAIN_S,
    "spine_keep_running": DRAIN_S,
    "shim_dedup_full": DEDUP_FULL_S,
}


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the clients start
    kind: str
    target: str  # a switch or server name, a mechanism, or "" when the kind needs none
    hold: float = 0.0  # seconds the fault lasts, for a kind that has a length (HOLDS); else 0


@dataclass
class Schedule:
    seed: int
    faults: list[Fault]

    def lane(self, name: str) -> list[Fault]:
        return [f for f in self.faults if LANES[f.kind] == name]

    @property
    def lanes(self) -> list[str]:
        return sorted({LANES[f.kind] for f in self.faults})


def draw(
    seed: int,
    duration: float,
    *,
    spines: list[str],
    cache_switches: list[str],
    servers: list[str],
    leaves: Sequence[str] = (),
    clients: Sequence[str] = (),
    mechanism: str,
    per_kind: int = 3,
    kinds: tuple[str, ...] = PROCESS_KINDS,
) -> Schedule:
    """``per_kind`` faults of every kind at seeded random times in the first 80 % of ``duration``.

    Mechanism changes go away from ``mechanism`` and back (to ``distcache`` away from ``nocache``,
    to ``nocache`` away from a caching one, alternating with ``partition``).  A spine's data-plane
    death lasts a length drawn from ``DP_DEAD_S``, every spine's at once one from ``FABRIC_DP_DEAD_S``, a pause
    one from ``PAUSE_S``, a drain one from ``DRAIN_S``, a shim's full dedup table one from ``DEDUP_FULL_S``.
    ``leaves``: the storage and client leaves (the storage ones first), what the leaves' kinds target; ``clients``:
    the client hosts, whose gateways ``gateway_restart`` kills.
    (Kinds are drawn in ``kinds`` order, each after the ones before: a kind added at the end leaves the
    others' times and targets under a seed as they were.)
    """
    if duration <= 0 or per_kind < 0:
        raise ValueError("duration must be positive and per_kind at least 0")
    rng = random.Random(seed)
    faults: list[Fault] = []
    away = [m for m in ("nocache", "partition", "distcache") if m != mechanism]
    for kind in kinds:
        for i in range(per_kind):
            at = round(rng.uniform(0.05, 0.80) * duration, 2)
            if kind in ("spine_crash", "spine_operator", "controller_mid_failover", "spine_dp_dead", "spine_pause",
                        "spine_keep_running"):  # fmt: skip
                target = rng.choice(spines)
            elif kind == "fabric_dp_dead":
                target = ""
            elif kind == "storage_leaf_crash":
                target = rng.choice([x for x in leaves if x.startswith("sl")] or [""])
            elif kind == "client_leaf_crash":
                target = rng.choice([x for x in leaves if x.startswith("cl")] or [""])
            elif kind in ("leaf_keep_running", "leaf_pause"):
                target = rng.choice(list(leaves) or [""])
            elif kind.startswith("agent_restart"):
                target = rng.choice(cache_switches)
            elif kind in SHIM_KINDS:
                target = rng.choice(servers)
            elif kind == "mechanism_change":
                target = away[i % len(away)]
            elif kind == "gateway_restart":
                target = rng.choice(list(clients) or [""])
            else:
                target = ""
            hold = round(rng.uniform(*HOLDS[kind]), 2) if kind in HOLDS else 0.0
            faults.append(Fault(at, kind, target, hold))
    faults.sort(key=lambda f: (f.at, f.kind))
    return Schedule(seed, faults)


@dataclass
class Tally:
    """Faults that took effect, by kind, and what each did (one line per event for the log)."""

    effects: Counter[str] = field(default_factory=Counter)
    log: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # faults that could not be applied (and why)

    def took_effect(self, kind: str, what: str, n: int = 1) -> None:
        if n > 0:
            self.effects[kind] += n
            self.log.append(f"{kind}: {what}")

    def could_not(self, kind: str, why: str) -> None:
        self.failed.append(f"{kind}: {why}")

    @property
    def total(self) -> int:
        return sum(self.effects.values())

    def short_of(self, min_effects: int, kinds: tuple[str, ...] = KINDS) -> list[str]:
        """Kinds that took effect fewer than ``min_effects`` times."""
        return [k for k in kinds if self.effects[k] < min_effects]

    def summary(self, kinds: tuple[str, ...] = KINDS) -> str:
        return " ".join(f"{k}={self.effects[k]}" for k in kinds)
