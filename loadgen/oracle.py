"""The real-time staleness oracle: which value may a read return, given every write it could have seen?

Every check of the running system (``make run``, the end-to-end scenarios, ``make emulate``, the fault
matrix) records its operations with their start and end on ``CLOCK_MONOTONIC``, which every process and
network namespace of the machine shares, so the histories of all client hosts merge into one timeline.
The rule (docs/protocol.md, "Checking reads"), per key:

* A write's value is a *candidate* for a read unless another write of that key began after the first
  one's end and was itself acknowledged before the read was sent.
* A write's end is its acknowledgement.  A write whose outcome its client never learned (it timed out,
  or was answered "outcome unknown") is never acknowledged: its end is when the client gave up, after its
  whole retry span, and it stays a candidate until a write that began after that is acknowledged.
* A write answered ERROR wrote nothing: its value is no candidate (the protocol says so; the model's
  ``ErrorValue``).  A write that began after the read had returned is no candidate either.
* What a key held before the history (absent, or what ``initial`` accepts: an earlier run's values) is
  a candidate until any write of the key is acknowledged before the read was sent.
* A delete's candidate is "absent".

A read that returns no candidate is **stale** when what it returned is a value of that key the history
explains at some time (a superseded write, a superseded initial value, absent after an acknowledged write)
and **wrong** otherwise (a value never written, another key's, a refused write's, one from the future).
This is weaker than linearizability (tools/lincheck, which the fault matrix runs beside it) but needs no
search: it is exact, linear in the history, and fails on exactly the reads a coherence bug serves.
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

ABSENT = None  # what a read of a missing key returns, and a delete writes
HASH = ("hash",)  # what an HSET writes and a read answered WRONGTYPE returns: the key holds a hash
SOME_NUMBER = ("incr",)  # what an INCR whose answer never came wrote: a number no other write names

Value = Hashable  # bytes or str: compared by equality, never interpreted
Initial = Callable[[object, object], bool]  # (key, value read) -> whether the key may have held it before


def absent_only(_key: object, value: object) -> bool:
    """The default initial state: every key absent."""
    return value is ABSENT


@dataclass(frozen=True)
class Write:
    key: object
    value: object  # ABSENT for a delete
    call: int  # ns, CLOCK_MONOTONIC
    end: int  # ns: its acknowledgement, or when its client gave up (outcome unknown)
    acked: bool
    error: bool = False  # answered ERROR: nothing written


@dataclass(frozen=True)
class Read:
    key: object
    value: object  # ABSENT: not found
    call: int
    ret: int
    served_by: int = 0  # the switch that answered from its cache (0: a storage server)


@dataclass(frozen=True)
class Finding:
    """One read that returned no candidate, and why."""

    kind: str  # "stale" or "wrong"
    read: Read
    why: str

    def __str__(self) -> str:
        r = self.read
        where = f"switch {r.served_by}" if r.served_by else "a storage server"
        return f"{self.kind}: read of {r.key!r} sent at {r.call} returned {r.value!r} (from {where}): {self.why}"


@dataclass
class Verdict:
    reads: int = 0  # reads judged
    stale: int = 0
    wrong: int = 0
    findings: list[Finding] = field(default_factory=list)  # the first few, for the report

    KEEP = 10

    def add(self, f: Finding) -> None:
        setattr(self, f.kind, getattr(self, f.kind) + 1)
        if len(self.findings) < self.KEEP:
            self.findings.append(f)

    @property
    def line(self) -> str:
        return f"stale={self.stale} wrong={self.wrong}"


class _KeyWrites:
    """One key's writes, with what supersedes each: the earliest acknowledgement of a write begun after it."""

    def __init__(self, writes: list[Write]) -> None:
        acked = sorted((w for w in writes if w.acked), key=lambda w: w.call)
        self.acked_calls = [w.call for w in acked]
        # suffix minimum of acknowledgement times: _sup[i] = min(end of acked[j], j >= i)
        self._sup = [0] * (len(acked) + 1)
        self._sup[-1] = _NEVER
        for i in range(len(acked) - 1, -1, -1):
            self._sup[i] = min(acked[i].end, self._sup[i + 1])
        self.by_value: dict[object, list[Write]] = defaultdict(list)
        for w in writes:
            self.by_value[w.value].append(w)

    def superseded_at(self, after: int) -> int:
        """When a write begun after ``after`` was first acknowledged (never: _NEVER)."""
        return self._sup[bisect.bisect_right(self.acked_calls, after)]

    @property
    def first_ack(self) -> int:
        return self._sup[0]


_NEVER = 1 << 62
_EMPTY = _KeyWrites([])


class Oracle:
    """Writes and reads of one run, from any number of clients; ``verdict()`` judges the reads added since
    the last verdict against every write added so far (a workload session judges step by step)."""

    def __init__(self, initial: Initial = absent_only) -> None:
        self.initial = initial
        self._writes: dict[object, list[Write]] = defaultdict(list)
        self._index: dict[object, _KeyWrites] = {}
        self._owner: dict[object, object] = {}  # value -> a key that wrote it (for "another key's value")
        self._reads: list[Read] = []

    def write(self, key: object, value: object, call: int, end: int, acked: bool, error: bool = False) -> None:
        self._writes[key].append(Write(key, value, call, end, acked, error))
        self._index.pop(key, None)
        if value is not ABSENT:
            self._owner.setdefault(value, key)

    def read(self, key: object, value: object, call: int, ret: int, served_by: int = 0) -> None:
        self._reads.append(Read(key, value, call, ret, served_by))

    def _writes_of(self, key: object) -> _KeyWrites:
        kw = self._index.get(key)
        if kw is None:
            kw = self._index[key] = _KeyWrites(self._writes[key]) if key in self._writes else _EMPTY
        return kw

    def verdict(self) -> Verdict:
        v = Verdict()
        reads, self._reads = self._reads, []
        for r in reads:
            v.reads += 1
            f = self.judge(r)
            if f is not None:
                v.add(f)
        return v

    def judge(self, r: Read) -> Finding | None:
        """None if ``r`` returned a candidate, else what is wrong with it."""
        kw = self._writes_of(r.key)
        writes = kw.by_value.get(r.value, [])
        superseded = None
        for w in writes:
            if w.error or w.call > r.ret:
                continue
            sup = kw.superseded_at(w.end)
            if sup >= r.call:
                return None  # a candidate
            superseded = superseded or (w, sup)
        if not writes and isinstance(r.value, str) and r.value.lstrip("-").isdigit():
            for w in kw.by_value.get(SOME_NUMBER, []):  # an INCR whose answer never came may have written it
                if w.call > r.ret:
                    continue
                sup = kw.superseded_at(w.end)
                if sup >= r.call:
                    return None
                superseded = superseded or (w, sup)
        if self.initial(r.key, r.value):
            if kw.first_ack >= r.call:
                return None
            return Finding("stale", r, f"what the key held before the run, superseded {_ago(kw.first_ack, r)}")
        if superseded is not None:
            w, sup = superseded
            what = "absent after a delete" if r.value is ABSENT else "the value of a write"
            return Finding("stale", r, f"{what} begun at {w.call}, superseded by a write acknowledged {_ago(sup, r)}")
        if r.value is ABSENT:
            return Finding("stale", r, f"absent, though a write was acknowledged {_ago(kw.first_ack, r)}")
        if writes and all(w.error for w in writes):
            return Finding("wrong", r, "the value of a write answered ERROR (nothing was written)")
        if writes:
            return Finding("wrong", r, "the value of a write begun after the read returned")
        owner = self._owner.get(r.value)
        if owner is not None and owner != r.key:
            return Finding("wrong", r, f"a value written to another key ({owner!r})")
        return Finding("wrong", r, "a value no write of this run wrote")


def _ago(t: int, r: Read) -> str:
    return f"{(r.call - t) / 1e6:.1f} ms before the read was sent"


# -- histories on disk (tools/lincheck's JSON Lines) -------------------------------------------------------------


def feed(oracle: Oracle, records: Iterable[dict]) -> None:
    """Add a recorded history's operations (loadgen.history's format) to ``oracle``.

    Gets with ``"return": null`` returned nothing and are skipped; a write with ``"return": null`` ended
    when its client gave up (``"end"``, else +infinity); ``"error": true`` marks a write answered ERROR, and
    ``"wrongtype": true`` an INCR or HSET answered WRONGTYPE (nothing written) or a read of a hash.  An INCR
    writes the number it answered; an HSET writes :data:`HASH`."""
    for rec in records:
        op, key, call, ret = rec["op"], rec["key"], int(rec["call"]), rec["return"]
        if op == "get":
            if ret is not None:
                value = HASH if rec.get("wrongtype") else rec.get("value")
                oracle.read(key, value, call, int(ret), int(rec.get("served_by") or 0))
            continue
        if rec.get("wrongtype"):
            continue  # an INCR or HSET of a key of the other type: nothing written
        if op == "incr":
            value = rec.get("value") if ret is not None else SOME_NUMBER
        elif op == "hset":
            value = HASH
        else:
            value = rec.get("value") if op == "put" else ABSENT
        if ret is None:
            end = rec.get("end")
            oracle.write(key, value, call, int(end) if end is not None else _NEVER, acked=False)
        else:
            oracle.write(key, value, call, int(ret), acked=not rec.get("error"), error=bool(rec.get("error")))


def read_history(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_history(paths: Iterable[Path], initial: Initial = absent_only) -> Verdict:
    """One verdict over the merged histories of several clients (one file per client host)."""
    oracle = Oracle(initial)
    for p in paths:
        feed(oracle, read_history(p))
    return oracle.verdict()
