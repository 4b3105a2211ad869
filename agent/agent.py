"""SwitchAgent: one cache switch's agent -- P4Runtime primary, digest consumer, cache manager (the design
is in the package docstring, agent/__init__.py)."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

import grpc

from agent.slots import AgentCounters, CachedKey, CacheFullError, SlotAllocator, VersionsExhaustedError, next_epoch
from agent.state import load_state, save_state
from agent.status import Snapshot, status_pb
from distcache import p4names
from distcache.cluster import Cluster, Mechanism, Role, Switch
from distcache.fill import RETRIED, Fill
from distcache.placement import placement, spine_holds
from distcache.ratelimit import TokenBucket
from distcache.replacement import REPLACE_MARGIN
from distcache.rpc.protos import agent_pb2
from distcache.rpc.shim import ShimLink, ShimRequestError, ShimUnavailableError
from p4rt.client import P4RuntimeError, SwitchConnection
from p4rt.p4info import load_p4info
from p4rt.plan import SwitchPlan, plan
from p4rt.probes import DP_PROBE_INTERVAL, ProbeSource
from p4rt.reconcile import apply_plan

log = logging.getLogger("agent")

#: Connecting to the switch from Configure or after its stream broke.  The controller waits for a Configure under
#: its lock, where no switch's death can be handled: a Configure that waited 10 s for a switch killed just before
#: it, and the reconciler's retry after it, left a dead spine undetected for 22 s in the fault matrix while every
#: write to a key it held timed out.  A switch that does not answer within it fails the call; the controller
#: tries again later.
CONNECT_TIMEOUT = 2.0
# hot-key reports in lists of up to 16, sent within 10 ms; unacknowledged duplicates held back 0.5 s
DIGEST_DELIVERY = {"max_timeout_ns": 10_000_000, "max_list_size": 16, "ack_timeout_ns": 500_000_000}


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
        self.slots = min(cluster.cache_slots, p4names.CACHE_SLOTS)
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
                self._connect(CONNECT_TIMEOUT)
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
            return placement(mech, key, self.replicated).leaf
        return spine_holds(mech, self.switch.switch_id, self.buckets, key, self.replicated)

    def flush(self) -> int:
        """Evict every cached key; returns how many."""
        with self.lock:
            keys = list(self.cached)
        return sum(self.evict(k) for k in keys)

    def _connect(self, timeout: float) -> bool:
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
        conn.enable_digest(p4names.HH_DIGEST, **DIGEST_DELIVERY)
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
        _, params = conn.read_default(p4names.CACHE_EPOCH)
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
        self._raise_epoch(conn, next_epoch(on_switch, self.epoch))
        return not fresh

    def _raise_epoch(self, conn: SwitchConnection, epoch: int) -> None:
        """Move the switch to cache epoch ``epoch``: every entry's tag changes, so each is invalid
        until populated again; the entries present keep their versions (claimed in the new epoch)."""
        if epoch > 0xFFFFFFFF:
            raise P4RuntimeError(f"{self.switch.name}: cache_epoch exhausted; restart the switch", "OUT_OF_RANGE")
        ahead = epoch + 1 - time.time()
        if ahead > 0:  # (under a second, unless raises came faster than one a second)
            time.sleep(ahead)  # the clock passes the epoch before it is used (see agent.slots.next_epoch)
        self.epoch = epoch
        self.alloc.new_epoch()
        for e in self.cached.values():
            self.alloc.claim(e.slot, e.version)
        self._save_state()  # first: a crash before the switch has the epoch only raises it once more
        conn.set_default(p4names.CACHE_EPOCH, p4names.SET_CACHE_EPOCH, {"epoch": epoch})
        self.counters.epoch_raises += 1

    def _refill_all(self) -> None:
        """Populate every entry again (its tag changed with the epoch), in the background."""
        for e in self.cached.values():
            e.state = Fill.PENDING
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
                    filled += state == Fill.VALID
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
        for match, action, params in conn.read_table(p4names.CACHE_LOOKUP):
            if action != p4names.CACHE_HIT:
                continue
            m = match[p4names.KEY_DC_KEY]  # an exact key: read back as an int
            key = (m if isinstance(m, int) else m.value).to_bytes(16, "big")
            found[key] = CachedKey(params["slot"], params["version"], Fill.UNKNOWN)
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
        self,
        key: bytes,
        *,
        auto: bool = False,
        estimate: float | None = None,
        budget: TokenBucket | None = None,
        name: bytes = b"",
    ) -> CachedKey | None:
        """Cache ``key`` (a digest; ``name``: the key, if known) here and have its server fill the value in.

        A full cache evicts its coldest key, but with ``estimate`` (a hot-key report's reads per hit window,
        :meth:`report_rate`) only if that key had REPLACE_MARGIN times fewer hits in the last window; and only
        then is ``budget`` (the insertion budget of reports) spent.  None if the key was not inserted.
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
                self._raise_epoch(conn, next_epoch(self.epoch or 0, self.epoch))
                self._refill_all()
                slot, version = self.alloc.take()
            self._save_state()  # before the entry exists: a version once on the switch is never handed out again
            try:
                conn.insert(
                    p4names.CACHE_LOOKUP,
                    {p4names.KEY_DC_KEY: int.from_bytes(key, "big")},
                    p4names.CACHE_HIT,
                    {"slot": slot, "version": version},
                )
            except P4RuntimeError:
                self.alloc.give_back(slot)
                raise
            entry = CachedKey(slot, version, Fill.PENDING, auto=auto, name=name)
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

    def _populate(self, key: bytes, entry: CachedKey) -> Fill:
        """Ask the key's shim to fill ``entry``; its tag goes along, so only this populate arms it."""
        try:
            shim, switch = self.shim_for(key), self.switch.switch_id
            return Fill.of(shim.populate(key, switch, self.epoch or 0, entry.version, entry.name))
        except (ShimUnavailableError, ShimRequestError) as e:
            log.warning("%s: populate %s failed: %s", self.switch.name, key.hex(), e)
            return Fill.FAILED

    def evict(self, key: bytes) -> bool:
        with self.lock:
            entry = self.cached.pop(key, None)
            if entry is None:
                return False
            self._need_conn().delete(p4names.CACHE_LOOKUP, {p4names.KEY_DC_KEY: int.from_bytes(key, "big")})
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
            if e is not None and e.inserted_at >= received and e.state == Fill.VALID:
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
                if name == p4names.HH_DIGEST:  # the only digest an agent enables (spine deaths go to the controller)
                    self.on_reports(rows, received)
            finally:
                conn.ack_digest(dl)

    def _probe_loop(self) -> None:
        """A storage leaf's probe source: one probe per spine every DP_PROBE_INTERVAL into our leaf, which
        then finds a stopped spine dead by itself (liveness.p4) and sends replies around it.  Only the
        primary may send packet-outs, so the controller cannot probe a storage leaf.  With this agent
        stopped nothing is probed there, and a leaf excludes no spine it is not asked about."""
        source = ProbeSource(self.switch)  # into the leaf's probe port where it has one (p4rt.probes)
        try:
            while not self._stop.wait(DP_PROBE_INTERVAL):
                conn = self.conn
                if conn is None or not self.configured:
                    continue
                with contextlib.suppress(P4RuntimeError):  # the stream is down: the watch loop reconnects
                    source.round(conn, (self.cluster.spine(i) for i in range(self.cluster.spines)))
        finally:
            source.close()

    def _hits_loop(self) -> None:
        while not self._stop.wait(self.hit_window):
            try:
                self.sample_hits()
            except P4RuntimeError as e:
                log.debug("%s: hit counters not read: %s", self.switch.name, e)
            self.fill_again()

    #: populate outcomes worth another try: the shim could not complete it, or refused the switch for now

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
            keys = [k for k, e in self.cached.items() if e.state in RETRIED]
            for k in keys:
                self.cached[k].state = Fill.PENDING
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
        cells = self.slot_hits(conn)
        with self.lock:
            for e in self.cached.values():
                total = cells.get(e.slot, (0, 0))[0]
                last = self._last_hits.get(e.slot, total if e.state == Fill.UNKNOWN else 0)
                e.hits = [e.hits[-1], max(0, total - last)]
            self._last_hits = {e.slot: cells.get(e.slot, (0, 0))[0] for e in self.cached.values()}

    def slot_hits(self, conn: SwitchConnection) -> dict[int, tuple[int, int]]:
        """The cache_hits cells of the slots in use (not all CACHE_SLOTS: see read_counter)."""
        with self.lock:
            slots = sorted({e.slot for e in self.cached.values()})
        return conn.read_counter(p4names.CACHE_HITS, indexes=slots)

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
                        fresh = self._connect(CONNECT_TIMEOUT)
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
        """Per-slot versions from the state file (its epoch becomes ours); None without one."""
        got = load_state(self.state_file, self.switch.name)
        if got is None:
            return None
        versions, self.epoch = got
        return versions

    def _save_state(self) -> None:
        save_state(self.state_file, self.switch.name, self.epoch, self.alloc.versions())

    # -- status -------------------------------------------------------------------------------------
    def snapshot(self, with_keys: bool = False) -> Snapshot:
        """This agent as it is now, copied under its lock (one consistent picture); ``with_keys``: every cached
        key too, with its slot's hits read from the switch."""
        with self.lock:
            conn = self.conn
            connected = conn is not None and not conn.stream_closed.is_set()
            hits: dict[int, int] = {}
            if with_keys and conn is not None and connected:
                try:
                    hits = {slot: cell[0] for slot, cell in self.slot_hits(conn).items()}
                except P4RuntimeError as e:
                    log.debug("%s: cache_hits not read: %s", self.switch.name, e)
            return Snapshot(
                switch=self.switch,
                slots=self.slots,
                occupied=len(self.cached),
                configured=self.configured,
                connected=connected,
                digests_dropped=conn.digests_dropped if conn is not None else 0,
                cache_epoch=self.epoch or 0,
                counters=replace(self.counters),
                insert_latencies_us=sorted(self.insert_latencies_us),
                keys=[(k, replace(e, hits=list(e.hits))) for k, e in self.cached.items()] if with_keys else [],
                slot_hits=hits,
            )

    def status(self, with_keys: bool = False) -> agent_pb2.AgentStatus:
        return status_pb(self.snapshot(with_keys))
