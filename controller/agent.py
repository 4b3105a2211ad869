"""The local agent of one cache switch (paper §4.3), run as its own process.

``python -m controller.agent --cluster runs/<run>/cluster.json --switch sp0 ...``

The agent is its switch's P4Runtime primary.  It installs what the controller
gives it over the agent API (distcache/proto/agent.proto: the cluster and the
spine partition, from which :func:`controller.entries.plan` derives every
entry), consumes the hot-key digests the switch's detector sends, and caches
the reported keys:

* **insert**: the key goes into ``cache_lookup`` pointing at a free slot with a
  version the slot has not had in this cache epoch, which leaves it invalid;
  then the key's storage shim fills the value (``populate``, with the entry's
  tag, so only this entry's own populate can arm it), serialized with the
  key's writes.  No register is written by the control plane.
* **tags**: an entry's tag is (the switch's ``cache_epoch``, its version).  The
  registers keep the tags of entries long gone, so a tag must never repeat:
  versions count up per slot, saved to the state file *before* the entry is
  written; an agent that cannot vouch for the versions handed out before (no
  state file, or one from another epoch) raises ``cache_epoch`` on the switch,
  which makes every tag the registers hold unmatchable at once, and fills the
  entries it finds again.  So does a slot whose versions run out, and so does
  a switch that came up empty (a delayed packet of its earlier life could carry
  a tag of an epoch it had then): a new epoch is above the switch's, our
  state's and the wall clock's seconds, so no epoch ever comes back.
* **evict**: when the cache is full, the entry with the fewest hits over the
  last two hit windows (deltas of the per-slot ``cache_hits`` counter) makes
  room, if the reported key is hotter; the shim is told, so later writes skip
  this switch.
* **budget**: insertions from reports are bounded by a token bucket
  (``insert_rate`` per second, ``insert_burst``), so a flood of reports cannot
  overwhelm the switch or the shims.
* **resync**: after its own restart the agent reads the cache entries back
  from the switch and rebuilds its view (per-slot version tags come back from
  its state file, or a raised epoch); after the switch restarts (the P4Runtime stream breaks and
  the pipeline is gone) it pushes the pipeline and the entries again and
  starts with an empty cache, re-adding nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from controller.entries import LEAF_CACHING, SwitchPlan, plan
from controller.p4rt import P4RuntimeError, SwitchConnection, load_p4info
from controller.probes import DP_PROBE_INTERVAL, probe_round
from controller.reconcile import apply_plan
from controller.shim_link import ShimLink, ShimRequestError, ShimUnavailableError
from distcache import p4names as n
from distcache.api import abort, agent_grpc, agent_pb2
from distcache.cluster import Cluster, Mechanism, Role, Switch
from distcache.cmdline import ArgumentParser, existing_dir, input_file, listen_address, load_cluster, output_file
from distcache.hashing import h0
from distcache.ratelimit import TokenBucket

log = logging.getLogger("agent")

# hot-key reports in lists of up to 16, sent within 10 ms; unacknowledged duplicates held back 0.5 s
DIGEST_DELIVERY = {"max_timeout_ns": 10_000_000, "max_list_size": 16, "ack_timeout_ns": 500_000_000}


#: a reported key replaces the coldest cached key only at this many times its hits: both figures are
#: estimates (a report's rate comes from a handful of reads), and swapping keys of about the same rate
#: gains nothing but costs an insertion, a populate and an eviction (a 60 s make run cached 3 700 keys
#: into 400 slots without a margin)
REPLACE_MARGIN = 1.5


class CacheFullError(RuntimeError):
    """No free slot: evict a key first."""


class VersionsExhaustedError(RuntimeError):
    """A slot has had every version of this cache epoch: raise the epoch."""


class StateFileError(ValueError):
    """The agent's state file exists but cannot be used."""


class SlotAllocator:
    """Cache slots and the versions their entries are installed with.

    An entry's tag is (cache epoch, version); the data plane arms an entry only
    for a populate carrying its tag, and a slot's valid register keeps the tag
    of the last entry filled in it after that entry is evicted (only packets
    write registers).  So within an epoch no two entries of this switch may
    share a version, in the same slot or not:

    * the same slot: a new key would hit at once with the previous key's value;
    * another slot: a delayed populate of an evicted entry of key k would arm
      k's next entry in another slot if it had the same version, and fill it
      with a value a write acknowledged since has replaced (the model's
      ``spec-populate-slot`` counterexample).

    Versions therefore count up per switch (1..65535) within a cache epoch and
    never wrap -- the last one raises :class:`VersionsExhaustedError`, and the
    agent starts a new epoch.  Each slot's last version is kept (state file,
    ``claim``) and the counter resumes above the highest of them.
    """

    MAX_VERSION = 0xFFFF

    def __init__(self, slots: int, last_versions: list[int] | None = None) -> None:
        self.slots = slots
        self._free = list(range(slots - 1, -1, -1))
        self._last_version = list(last_versions or [0] * slots)[:slots]
        self._last_version += [0] * (slots - len(self._last_version))
        self._top = max(self._last_version, default=0)

    def __len__(self) -> int:
        """Free slots."""
        return len(self._free)

    def take(self) -> tuple[int, int]:
        """A free slot and a version no entry of this switch had in this epoch; raises CacheFullError."""
        if not self._free:
            raise CacheFullError(f"all {self.slots} cache slots are in use; evict a key first")
        if self._top >= self.MAX_VERSION:
            raise VersionsExhaustedError(f"this switch has had all {self.MAX_VERSION} versions of this epoch")
        slot = self._free.pop()
        self._top += 1
        self._last_version[slot] = self._top
        return slot, self._top

    def claim(self, slot: int, version: int) -> None:
        """Mark ``slot`` used by an entry found on the switch (agent restart)."""
        if slot in self._free:
            self._free.remove(slot)
        self._last_version[slot] = version
        self._top = max(self._top, version)

    def give_back(self, slot: int) -> None:
        self._free.append(slot)

    def versions(self) -> list[int]:
        return list(self._last_version)

    def new_epoch(self) -> None:
        """Every version may be used again (the entries' tags changed with the epoch)."""
        self._last_version = [0] * self.slots
        self._top = 0


@dataclass
class CachedKey:
    slot: int
    version: int
    state: str  # what the shim answered: valid / absent / too_large / failed; pending; unknown after restart
    auto: bool = False
    hits: list[int] = field(default_factory=lambda: [0, 0])  # hits in the last two windows
    inserted_at: float = field(default_factory=time.monotonic)

    @property
    def recent_hits(self) -> int:
        return sum(self.hits)


@dataclass
class AgentCounters:
    digests: int = 0
    auto_inserted: int = 0
    evicted: int = 0
    rate_limited: int = 0
    switch_restarts: int = 0
    not_hotter: int = 0
    partition_evicted: int = 0
    not_owned: int = 0
    epoch_raises: int = 0
    fills_retried: int = 0


class SwitchAgent:
    """One cache switch's agent: P4Runtime primary, digest consumer, cache manager."""

    def __init__(
        self,
        cluster: Cluster,
        switch: Switch,
        p4info_path: str | Path,
        device_config: bytes,
        shim_for: Callable[[bytes], ShimLink],
        state_file: Path | None = None,
        grpc_host: str = "127.0.0.1",
        hit_window: float = 1.0,
    ) -> None:
        if switch.role not in (Role.SPINE, Role.STORAGE_LEAF):
            raise ValueError(f"{switch.name} is not a cache switch (role {switch.role.name})")
        self.cluster, self.switch = cluster, switch
        self.p4info = load_p4info(p4info_path)
        self.device_config = device_config
        self.shim_for = shim_for
        self.state_file = state_file
        self.address = f"{grpc_host}:{switch.grpc_port}"
        self.hit_window = hit_window
        self.slots = min(cluster.cache_slots, n.CACHE_SLOTS)
        self.epoch: int | None = None  # the cache_epoch our versions count in; None: unknown (no state)
        self.alloc = SlotAllocator(self.slots, self._load_state())
        self.bucket = TokenBucket(cluster.insert_rate, cluster.insert_burst)
        self.cached: dict[bytes, CachedKey] = {}
        self.counters = AgentCounters()
        self.conn: SwitchConnection | None = None
        self.plan: SwitchPlan | None = None
        self.buckets: list[int] = []
        self.live: set[int] | None = None
        self.replicated: frozenset[bytes] = frozenset()  # Hybrid: keys every spine may cache
        self.configured = False  # set by the first Configure; a restarted agent waits for the controller's
        self.lock = threading.RLock()  # cache state and every write to the switch
        self._stop = threading.Event()
        self._last_hits: dict[int, int] = {}
        self._refilling = threading.Event()  # a retry of incomplete populates is running (fill_again)
        self.insert_latencies_us: list[int] = []  # report received -> entry valid, last 1000 inserts
        self._threads: list[threading.Thread] = []

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        loops = [(self._digest_loop, "digests"), (self._hits_loop, "hits"), (self._watch_loop, "watch")]
        if self.switch.role == Role.STORAGE_LEAF:
            loops.append((self._probe_loop, "probes"))
        for target, name in loops:
            t = threading.Thread(target=target, name=f"{self.switch.name}-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(2)
        if self.conn is not None:
            self.conn.close()

    # -- configuration ----------------------------------------------------------------------------------
    def configure(
        self, cluster: Cluster, buckets: list[int], live: set[int] | None = None, replicated: Iterable[bytes] = ()
    ) -> None:
        """Install everything the switch needs for ``cluster``, ``buckets``, the ``live`` spines and
        Hybrid's ``replicated`` keys (idempotent).

        A connected agent only writes the difference (a controller restart changes nothing); a
        spine then evicts the keys of buckets it no longer owns, so it stops holding copies
        nobody reads and the shims stop invalidating it for them.
        """
        with self.lock:
            self.cluster, self.buckets = cluster, list(buckets)
            self.live = set(live) if live else None
            self.replicated = frozenset(replicated)
            self.plan = plan(cluster, self.switch, self.buckets, self.live, self.replicated)
            self.bucket = TokenBucket(cluster.insert_rate, cluster.insert_burst)
            if self.conn is not None and not self.conn.stream_closed.is_set():
                apply_plan(self.conn, self.plan)
            else:
                self._connect()
            self.configured = True
            moved = [k for k in self.cached if not self.owns(k)]
        for key in moved:
            if self.evict(key):
                self.counters.partition_evicted += 1
        if moved:
            log.info("%s: evicted %d keys whose buckets moved away", self.switch.name, len(moved))

    def owns(self, key: bytes) -> bool:
        """Whether this switch should cache ``key`` under the current partition and mechanism."""
        mech = self.cluster.mechanism
        if self.switch.role == Role.STORAGE_LEAF:
            return mech in LEAF_CACHING
        if mech in (Mechanism.NOCACHE, Mechanism.REPLICATION):
            return mech == Mechanism.REPLICATION
        if mech == Mechanism.HYBRID and key in self.replicated:
            return True
        return len(self.buckets) == n.SPINE_BUCKETS and self.buckets[h0(key)] == self.switch.switch_id

    def flush(self) -> int:
        """Evict every cached key; returns how many."""
        with self.lock:
            keys = list(self.cached)
        return sum(self.evict(k) for k in keys)

    def _connect(self, timeout: float = 10.0) -> bool:
        """Connect as primary, make sure the pipeline is there, and bring the entries to the plan.

        True if the switch had no pipeline (new, or restarted) and got it pushed, with an empty cache.
        """
        conn = SwitchConnection(self.address, self.switch.device_id, election_id=10, name=self.switch.name)
        try:
            conn.connect(timeout)
        except P4RuntimeError:
            conn.close()
            raise
        fresh = not conn.has_pipeline()
        if fresh:
            conn.set_pipeline(self.p4info, self.device_config)
            log.info("%s: pipeline pushed", self.switch.name)
        else:
            conn.use_p4info(self.p4info)
        old, self.conn = self.conn, conn
        if old is not None:
            old.close()
        if self.plan is not None:  # an agent not configured yet has no plan to bring the switch to
            apply_plan(conn, self.plan)
        if fresh:
            self._forget_cache("the switch came up empty")
        else:
            self._rebuild_cache(conn)
        if self._adopt_epoch(conn, fresh):
            self._refill_all()
        conn.enable_digest(n.HH_DIGEST, **DIGEST_DELIVERY)
        return fresh

    def _adopt_epoch(self, conn: SwitchConnection, fresh: bool) -> bool:
        """Make sure no tag handed out from now on can match a tag the switch's registers hold, or
        one a packet still on its way carries.

        Our per-slot versions are good only in the epoch they were counted in.  Unless our state
        names the epoch the switch is in, raise it: True if we did (every entry on the switch is
        invalid now).  A switch that came up empty is raised too, above every epoch it had in
        earlier lives (its registers start at zero, but a populate of an earlier life, delayed,
        could carry a tag we would hand out again).
        """
        _, params = conn.read_default(n.CACHE_EPOCH)
        on_switch = int(params["epoch"])
        if not fresh and self.epoch == on_switch:
            self._save_state()
            return False
        why = (
            "the switch came up empty"
            if fresh
            else "no state file"
            if self.epoch is None
            else f"state file says epoch {self.epoch}"
        )
        log.warning("%s: %s, switch is in epoch %d: raising it", self.switch.name, why, on_switch)
        self._raise_epoch(conn, self._next_epoch(on_switch))
        return not fresh

    def _next_epoch(self, on_switch: int) -> int:
        """An epoch above every one the switch has had (the model's "epoch clock").

        Above the switch's and our state's, and at least the wall clock's seconds: that is what
        vouches for the epochs of the switch's earlier lives when neither survived (a restarted
        switch is back at 0, an agent may lose its state file).  :meth:`_raise_epoch` puts an
        epoch to use only once the clock has passed it, so any epoch chosen later is above it.
        """
        return max(on_switch + 1, (self.epoch or 0) + 1, int(time.time()))

    def _raise_epoch(self, conn: SwitchConnection, epoch: int) -> None:
        """Move the switch to cache epoch ``epoch``: every entry's tag changes, so each is invalid
        until populated again; the entries present keep their versions (claimed in the new epoch)."""
        if epoch > 0xFFFFFFFF:
            raise P4RuntimeError(f"{self.switch.name}: cache_epoch exhausted; restart the switch", "OUT_OF_RANGE")
        ahead = epoch + 1 - time.time()
        if ahead > 0:  # (under a second, unless raises came faster than one a second)
            time.sleep(ahead)  # the clock passes the epoch before it is used (see _next_epoch)
        self.epoch = epoch
        self.alloc.new_epoch()
        for e in self.cached.values():
            self.alloc.claim(e.slot, e.version)
        self._save_state()  # first: a crash before the switch has the epoch only raises it once more
        conn.set_default(n.CACHE_EPOCH, n.SET_CACHE_EPOCH, {"epoch": epoch})
        self.counters.epoch_raises += 1

    def _refill_all(self) -> None:
        """Populate every entry again (its tag changed with the epoch), in the background."""
        for e in self.cached.values():
            e.state = "pending"
        keys = list(self.cached)
        if keys:
            threading.Thread(target=self._refill, args=(keys,), name=f"{self.switch.name}-refill", daemon=True).start()

    def _refill(self, keys: list[bytes], retry: bool = False) -> None:
        try:
            self._refill_keys(keys, retry)
        finally:
            if retry:
                self._refilling.clear()

    def _refill_keys(self, keys: list[bytes], retry: bool) -> None:
        filled = 0
        for key in keys:
            with self.lock:
                entry = self.cached.get(key)
            if entry is None or self._stop.is_set():
                continue
            state = self._populate(key, entry)
            with self.lock:
                if self.cached.get(key) is entry:
                    entry.state = state
                    filled += state == "valid"
        log.log(
            logging.DEBUG if retry else logging.INFO,
            "%s: %d of %d entries filled again in epoch %s",
            self.switch.name,
            filled,
            len(keys),
            self.epoch,
        )

    def _rebuild_cache(self, conn: SwitchConnection) -> None:
        """After an agent restart: the cache entries on the switch are the truth."""
        found = {}
        for match, action, params in conn.read_table(n.CACHE_LOOKUP):
            if action != n.CACHE_HIT:
                continue
            m = match[n.KEY_DC_KEY]  # an exact key: read back as an int
            key = (m if isinstance(m, int) else m.value).to_bytes(16, "big")
            found[key] = CachedKey(params["slot"], params["version"], "unknown")
        self.cached = found
        self.alloc = SlotAllocator(self.slots, self.alloc.versions())
        for e in found.values():
            self.alloc.claim(e.slot, e.version)
        log.info("%s: %d cached keys read back from the switch", self.switch.name, len(found))

    def _forget_cache(self, why: str) -> None:
        if self.cached:
            log.info("%s: %s; forgetting %d cached keys", self.switch.name, why, len(self.cached))
        for key in list(self.cached):
            self._tell_shim_evicted(key)
        self.cached = {}
        self.alloc = SlotAllocator(self.slots, self.alloc.versions())

    # -- inserting and evicting ---------------------------------------------------------------------
    def insert(
        self, key: bytes, *, auto: bool = False, estimate: float | None = None, budget: TokenBucket | None = None
    ) -> CachedKey | None:
        """Cache ``key`` here and have its server fill the value in.

        A full cache evicts its coldest key, but with ``estimate`` (a hot-key report's reads per
        hit window, :meth:`report_rate`) only if that key had REPLACE_MARGIN times fewer hits in
        the last window; and only then is ``budget`` (the insertion budget of reports) spent.
        None if the key was not inserted.
        """
        with self.lock:
            conn = self._need_conn()
            if key in self.cached:
                return self.cached[key]
            victim = None
            if not len(self.alloc):
                # a replica the controller placed (Hybrid) may take a young entry's slot: rebalancing
                # replicates only keys far hotter than any other, and must not wait out a churning cache
                victim = self._coldest(settled=not (estimate is None and self._pinned(key)))
                if victim is None or (
                    estimate is not None and self.cached[victim].hits[-1] * REPLACE_MARGIN >= estimate
                ):
                    if auto:
                        self.counters.not_hotter += 1
                    return None
            if budget is not None and not budget.take():
                self.counters.rate_limited += 1
                return None
            if victim is not None:
                self.evict(victim)
            try:
                slot, version = self.alloc.take()
            except VersionsExhaustedError as e:
                log.info("%s: %s", self.switch.name, e)
                self._raise_epoch(conn, self._next_epoch(self.epoch or 0))
                self._refill_all()
                slot, version = self.alloc.take()
            self._save_state()  # before the entry exists: a version once on the switch is never handed out again
            try:
                conn.insert(
                    n.CACHE_LOOKUP,
                    {n.KEY_DC_KEY: int.from_bytes(key, "big")},
                    n.CACHE_HIT,
                    {"slot": slot, "version": version},
                )
            except P4RuntimeError:
                self.alloc.give_back(slot)
                raise
            entry = CachedKey(slot, version, "pending", auto=auto)
            self.cached[key] = entry
        state = self._populate(key, entry)
        with self.lock:
            if self.cached.get(key) is entry:
                entry.state = state
        if auto:
            self.counters.auto_inserted += 1
        log.info(
            "%s: cached %s in slot %d (v%d)%s: %s",
            self.switch.name,
            key.hex(),
            slot,
            version,
            " from a report" if auto else "",
            state,
        )
        return entry

    def _populate(self, key: bytes, entry: CachedKey) -> str:
        """Ask the key's shim to fill ``entry``; its tag goes along, so only this populate arms it."""
        try:
            return self.shim_for(key).populate(key, self.switch.switch_id, self.epoch or 0, entry.version)
        except (ShimUnavailableError, ShimRequestError) as e:
            log.warning("%s: populate %s failed: %s", self.switch.name, key.hex(), e)
            return "failed"

    def evict(self, key: bytes) -> bool:
        with self.lock:
            entry = self.cached.pop(key, None)
            if entry is None:
                return False
            self._need_conn().delete(n.CACHE_LOOKUP, {n.KEY_DC_KEY: int.from_bytes(key, "big")})
            self.alloc.give_back(entry.slot)
            self.counters.evicted += 1
            # still under the lock: an insertion of the same key by another thread (reports, Cache, a refill)
            # must not populate it before the shim hears of this eviction, or the late Evict would remove
            # the new copy from the shim's view and writes would skip a valid copy
            self._tell_shim_evicted(key)
        log.info(
            "%s: evicted %s from slot %d (%d recent hits)", self.switch.name, key.hex(), entry.slot, entry.recent_hits
        )
        return True

    def _tell_shim_evicted(self, key: bytes) -> None:
        try:
            self.shim_for(key).evict(key, self.switch.switch_id)
        except (ShimUnavailableError, ShimRequestError) as e:  # the shim then still invalidates here: safe, only slower
            log.warning("%s: could not tell the shim %s is evicted: %s", self.switch.name, key.hex(), e)

    def _pinned(self, key: bytes) -> bool:
        """Whether ``key`` is one of Hybrid's replicated keys (the controller placed it in every spine)."""
        return self.cluster.mechanism == Mechanism.HYBRID and key in self.replicated

    def _coldest(self, settled: bool = True) -> bytes | None:
        """The cached key with the fewest hits in the last two windows (oldest first on ties).

        With ``settled``, entries younger than two hit windows are not candidates: their hits are
        not known yet (a fresh insert, or an entry read back after an agent restart), and evicting
        them would only make the cache thrash.  Hybrid's replicated keys are pinned: the controller
        placed them in every spine, and reads of them are spread over all spines.
        """
        since = time.monotonic() - 2 * self.hit_window if settled else float("inf")
        old = [k for k, e in self.cached.items() if e.inserted_at <= since and not self._pinned(k)]
        if not old:
            return None
        return min(old, key=lambda k: (self.cached[k].recent_hits, self.cached[k].inserted_at))

    def _need_conn(self) -> SwitchConnection:
        if self.conn is None:
            raise P4RuntimeError(
                f"{self.switch.name}: not configured yet (no Configure from the controller)", "FAILED_PRECONDITION"
            )
        return self.conn

    # -- background work ----------------------------------------------------------------------------
    def on_reports(self, rows: list[dict[str, int]], received: float | None = None) -> None:
        """Act on one DigestList's hot-key reports (``received``: when it arrived, time.monotonic())."""
        received = time.monotonic() if received is None else received
        for row in rows:
            self.counters.digests += 1
            key = int(row["key"]).to_bytes(16, "big")
            if not self.owns(key):  # reported before its bucket moved away (or the mechanism changed)
                self.counters.not_owned += 1
                continue
            try:
                e = self.insert(key, auto=True, estimate=self.report_rate(row), budget=self.bucket)
            except (P4RuntimeError, CacheFullError) as err:
                log.warning("%s: could not cache reported key %s: %s", self.switch.name, key.hex(), err)
                continue
            # an entry created after the report arrived is this report's insertion (not one already there)
            if e is not None and e.inserted_at >= received and e.state == "valid":
                self.insert_latencies_us.append(int((time.monotonic() - received) * 1e6))
                del self.insert_latencies_us[:-1000]

    def report_rate(self, row: dict[str, int]) -> float:
        """The reads per hit window a hot-key report implies.

        Every report counts about the threshold (the detector reports a key once its estimate
        reaches it), so its count alone cannot be held against a cached key's hits: under load
        every cached key has more, and no new key would ever replace one.  The report says how
        far into the detector's window the count was reached; the k-th read of a key read at
        rate r arrives after k/r on average, and (k-1)/t is the unbiased estimate of r.  The
        elapsed time is taken as at least 1/256 of the window, so a burst right at a window's
        start does not count as an unbounded rate.
        """
        window_us = 1 << self.cluster.hh_window_shift
        elapsed = max(int(row["elapsed_us"]), window_us >> 8, 1)
        reads = max(int(row["estimate"]) - 1, 1)
        return reads * self.hit_window * 1e6 / elapsed

    def _digest_loop(self) -> None:
        while not self._stop.is_set():
            conn = self.conn
            if conn is None:
                time.sleep(0.1)
                continue
            try:
                dl = conn.digest_lists.get(timeout=0.2)
            except queue.Empty:
                continue
            received = time.monotonic()
            try:
                name, rows = conn.decode_digest(dl)
                if name == n.HH_DIGEST:  # the only digest an agent enables (spine deaths go to the controller)
                    self.on_reports(rows, received)
            finally:
                conn.ack_digest(dl)

    def _probe_loop(self) -> None:
        """A storage leaf's probe source: one probe per spine every DP_PROBE_INTERVAL into our leaf, which
        then finds a stopped spine dead by itself (liveness.p4) and sends replies around it.  Only the
        primary may send packet-outs, so the controller cannot probe a storage leaf.  With this agent
        stopped nothing is probed there, and a leaf excludes no spine it is not asked about."""
        seq = 0
        while not self._stop.wait(DP_PROBE_INTERVAL):
            conn = self.conn
            if conn is None or not self.configured:
                continue
            with contextlib.suppress(P4RuntimeError):  # the stream is down: the watch loop reconnects
                seq = probe_round(conn, self.switch, (self.cluster.spine(i) for i in range(self.cluster.spines)), seq)

    def _hits_loop(self) -> None:
        while not self._stop.wait(self.hit_window):
            try:
                self.sample_hits()
            except P4RuntimeError as e:
                log.debug("%s: hit counters not read: %s", self.switch.name, e)
            self.fill_again()

    #: populate outcomes worth another try: the shim could not complete it, or refused the switch for now
    RETRY_STATES = frozenset({"failed", "down"})

    def fill_again(self) -> int:
        """Populate again, in the background, the entries whose populate did not complete; how many.

        Such an entry is invalid and takes a slot, and the detector no longer reports its key (the key is
        in the table), so without this a hot key could stay uncached until it is evicted.  Each try is a
        populate like the first (its own tag, a new seq at the shim): it arms the entry only if no write
        passed it since (coherence.p4's floor).
        """
        if self.conn is None or self._refilling.is_set():
            return 0
        with self.lock:
            keys = [k for k, e in self.cached.items() if e.state in self.RETRY_STATES]
            for k in keys:
                self.cached[k].state = "pending"
        if keys:
            self.counters.fills_retried += len(keys)
            self._refilling.set()
            threading.Thread(
                target=self._refill, args=(keys, True), name=f"{self.switch.name}-retry", daemon=True
            ).start()
        return len(keys)

    def sample_hits(self) -> None:
        """Shift every cached key's hit window: hits since the last sample become the newest."""
        conn = self.conn
        if conn is None:
            return
        cells = self._slot_hits(conn)
        with self.lock:
            for e in self.cached.values():
                total = cells.get(e.slot, (0, 0))[0]
                last = self._last_hits.get(e.slot, total if e.state == "unknown" else 0)
                e.hits = [e.hits[-1], max(0, total - last)]
            self._last_hits = {e.slot: cells.get(e.slot, (0, 0))[0] for e in self.cached.values()}

    def _slot_hits(self, conn: SwitchConnection) -> dict[int, tuple[int, int]]:
        """The cache_hits cells of the slots in use (not all CACHE_SLOTS: see read_counter)."""
        with self.lock:
            slots = sorted({e.slot for e in self.cached.values()})
        return conn.read_counter(n.CACHE_HITS, indexes=slots)

    def _watch_loop(self) -> None:
        """Reconnect when the switch's stream breaks (switch restarted or unreachable)."""
        while not self._stop.wait(0.2):
            conn = self.conn
            if conn is None or not conn.stream_closed.is_set():
                continue
            log.warning("%s: lost the P4Runtime stream; reconnecting", self.switch.name)
            while not self._stop.is_set():
                probe = SwitchConnection(self.address, self.switch.device_id, name=self.switch.name)
                back = probe.probe(timeout=1.0)  # without the lock: status calls go on while the switch is away
                probe.close()
                if not back:
                    time.sleep(0.1)
                    continue
                try:
                    with self.lock:
                        fresh = self._connect(timeout=2.0)
                        if fresh:
                            self.counters.switch_restarts += 1
                    log.info(
                        "%s: reconnected (%s)",
                        self.switch.name,
                        "pipeline re-pushed, cache empty" if fresh else "state kept",
                    )
                    break
                except (P4RuntimeError, grpc.RpcError) as e:
                    log.debug("%s: reconnect failed: %s", self.switch.name, e)
                    time.sleep(0.1)

    # -- persistence --------------------------------------------------------------------------------
    def _load_state(self) -> list[int] | None:
        """Per-slot versions and the epoch they count in, from the state file; None without one.

        A file that exists but cannot be used is refused (StateFileError), never silently
        ignored: the operator removes it (the agent then raises the switch's cache epoch) or
        points at the right one.
        """
        if self.state_file is None or not self.state_file.exists():
            log.info("%s: no state file: the switch's cache epoch will be raised", self.switch.name)
            return None
        where = f"agent state file {self.state_file}"
        try:
            d = json.loads(self.state_file.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise StateFileError(f"{where} is unreadable ({e}); remove it to start afresh") from None
        owner = d.get("switch") if isinstance(d, dict) else None
        if owner != self.switch.name:
            raise StateFileError(
                f"{where} is not {self.switch.name}'s (it names {owner!r}); "
                "pass this switch's file, or remove it to start afresh"
            )
        versions, epoch = d.get("last_versions"), d.get("epoch")
        if (
            not isinstance(versions, list)
            or not all(type(v) is int and 0 <= v <= SlotAllocator.MAX_VERSION for v in versions)
            or not (epoch is None or (type(epoch) is int and 0 <= epoch <= 0xFFFFFFFF))
        ):
            raise StateFileError(
                f"{where} is malformed (expected last_versions: [0..65535], epoch: 0..2^32-1); "
                "remove it to start afresh"
            )
        self.epoch = epoch
        return versions

    def _save_state(self) -> None:
        if self.state_file is None:
            return
        tmp = self.state_file.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({"switch": self.switch.name, "epoch": self.epoch, "last_versions": self.alloc.versions()}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_file)

    # -- status -------------------------------------------------------------------------------------
    def status(self, with_keys: bool = False) -> agent_pb2.AgentStatus:
        with self.lock:
            conn = self.conn
            st = agent_pb2.AgentStatus(
                switch=self.switch.name,
                switch_id=self.switch.switch_id,
                switch_connected=conn is not None and not conn.stream_closed.is_set(),
                slots=self.slots,
                occupied=len(self.cached),
                configured=self.configured,
                digests_dropped=conn.digests_dropped if conn is not None else 0,
                cache_epoch=self.epoch or 0,
                **vars(self.counters),
            )
            lat = sorted(self.insert_latencies_us)
            if lat:
                st.insert_latency_p50_us, st.insert_latency_max_us = lat[len(lat) // 2], lat[-1]
            if with_keys:
                cells = {}
                if conn is not None and st.switch_connected:
                    try:
                        cells = self._slot_hits(conn)
                    except P4RuntimeError as e:
                        log.debug("%s: cache_hits not read: %s", self.switch.name, e)
                for k, entry in self.cached.items():
                    st.keys.append(_cached_pb(k, entry))
                    st.slot_hits.append(cells.get(entry.slot, (0, 0))[0])
            return st


def _cached_pb(key: bytes, e: CachedKey) -> agent_pb2.CachedKey:
    return agent_pb2.CachedKey(key=key, slot=e.slot, version=e.version, state=e.state, hits=e.recent_hits, auto=e.auto)


class AgentService(agent_grpc.AgentServicer):
    """The agent API (distcache/proto/agent.proto) over one :class:`SwitchAgent`."""

    def __init__(self, agent: SwitchAgent) -> None:
        self.agent = agent

    def Configure(self, request, context):  # noqa: ANN001, ANN201, N802
        try:
            cluster = Cluster.from_json(request.cluster_json)
            buckets = list(request.buckets)
            if len(buckets) != n.SPINE_BUCKETS:
                abort(
                    context,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"buckets: expected {n.SPINE_BUCKETS} spine ids, got {len(buckets)}",
                )
            self.agent.configure(cluster, buckets, set(request.live_spines), [bytes(k) for k in request.replicated])
        except (ValueError, TypeError) as e:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"bad cluster: {e}")
        except P4RuntimeError as e:
            abort(context, grpc.StatusCode.UNAVAILABLE, str(e))
        return self.agent.status()

    def Status(self, request, context):  # noqa: ANN001, ANN201, N802, ARG002
        return self.agent.status(request.with_keys)

    def Cache(self, request, context):  # noqa: ANN001, ANN201, N802
        if len(request.key) != 16:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, "key: a 16-byte wire key (distcache.hashing.wire_key)")
        try:
            e = self.agent.insert(bytes(request.key))
        except CacheFullError as err:
            abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(err))
        except P4RuntimeError as err:
            abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(err))
        if e is None:
            abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "the cache is full of keys inserted in the last two "
                "hit windows (not evictable yet); evict one (Evict) or try again in a few seconds",
            )
        return _cached_pb(bytes(request.key), e)

    def Evict(self, request, context):  # noqa: ANN001, ANN201, N802
        try:
            return agent_pb2.EvictReply(evicted=self.agent.evict(bytes(request.key)))
        except P4RuntimeError as err:
            abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(err))

    def Flush(self, request, context):  # noqa: ANN001, ANN201, N802, ARG002
        try:
            self.agent.flush()
        except P4RuntimeError as err:
            abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(err))
        return self.agent.status()


class AgentClient:
    """The controller's side of the agent API."""

    def __init__(self, address: str, timeout: float = 30.0) -> None:
        self.address, self.timeout = address, timeout
        self.channel = grpc.insecure_channel(address)
        self.stub = agent_grpc.AgentStub(self.channel)

    def wait_ready(self, timeout: float = 15.0) -> None:
        try:
            grpc.channel_ready_future(self.channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise ConnectionError(
                f"no agent answers at {self.address}; is it running (python -m controller.agent --help)?"
            ) from None

    def configure(
        self, cluster: Cluster, buckets: list[int], live: set[int] | None = None, replicated: Iterable[bytes] = ()
    ) -> agent_pb2.AgentStatus:
        return self.stub.Configure(
            agent_pb2.ConfigureRequest(
                cluster_json=cluster.to_json(),
                buckets=buckets,
                live_spines=sorted(live or ()),
                replicated=sorted(replicated),
            ),
            timeout=self.timeout,
        )

    def flush(self) -> agent_pb2.AgentStatus:
        return self.stub.Flush(agent_pb2.StatusRequest(), timeout=self.timeout)

    def status(self, with_keys: bool = False) -> agent_pb2.AgentStatus:
        return self.stub.Status(agent_pb2.StatusRequest(with_keys=with_keys), timeout=self.timeout)

    def cache(self, key: bytes) -> agent_pb2.CachedKey:
        return self.stub.Cache(agent_pb2.KeyRequest(key=key), timeout=self.timeout)

    def evict(self, key: bytes) -> bool:
        return self.stub.Evict(agent_pb2.KeyRequest(key=key), timeout=self.timeout).evicted

    def close(self) -> None:
        self.channel.close()


def shim_links(cluster: Cluster, shim_dir: Path) -> Callable[[bytes], ShimLink]:
    """Key -> the control link of its storage shim (Unix sockets named as dcnet.deploy names them)."""

    def shim_for(key: bytes) -> ShimLink:
        return ShimLink(f"unix:{shim_dir / f'shim-{cluster.server_for_key(key).name}.sock'}")

    return shim_for


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m controller.agent", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", required=True, type=input_file, help="cluster.json of the deployment")
    ap.add_argument("--switch", required=True, help="name of the cache switch (e.g. sp0, sl1)")
    ap.add_argument("--p4info", required=True, type=input_file, help="P4Info (text) of the pipeline")
    ap.add_argument("--device-config", type=input_file, help="device config file (BMv2 JSON); none for softswitch")
    ap.add_argument("--shim-dir", required=True, type=existing_dir, help="folder with the shims' control sockets")
    ap.add_argument("--state-file", type=output_file, help="where the agent keeps its per-slot version tags")
    ap.add_argument("--listen", type=listen_address, help="agent API address (default: the cluster's, on loopback)")
    ap.add_argument("--log-file", type=output_file)
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, filename=args.log_file, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    cluster = load_cluster(ap, args.cluster)
    try:
        sw = cluster.switch(args.switch)
    except KeyError as e:
        ap.error(e.args[0])
    device_config = args.device_config.read_bytes() if args.device_config else b""
    try:
        agent = SwitchAgent(
            cluster, sw, args.p4info, device_config, shim_links(cluster, args.shim_dir), state_file=args.state_file
        )
    except StateFileError as e:
        ap.exit(2, f"{ap.prog}: error: {e}\n")
    except (ValueError, OSError) as e:  # not a cache switch, a P4Info that is not one
        ap.error(str(e))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    agent_grpc.add_AgentServicer_to_server(AgentService(agent), server)
    listen = args.listen or cluster.agent_address(sw)
    if not server.add_insecure_port(listen):
        ap.error(f"cannot listen on {listen}")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    agent.start()
    log.info("agent of %s serving on %s", sw.name, listen)
    stop.wait()
    server.stop(1)
    agent.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
