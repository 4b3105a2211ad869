"""Digest engine: v1model ``digest()`` messages batched into P4Runtime DigestLists, as BMv2 does.

The runtime hands every message a packet emitted (:meth:`DigestEngine.submit`,
called after the packet, outside the state lock); a worker thread batches them
per digest according to the controller's ``DigestEntry`` config and gives each
finished list to ``send`` (the P4Runtime server's "to the primary's stream").
Semantics, checked against BMv2 1.15.5 with PI (see tests/p4runtime/test_softswitch_digests.py):

* Nothing flows for a digest until a DigestEntry is INSERTed; messages emitted
  before are dropped (BMv2 differs: its learn engine may still hold samples
  emitted just before the INSERT and delivers them in the first list).
* A list is sent when it holds ``max_list_size`` messages (0: no size limit), or
  ``max_timeout_ns`` after its first message; ``max_timeout_ns`` 0 sends every
  message at once.  (BMv2 differs: with ``max_timeout_ns`` 0 and a list size above
  1 its learn engine waits for that many samples, without any timeout; with
  ``ack_timeout_ns`` 0 it lets lists grow past ``max_list_size``; and it sends a
  timed-out list between one and two ``max_timeout_ns`` late, never less than 100 ms.)
* ``list_id`` starts at 1 and goes up by one per list sent, per digest; DELETE
  does not reset it, a new pipeline config does.
* A message equal (same member values) to one in the list being built is
  dropped.  With ``ack_timeout_ns`` > 0, so is one equal to a message in a list
  sent but not yet acked (``DigestListAck``) and not older than
  ``ack_timeout_ns``; acking or expiry lets it through again.
* With no primary controller a list is still made (its ``list_id`` used and, with
  ``ack_timeout_ns`` > 0, its data suppressed until acked or expired) and then
  dropped, as BMv2: nothing is buffered for a future primary.
* DELETE drops the list being built and forgets the unacked lists.

Memory is bounded: at most ``queue_cap`` messages wait for the worker (more are
dropped and counted), and at most ``cache_cap`` messages are remembered for
suppression per digest (the oldest unacked list is forgotten first).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from finsy.proto import p4r

from softswitch.program import Digest

log = logging.getLogger("softswitch.digests")

Values = tuple[int, ...]
QUEUE_CAP = 65536
CACHE_CAP = 65536


class DigestConfigError(Exception):
    """A DigestEntry write that cannot be applied; ``code`` is the gRPC status code name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class DigestConfig:
    max_timeout_ns: int = 0
    max_list_size: int = 0
    ack_timeout_ns: int = 0


@dataclass
class DigestStats:
    """What the engine did, over all digests (for logs and tests)."""

    submitted: int = 0
    dropped_queue_full: int = 0
    dropped_unconfigured: int = 0
    suppressed: int = 0
    lists_sent: int = 0
    lists_dropped_no_primary: int = 0
    cache_evicted: int = 0


@dataclass
class _Sent:
    values: list[Values]
    expires_ns: int


@dataclass
class _DigestState:
    digest: Digest
    next_list_id: int = 1
    config: DigestConfig | None = None
    building: list[Values] = field(default_factory=list)
    building_set: set[Values] = field(default_factory=set)
    deadline_ns: int | None = None  # when the list being built must go
    unacked: collections.OrderedDict[int, _Sent] = field(default_factory=collections.OrderedDict)
    cache: collections.Counter[Values] = field(default_factory=collections.Counter)
    cached: int = 0  # sum of len(values) over unacked

    def forget(self, list_id: int) -> None:
        sent = self.unacked.pop(list_id, None)
        if sent is None:
            return
        for v in sent.values:
            self.cache[v] -= 1
            if self.cache[v] <= 0:
                del self.cache[v]
        self.cached -= len(sent.values)


class DigestEngine:
    """Batches digest messages into DigestLists on a worker thread (see the module doc)."""

    def __init__(
        self,
        digests: Iterable[Digest],
        send: Callable[[p4r.DigestList], bool],
        *,
        queue_cap: int = QUEUE_CAP,
        cache_cap: int = CACHE_CAP,
    ) -> None:
        self._send = send
        self._queue_cap = queue_cap
        self._cache_cap = cache_cap
        self._cond = threading.Condition()
        self._queue: collections.deque[tuple[str, Values, int]] = collections.deque()
        self._digests = {d.name: _DigestState(d) for d in digests}
        self._ids: dict[str, int] = {}
        self.stats = DigestStats()
        self._thread: threading.Thread | None = None
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None and self._digests:
            self._thread = threading.Thread(target=self._run, name="softswitch-digests", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def reset(self, ids: Mapping[str, int]) -> None:
        """A new pipeline config: no DigestEntry, list ids from 1, numeric ids ``ids`` (name -> id)."""
        with self._cond:
            self._ids = dict(ids)
            self._queue.clear()
            self._digests = {name: _DigestState(st.digest) for name, st in self._digests.items()}
            self._cond.notify()

    def set_ids(self, ids: Mapping[str, int]) -> None:
        """New numeric ids for the same digests (a reconciled config): everything else is kept."""
        with self._cond:
            self._ids = dict(ids)

    # -- the packet path -----------------------------------------------------------------------
    def submit(self, messages: Iterable[tuple[str, Values]]) -> None:
        """Queue what one packet emitted; never blocks (over ``queue_cap`` waiting, drops and counts)."""
        now = time.monotonic_ns()
        with self._cond:
            for name, values in messages:
                self.stats.submitted += 1
                if len(self._queue) >= self._queue_cap:
                    self.stats.dropped_queue_full += 1
                    continue
                self._queue.append((name, values, now))
            self._cond.notify()

    # -- the control path ----------------------------------------------------------------------
    def write(self, name: str, update_type: str, config: DigestConfig | None) -> None:
        """INSERT / MODIFY / DELETE the DigestEntry of digest ``name``; raises DigestConfigError."""
        with self._cond:
            self._drain_locked()  # messages emitted before this write are judged by the old config
            st = self._digests[name]
            if update_type == "INSERT":
                if st.config is not None:
                    raise DigestConfigError("ALREADY_EXISTS", f"digest {name!r} already configured")
                st.config = config or DigestConfig()
            elif update_type == "MODIFY":
                if st.config is None:
                    raise DigestConfigError("NOT_FOUND", f"digest {name!r} not configured")
                st.config = config or DigestConfig()
            elif update_type == "DELETE":
                if st.config is None:
                    raise DigestConfigError("NOT_FOUND", f"digest {name!r} not configured")
                st.config = None
                st.building, st.building_set, st.deadline_ns = [], set(), None
                st.unacked.clear()
                st.cache.clear()
                st.cached = 0
                return
            else:
                raise DigestConfigError("INVALID_ARGUMENT", "update type must be INSERT, MODIFY or DELETE")
            cfg = st.config
            if st.building:
                if cfg.max_timeout_ns == 0 or (cfg.max_list_size and len(st.building) >= cfg.max_list_size):
                    st.deadline_ns = 0  # due now: the worker sends it
                elif st.deadline_ns is not None:
                    st.deadline_ns = min(st.deadline_ns, time.monotonic_ns() + cfg.max_timeout_ns)
            self._cond.notify()

    def config(self, name: str) -> DigestConfig | None:
        with self._cond:
            return self._digests[name].config

    def ack(self, name: str, list_id: int) -> None:
        """The controller acked a list: its data may be sent again (unknown list ids are ignored)."""
        with self._cond:
            st = self._digests.get(name)
            if st is not None:
                st.forget(list_id)

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until the worker has taken every queued message (for tests)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue and time.monotonic() < deadline:
                self._cond.wait(0.01)

    # -- worker ------------------------------------------------------------------------------------
    def _run(self) -> None:
        with self._cond:
            while not self._stopping:
                self._drain_locked()
                wait = self._tick_locked()
                if not self._queue and not self._stopping:
                    self._cond.wait(wait)

    def _drain_locked(self) -> None:
        while self._queue:
            name, values, t_ns = self._queue.popleft()
            st = self._digests.get(name)
            if st is None:
                log.warning("pipeline emitted digest %r, which the program does not declare", name)
                continue
            fields = st.digest.fields
            if len(values) != len(fields):
                log.warning("digest %r emitted with %d values for %d fields; dropped", name, len(values), len(fields))
                continue
            # as bit<W> struct members: truncated to their widths
            self._add(st, tuple(v & ((1 << w) - 1) for v, (_, w) in zip(values, fields, strict=True)), t_ns)
        self._cond.notify_all()

    def _add(self, st: _DigestState, values: Values, t_ns: int) -> None:
        cfg = st.config
        if cfg is None:
            self.stats.dropped_unconfigured += 1
            return
        if values in st.building_set or (cfg.ack_timeout_ns and values in st.cache):
            self.stats.suppressed += 1
            return
        st.building.append(values)
        st.building_set.add(values)
        if len(st.building) == 1:
            st.deadline_ns = t_ns + cfg.max_timeout_ns
        if cfg.max_timeout_ns == 0 or (cfg.max_list_size and len(st.building) >= cfg.max_list_size):
            self._send_list(st)

    def _tick_locked(self) -> float | None:
        """Send due lists, expire unacked ones; the seconds until the next deadline (None: none)."""
        now = time.monotonic_ns()
        nxt: int | None = None
        for st in self._digests.values():
            if st.building and st.deadline_ns is not None:
                if st.deadline_ns <= now:
                    self._send_list(st)
                else:
                    nxt = st.deadline_ns if nxt is None else min(nxt, st.deadline_ns)
            while st.unacked:
                list_id, sent = next(iter(st.unacked.items()))
                if sent.expires_ns > now:
                    nxt = sent.expires_ns if nxt is None else min(nxt, sent.expires_ns)
                    break
                st.forget(list_id)
        return None if nxt is None else max(0.0, (nxt - now) / 1e9)

    def _send_list(self, st: _DigestState) -> None:
        cfg = st.config
        assert cfg is not None
        values, st.building, st.building_set, st.deadline_ns = st.building, [], set(), None
        list_id = st.next_list_id
        st.next_list_id += 1
        if cfg.ack_timeout_ns:
            st.unacked[list_id] = _Sent(values, time.monotonic_ns() + cfg.ack_timeout_ns)
            st.cache.update(values)
            st.cached += len(values)
            while st.cached > self._cache_cap and len(st.unacked) > 1:
                st.forget(next(iter(st.unacked)))
                self.stats.cache_evicted += 1
        msg = p4r.DigestList(digest_id=self._ids.get(st.digest.name, 0), list_id=list_id, timestamp=time.time_ns())
        for v in values:
            members = msg.data.add().struct.members
            for x in v:
                members.add(bitstring=_encode(x))
        try:
            ok = self._send(msg)
        except Exception:
            log.exception("sending digest list %d of %r failed", list_id, st.digest.name)
            ok = False
        if ok:
            self.stats.lists_sent += 1
        else:
            self.stats.lists_dropped_no_primary += 1


def _encode(value: int) -> bytes:
    """Canonical bytestring (shortest, 0 is one zero byte), as BMv2 sends digest data."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


__all__ = ["DigestConfig", "DigestConfigError", "DigestEngine", "DigestStats"]
