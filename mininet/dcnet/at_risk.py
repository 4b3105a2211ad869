"""The fault matrix's at-risk pairs: the operations a fault could have broken, counted from the history.

A fault that never met a cached key proves nothing, however often it is injected.  So each cell counts,
for every fault that took effect, the pairs it put at risk: a write of a key that a switch the fault
concerns held valid during the fault, followed by a read of that key routed to that switch.  Such a read
returns the write's value (or a newer one) only if the protocol invalidated, flushed or fenced that
switch's copy correctly through the fault; a bug there shows up as a stale read of exactly such a pair.

Precisely, for a fault F that took effect over [a, b] (from its injection until its effect was over: the
switch declared dead and back, the process answering again, the hold ended) concerning switches S_F and
keys K_F (a storage server's fault: that server's keys; others: every key):

* switch s of S_F *held key k valid during F* if a read of k was answered from s's cache (``served_by``)
  within [a - LOOKBACK, b + GRACE];
* each write W of k in K_F begun within [a, b + GRACE] (acknowledged or of unknown outcome; not one
  answered ERROR, which wrote nothing) is one pair with s if a read of k *routed to s* (``target`` = s, the
  client rack's choice a server's reply echoes, or answered by s) was sent after W ended and within
  HORIZON of b.

Each (fault, write, switch) counts once.  A read's routing comes from its reply (loadgen.history
records ``target`` and ``served_by``), so misses at s count as well as hits: a correct protocol makes
most of them misses.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dcnet.fault_schedule import SHIM_KINDS
from distcache.cluster import Cluster, Role, is_cache_switch

LOOKBACK_NS = 1_000_000_000  # a hit this long before a fault shows the switch held the key when it began
GRACE_NS = 1_000_000_000  # a fault's effect outlasts its end a little (a restarted shim's first writes)
HORIZON_NS = 5_000_000_000  # reads after the fault that still test what it did


@dataclass(frozen=True)
class Window:
    """One fault that took effect: its kind, the switches it concerns, which keys, and when (ns,
    CLOCK_MONOTONIC)."""

    kind: str
    switches: frozenset[int]
    start: int
    end: int
    keys: Callable[[str], bool] | None = None  # None: every key


def pairs(records: Iterable[dict], windows: Iterable[Window]) -> Counter[str]:
    """At-risk pairs per fault kind (see the module docstring) of a recorded history."""
    reads: dict[str, list[tuple[int, int, int]]] = defaultdict(list)  # key -> (call, target, served_by)
    writes: dict[str, list[tuple[int, int]]] = defaultdict(list)  # key -> (call, end)
    for r in records:
        if r["op"] == "get":
            if r["return"] is not None:
                reads[r["key"]].append((int(r["call"]), int(r.get("target") or 0), int(r.get("served_by") or 0)))
        elif not r.get("error") and not r.get("wrongtype"):  # (an INCR or HSET answered WRONGTYPE wrote nothing)
            end = r["return"] if r["return"] is not None else r.get("end")
            writes[r["key"]].append((int(r["call"]), int(end) if end is not None else 1 << 62))
    for v in reads.values():
        v.sort()
    for v in writes.values():
        v.sort()
    calls = {k: [c for c, _, _ in v] for k, v in reads.items()}
    out: Counter[str] = Counter()
    for w in windows:
        for key, kreads in reads.items():
            if w.keys is not None and not w.keys(key):
                continue
            kcalls = calls[key]
            lo = bisect.bisect_left(kcalls, w.start - LOOKBACK_NS)
            hi = bisect.bisect_right(kcalls, w.end + GRACE_NS)
            held = {s for _, _, s in kreads[lo:hi] if s in w.switches}
            for s in held:
                for call, end in writes.get(key, ()):
                    if not w.start <= call <= w.end + GRACE_NS:
                        continue
                    first = bisect.bisect_right(kcalls, end)
                    last = bisect.bisect_right(kcalls, w.end + HORIZON_NS)
                    if any(t == s or by == s for _, t, by in kreads[first:last]):
                        out[w.kind] += 1
    return out


def window(cluster: Cluster, kind: str, target: str, start: int, end: int) -> Window:
    """The window of a fault of ``kind`` at ``target`` (fault_schedule's names): a cache switch's faults (a
    spine's or a storage leaf's crash, drain, pause; its agent's restart) concern that switch, every spine's
    data plane dead all spines; a storage server's (its shim, its Redis, its clock) every cache switch, for
    that server's keys; a client leaf's, the controller's, a mechanism change, a shift of the hot set and a
    write flood every cache switch."""
    caches = frozenset(s.switch_id for s in cluster.switches() if is_cache_switch(s))
    spines = frozenset(cluster.switch_ids(Role.SPINE))
    keys = None
    one_switch = ("spine_crash", "spine_operator", "spine_dp_dead", "controller_mid_failover", "spine_pause",
                  "spine_keep_running", "storage_leaf_crash", "leaf_keep_running", "leaf_pause")  # fmt: skip
    if (kind in one_switch or kind.startswith("agent_restart")) and is_cache_switch(cluster.switch(target)):
        switches = frozenset({cluster.switch(target).switch_id})
    elif kind == "fabric_dp_dead":
        switches = spines
    else:  # a client leaf's faults (it caches nothing: every cache its reads reach), storage and fabric-wide ones
        switches = caches
        if kind in SHIM_KINDS:

            def keys(key: str) -> bool:
                return cluster.server_for_key(cluster.digest(key)).name == target

    return Window(kind, switches, start, end, keys)
