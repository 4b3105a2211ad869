"""The storage-server shim: DistCache over UDP in front of one redis-server.

It answers GET/PUT/DELETE from clients out of its own Redis (redis-py's
asyncio client with hiredis), runs the coherence protocol for keys that some
switch caches, and fills caches on request of the switch agents.  Writes to a
key are serialized (one asyncio lock per key in use), and every write checks
under that lock whether the key is cached, so a write can never slip between
a cache insertion and its population.  Malformed datagrams are counted by
reason and dropped; nothing a client sends can stop the shim.

**Which copies a write invalidates.**  Invariant: every switch in service
that may hold a valid copy of key k is in ``cached[k]`` or not in ``known``
(the switches whose cached keys this shim knows).  An agent's populate adds
its switch to ``cached[k]`` before any copy can become valid; only the agent's
evict, after the entry is gone from the switch, removes it.  A shim that
starts knows nothing (``known`` is empty: switches may hold copies a previous
life of this shim validated, whether or not its state file survived), except
on the deployment's very first start (``fresh``: the switches were just
started empty); the controller's view adds the switches whose agents it
heard from.  A write of k invalidates every such switch not declared down:
one path per spine (each passes the storage leaf) and, if the leaf may hold
a copy and no spine path is taken or acknowledged, a path that ends at the
leaf.  A spine declared down while its path is pending does not count as an
acknowledgement for the leaf before it.  So routing, partition and mechanism
changes, restarts and failovers never leave a stale copy where a read can
reach it: the controller keeps reads away from a spine declared down and
flushes it before it comes back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import cast

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from distcache.cluster import Cluster, Host
from distcache.hashing import N_SPINE_BUCKETS
from distcache.partition import spine_buckets
from distcache.ratelimit import TokenBucket
from distcache.wire import DC_PORT, MAX_CACHEABLE, REQUEST_OPS, Message, Op, Status, WireError, decode, encode
from shim.coherence import ACKED, RELEASED, Coherence
from shim.dedup import Dedup, RequestId, dedup_marker
from shim.redis_writes import MARKER_ERROR, WriteBatcher

log = logging.getLogger(__name__)

CoherenceAddress = Callable[[int], tuple[str, int]]
MAX_IN_FLIGHT = 4096  # requests being served at once; beyond, new ones are dropped and counted
MGETS_IN_FLIGHT = 1  # read batches at Redis at once: reads arriving meanwhile leave together with the next
# (1 gave the biggest batches: 29 us of shim CPU per GET against 48 us with 2, make bench-shim)
MAX_BATCH = 256  # reads per MGET
REDIS_WATCH_INTERVAL = 0.2  # seconds between checks that the shim's redis-server is the same process


class StaleViewError(ValueError):
    """A cached-key view collected for another incarnation of this shim."""


class ShimProtocol(asyncio.DatagramProtocol):
    def __init__(self, shim: Shim) -> None:
        self.shim = shim

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.shim.on_datagram(data, addr)

    def error_received(self, exc: Exception) -> None:
        log.debug("UDP error: %s", exc)


class Shim:
    def __init__(
        self,
        cluster: Cluster,
        server: Host,
        redis_url: str,
        listen: str | None = None,
        port: int = DC_PORT,
        coherence_address: CoherenceAddress | None = None,
        state_file: Path | None = None,
        unsafe_ack_first: float = 0.0,
        fresh: bool = False,
    ) -> None:
        self.cluster, self.server = cluster, server
        # TEST ONLY: break coherence on purpose (acknowledge a write, wait this long, then invalidate), so the
        # linearizability check can show it catches a broken protocol (make linearizability's control run)
        self.unsafe_ack_first = unsafe_ack_first
        self.state_file = state_file
        self.listen, self.port = listen or server.ip, port
        self.redis = aioredis.from_url(redis_url)
        self.writes = WriteBatcher(self.redis)
        self.coherence_address = coherence_address or (lambda spine_id: (Cluster.spine_address(spine_id), DC_PORT))
        self.buckets: list[int] = spine_buckets([cluster.spine(i).switch_id for i in range(cluster.spines)])
        self.down: set[int] = set()  # switches the controller declared down: no acks awaited from them
        # whether ``down`` is the controller's (from it or our state file): until then no spine is populated,
        # as it may be one the controller declared down, whose copies writes would then skip
        self.down_known = fresh
        self.epoch = 0  # the controller's partition epoch this view came with
        self.leaf_id = cluster.storage_leaf(server.rack).switch_id  # on every coherence path of this server
        self.spine_ids = frozenset(cluster.spine(i).switch_id for i in range(cluster.spines))
        self.cache_switches = self.spine_ids | {self.leaf_id}  # the switches that may cache our keys
        self.fresh = fresh
        # switches whose cached keys we know (every other one counts as caching every key)
        self.known: set[int] = set(self.cache_switches) if fresh else set()
        self.incarnation = secrets.randbits(63)  # a view collected before we started is refused (add_view)
        self.cached: dict[bytes, set[int]] = defaultdict(set)  # key -> switch ids caching it
        self._locks: dict[bytes, asyncio.Lock] = {}
        self._saving = asyncio.Lock()  # one state-file write at a time (set_partition_durably)
        self._users: Counter[bytes] = Counter()
        self.transport: asyncio.DatagramTransport | None = None
        self.coherence = Coherence(send=self._send)
        self._load_state()
        # the storage server's capacity (paper §6: rate-limited servers): requests beyond it wait their turn,
        # up to the cluster's server_queue seconds, and are dropped (counted) beyond that, as a saturated
        # server's queue would
        self.limiter = TokenBucket(cluster.server_rate, cluster.server_burst) if cluster.server_rate else None
        self.requests: Counter[str] = Counter()
        self.malformed: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.duplicates: Counter[str] = Counter()  # retried writes not applied again: replayed / in_progress
        self.dedup = Dedup()
        self._recheck_until = 0.0  # until then, new write ids are looked up in Redis (set by start)
        self._watcher: asyncio.Task | None = None
        self._redis_run_id = ""
        self.redis_down = False
        self.redis_restarts = 0
        self.resynced: Counter[str] = Counter()  # cached copies populated again after a Redis restart, by state
        self._tasks: set[asyncio.Task] = set()
        self._gets: list[tuple[Message, tuple[str, int]]] = []  # reads waiting for the next MGET
        self._mgets_in_flight = 0
        self._flush_scheduled = False
        self.batches = 0

    # -- lifecycle --------------------------------------------------------------------
    async def start(self) -> None:
        await self.redis.ping()
        if not self.fresh:  # maybe a restart (with or without the state file): clients may still retry writes
            # our previous life applied; for as long as retries live, ask Redis before applying one we do not know
            self._recheck_until = time.monotonic() + self.dedup.ttl
        self._redis_run_id = (await self.redis.info("server"))["run_id"]
        loop = asyncio.get_running_loop()
        self.transport, _ = await loop.create_datagram_endpoint(
            lambda: ShimProtocol(self), local_addr=(self.listen, self.port)
        )
        self._watcher = loop.create_task(self._watch_redis())

    async def _watch_redis(self) -> None:
        """Notice a restart of the shim's redis-server (a new run_id) and resynchronize the caches.

        A restarted Redis holds what its append-only file kept: with ``appendfsync always`` every
        acknowledged write, with a laxer policy possibly less.  Copies in switches may hold values
        it no longer has, and the shim cannot vouch for them: every cached key is refreshed as if
        written again with what Redis holds now (phase 1 invalidates every copy, phase 2 fills it).
        """
        while True:
            await asyncio.sleep(REDIS_WATCH_INTERVAL)
            try:
                run_id = (await self.redis.info("server"))["run_id"]
            except (RedisConnectionError, RedisTimeoutError, OSError):
                self.redis_down = True
                continue
            self.redis_down = False
            if run_id == self._redis_run_id:
                continue
            self._redis_run_id = run_id
            self.redis_restarts += 1
            keys = list(self.cached)
            if not self.view_known:
                log.warning(
                    "redis-server restarted while the cached keys of switches %s are unknown: "
                    "their copies are refreshed when each key is next written",
                    sorted(self.cache_switches - self.known - self.down),
                )
            log.warning("redis-server restarted: resynchronizing %d cached keys", len(keys))
            for key in keys:
                self.resynced[await self._refresh(key)] += 1

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        if self.transport is not None:
            self.transport.close()
        for t in list(self._tasks):
            t.cancel()
        await self.redis.aclose()

    def _send(self, data: bytes, dest: tuple[str, int]) -> None:
        if self.transport is not None:
            self.transport.sendto(data, dest)

    # -- datagrams --------------------------------------------------------------------
    def on_datagram(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            msg = decode(data)
        except WireError as e:
            self.malformed[e.reason] += 1
            return
        if msg.op in REQUEST_OPS:
            self.requests[msg.op.name] += 1
            if len(self._tasks) + len(self._gets) >= MAX_IN_FLIGHT:  # bounded work: a flood is dropped, counted
                self.errors["overload"] += 1
                return
            wait = self.limiter.reserve(self.cluster.server_queue) if self.limiter else 0.0
            if wait is None:
                self.errors["rate_limited"] += 1
                return
            if msg.op != Op.GET:
                rid = (addr[0], addr[1], msg.seq)
                done = self.dedup.begin(rid)
                if done is not None:  # a retry of a write already applied (or being applied): never again
                    self.duplicates["replayed" if done else "in_progress"] += 1
                    if done and self.transport is not None:
                        self.transport.sendto(done, addr)
                    return
                if time.monotonic() < self._recheck_until:  # our memory is younger than a client's retries
                    task = asyncio.get_running_loop().create_task(self._serve_unless_applied(msg, addr, wait))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                    return
            if msg.op == Op.GET and not wait:
                self._batch_get(msg, addr)
                return
            task = asyncio.get_running_loop().create_task(self._serve(msg, addr, wait))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif msg.op in (Op.INVALIDATE_ACK, Op.UPDATE_ACK):
            self.coherence.on_ack(msg)
        else:
            self.malformed["unexpected_op"] += 1

    # -- reads, batched ------------------------------------------------------------------
    def _batch_get(self, msg: Message, addr: tuple[str, int]) -> None:
        """Queue a read; queued reads go to Redis together, as one MGET.

        At most MGETS_IN_FLIGHT batches are at Redis at once; reads arriving meanwhile queue up
        and leave as the next batch when one comes back.  Under load one round trip (and one task)
        serves many reads, which is what lets one Python process keep up with Redis; when idle a
        read leaves at once.  Reads take no lock: each is linearized where Redis executes it.
        """
        self._gets.append((msg, addr))
        if self._mgets_in_flight < MGETS_IN_FLIGHT and not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_gets)

    def _flush_gets(self) -> None:
        self._flush_scheduled = False
        if not self._gets or self._mgets_in_flight >= MGETS_IN_FLIGHT:
            return
        batch, self._gets = self._gets[:MAX_BATCH], self._gets[MAX_BATCH:]
        self._mgets_in_flight += 1
        task = asyncio.get_running_loop().create_task(self._serve_gets(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve_gets(self, batch: list[tuple[Message, tuple[str, int]]]) -> None:
        try:
            values = cast("list[bytes | None]", await self.redis.mget([m.key for m, _ in batch]))  # bytes client
        except Exception as e:  # noqa: BLE001 - a failed read changed nothing: answer ERROR, keep serving
            self.errors[
                "redis_unavailable" if isinstance(e, (RedisConnectionError, RedisTimeoutError)) else type(e).__name__
            ] += len(batch)
            values = None
        finally:
            self._mgets_in_flight -= 1
            if self._gets and not self._flush_scheduled:
                self._flush_scheduled = True
                asyncio.get_running_loop().call_soon(self._flush_gets)
        send = self.transport.sendto if self.transport is not None else None
        if send is None:
            return
        for i, (m, addr) in enumerate(batch):
            value = None if values is None else values[i]
            if values is None:
                send(encode(m.reply(Status.ERROR)), addr)
            elif value is None:
                send(encode(m.reply(Status.NOT_FOUND)), addr)
            else:
                send(encode(m.reply(Status.OK, value)), addr)
        self.batches += 1

    async def _serve_unless_applied(self, msg: Message, addr: tuple[str, int], wait: float) -> None:
        """After a restart: a write whose marker is in Redis was applied by our previous life; answer it again,
        with the status it had (a DELETE's marker says whether the key existed: OK or NOT_FOUND)."""
        try:
            marker = cast("bytes | None", await self.redis.get(dedup_marker((addr[0], addr[1], msg.seq))))
        except (RedisConnectionError, RedisTimeoutError):
            self.errors["redis_unavailable"] += 1
            return  # no answer: the client retries
        if marker is None:
            await self._serve(msg, addr, wait)
            return
        self.duplicates["replayed_after_restart"] += 1
        data = encode(msg.reply(self._marked_status(msg, marker)))
        self.dedup.finish((addr[0], addr[1], msg.seq), data)
        if self.transport is not None:
            self.transport.sendto(data, addr)

    @staticmethod
    def _marked_status(msg: Message, marker: bytes) -> Status:
        """The answer a write's Redis marker records (a DELETE's says whether the key existed)."""
        if marker == MARKER_ERROR:
            return Status.ERROR
        return Status.NOT_FOUND if msg.op == Op.DELETE and marker == b"0" else Status.OK

    async def _refuse(self, msg: Message, reply: Callable[..., None], marker: bytes | None) -> None:
        """Answer a write ERROR ("nothing was written"), recorded in Redis first like an applied write's
        marker: a copy of it reaching a later life of this shim (which remembers no reply) is answered
        ERROR again instead of being applied after all.  If Redis cannot record it, no answer (the
        client's outcome stays unknown, which is true)."""
        if marker is not None and msg.op != Op.GET:
            existing = await self.writes.refuse(marker)
            if existing is not None:  # it was applied after all: that outcome stands
                reply(self._marked_status(msg, existing))
                return
        reply(Status.ERROR)

    async def _serve(self, msg: Message, addr: tuple[str, int], wait: float = 0.0) -> None:
        replied = False
        if wait > 0:
            await asyncio.sleep(wait)

        def reply(status: Status, value: bytes = b"") -> None:
            nonlocal replied
            replied = True
            data = encode(msg.reply(status, value))
            if msg.op != Op.GET:
                self.dedup.finish((addr[0], addr[1], msg.seq), data)
            if self.transport is not None:
                self.transport.sendto(data, addr)

        try:
            await self.handle(msg, reply, (addr[0], addr[1], msg.seq))
        except (RedisConnectionError, RedisTimeoutError) as e:
            self.errors["redis_unavailable"] += 1
            if msg.op == Op.GET and not replied:
                reply(Status.ERROR)  # a failed read changed nothing
            # a write may or may not have reached Redis before the connection broke: ERROR would claim
            # "nothing written", which may be false, so it gets no answer (the client's outcome: unknown)
            # and its retries are dropped as in progress (shim/dedup.py)
            log.warning("request %s: redis unavailable: %s", msg.op.name, e)
        except Exception as e:
            log.exception("request %s failed", msg.op.name)
            self.errors[type(e).__name__] += 1
            if not replied:
                try:
                    await self._refuse(msg, reply, dedup_marker((addr[0], addr[1], msg.seq)))
                except (RedisConnectionError, RedisTimeoutError):
                    self.errors["redis_unavailable"] += 1  # no answer: the outcome stays unknown

    # -- requests ---------------------------------------------------------------------
    async def handle(self, msg: Message, reply: Callable[..., None], rid: RequestId | None = None) -> None:
        """Serve one request; ``reply(status, value)`` answers the client; ``rid`` marks a write in Redis."""
        marker = dedup_marker(rid) if rid is not None else None
        if msg.op == Op.GET:
            value = await self.redis.get(msg.key)
            reply(Status.NOT_FOUND) if value is None else reply(Status.OK, value)
            return
        async with self._key_lock(msg.key):
            cached = bool(self.holders(msg.key))
            seq = self.coherence.next_seq()
            paths = self._paths(msg.key) if cached else []
            if cached and self.unsafe_ack_first and msg.op == Op.PUT:  # the deliberately broken order (tests)
                await self.writes.set(msg.key, msg.value, marker)
                reply(Status.OK)
                await asyncio.sleep(self.unsafe_ack_first)
                live = await self._invalidate(msg.key, seq, paths)
                if live and len(msg.value) <= MAX_CACHEABLE:
                    await self._update(msg.key, seq, msg.value, live)
                return
            if cached and self.limiter is not None:
                # the server's rate pays for coherence too: phase 1 and phase 2 on every path cost a request
                # each, as the paper's rate-limited servers (and the simulator, coherence_cost = 1) count them
                self.limiter.charge(2 * len(paths))
            if cached:
                live = await self._invalidate(msg.key, seq, paths)
                if live is None:
                    self.errors["invalidate_timeout"] += 1
                    await self._refuse(msg, reply, marker)  # copies may still be valid: do not write
                    return
                paths = live
            if msg.op == Op.PUT:
                await self.writes.set(msg.key, msg.value, marker)
                status = Status.OK
            else:
                status = Status.OK if await self.writes.delete(msg.key, marker) else Status.NOT_FOUND
            reply(status)  # safe before phase 2: every copy is invalid
            if cached and msg.op == Op.PUT and len(msg.value) <= MAX_CACHEABLE:
                await self._update(msg.key, seq, msg.value, paths)  # still under the key's lock

    # -- coherence paths --------------------------------------------------------------
    @property
    def view_known(self) -> bool:
        """Whether we know the cached keys of every cache switch in service."""
        return self.cache_switches <= self.known | self.down

    def holders(self, key: bytes) -> set[int]:
        """The switches in service that may hold a valid copy of ``key`` (the module's invariant)."""
        return (self.cached.get(key, set()) | (self.cache_switches - self.known)) - self.down

    def _paths(self, key: bytes) -> list[int]:
        """Far ends of the paths a write's phase 1 takes: every spine in service that may hold a copy;
        or, if there is none and the storage leaf may hold one, the leaf itself (it reflects the message)."""
        ends = sorted(self.holders(key) & self.spine_ids)
        return ends or ([self.leaf_id] if self.leaf_id in self.holders(key) else [])

    async def _invalidate(
        self, key: bytes, seq: int, paths: list[int], tag: tuple[int, int] | None = None
    ) -> list[int] | None:
        """Phase 1 along ``paths``; the far ends that acknowledged it, or None if a path timed out.

        A path whose far end was declared down meanwhile is dropped, but the storage leaf before it
        still counts: if no acknowledged path passed the leaf and it may hold a copy, the same
        message goes on a path ending at the leaf.
        """
        if not paths:
            log.error("no live switch to invalidate %s at; has the controller pushed the partition?", key.hex())
            return None
        results = await asyncio.gather(
            *(self.coherence.invalidate(key, seq, t, self.coherence_address(t), tag) for t in paths)
        )
        if any(r not in (ACKED, RELEASED) for r in results):
            return None
        acked = [t for t, r in zip(paths, results, strict=True) if r == ACKED]
        if not acked and tag is None and self.leaf_id in self.holders(key):
            r = await self.coherence.invalidate(key, seq, self.leaf_id, self.coherence_address(self.leaf_id))
            if r == ACKED:
                acked = [self.leaf_id]
            elif r != RELEASED:
                return None
        return acked

    async def _update(self, key: bytes, seq: int, value: bytes, paths: list[int]) -> bool:
        if not paths:
            return False
        oks = await asyncio.gather(
            *(self.coherence.update(key, seq, value, t, self.coherence_address(t)) for t in paths)
        )
        return all(oks)

    @asynccontextmanager
    async def _key_lock(self, key: bytes):  # noqa: ANN202
        """Per-key lock that disappears when nobody uses it (keeps memory bounded)."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] += 1
        try:
            async with lock:
                yield
        finally:
            self._users[key] -= 1
            if self._users[key] == 0:
                del self._users[key]
                self._locks.pop(key, None)

    # -- control commands (from the controller and the switch agents) ---------------------
    async def populate(self, key: bytes, switch: int, tag: tuple[int, int] = (0, 0)) -> str:
        """Fill a freshly inserted (invalid) cache entry of ``switch``, tagged ``tag`` = (cache_epoch,
        version), with the current value: an INVALIDATE that carries the tag (only it may arm the
        new entry), addressed to ``switch`` itself, then the UPDATE of the same seq.

        A switch declared down is refused ("down"): writes skip it, so a copy there could go stale.  So is
        every spine until we have the controller's down-set (a restart without our state file).
        """
        if switch in self.down or (switch != self.leaf_id and not self.down_known):
            return "down"
        if switch not in self.cache_switches:
            raise ValueError(
                f"switch {switch} cannot cache keys of {self.server.name} "
                f"(its spines and storage leaf: {sorted(self.cache_switches)})"
            )
        self.cached[key].add(switch)
        async with self._key_lock(key):
            value = cast("bytes | None", await self.redis.get(key))
            seq = self.coherence.next_seq()
            paths = await self._invalidate(key, seq, [switch], tag)
            return "down" if paths == [] else await self._fill(key, seq, value, paths)

    async def _refresh(self, key: bytes) -> str:
        """Invalidate every copy of ``key`` and fill it again with Redis's value, as a write of it would."""
        async with self._key_lock(key):
            if not self.holders(key):
                return "uncached"
            value = cast("bytes | None", await self.redis.get(key))
            seq = self.coherence.next_seq()
            return await self._fill(key, seq, value, await self._invalidate(key, seq, self._paths(key)))

    async def _fill(self, key: bytes, seq: int, value: bytes | None, paths: list[int] | None) -> str:
        """Phase 2 of a populate or refresh whose phase 1 took ``paths`` (None: it failed), and its outcome."""
        if paths is None:
            return "failed"
        if value is None:
            return "absent"
        if len(value) > MAX_CACHEABLE:
            return "too_large"
        return "valid" if await self._update(key, seq, value, paths) else "failed"

    def evict(self, key: bytes, switch: int) -> bool:
        switches = self.cached.get(key)
        if not switches or switch not in switches:
            return False
        switches.discard(switch)
        if not switches:
            del self.cached[key]
        return True

    def set_partition(
        self, buckets: list[int], down: list[int] | None = None, epoch: int | None = None, save: bool = True
    ) -> None:
        """Adopt the controller's partition (and the switches it declared down); saved to the state file
        unless ``save`` is False (then :meth:`set_partition_durably` saves it off the event loop)."""
        if (
            not isinstance(buckets, list)
            or len(buckets) != N_SPINE_BUCKETS
            or not all(isinstance(b, int) and 0 <= b < 256 for b in buckets)
        ):
            raise ValueError(f"partition must list {N_SPINE_BUCKETS} spine ids (0..255)")
        if down is not None and not (isinstance(down, list) and all(isinstance(d, int) and 0 < d < 256 for d in down)):
            raise ValueError("'down' must list switch ids (1..255)")
        self.buckets = list(buckets)
        if down is not None:
            self.down = set(down)
            self.down_known = True
            self.coherence.release(self.down)
        if epoch is not None:
            self.epoch = int(epoch)
        if save:
            self._save_state()

    async def set_partition_durably(self, buckets: list[int], down: list[int] | None, epoch: int | None) -> None:
        """:meth:`set_partition`, answered once the state file holds it, with the file written (and fsync'd)
        on a worker thread: an fsync on a busy disk takes tens of ms, and on the event loop every GET and
        write of this server waited for it at each failover.  Requests served meanwhile already use the new
        partition, but the controller takes no step that relies on it (routing to a recovered spine, a
        flush) before this call answers; a shim that crashes first restarts from its older file and is
        pushed the partition again."""
        self.set_partition(buckets, down, epoch, save=False)
        async with self._saving:
            await asyncio.to_thread(self._save_state)

    def add_view(
        self, cached: dict[bytes, list[int]], complete: list[int] | None = None, incarnation: int | None = None
    ) -> None:
        """Merge the controller's view of which switches cache which keys; ``complete``: the switches
        whose every cached key the view lists (their agents answered), which become known.

        A union, never a replacement: an insertion the view missed (it raced with the
        controller's collection) must keep its switch here, and one evicted meanwhile only
        costs an extra invalidation.  ``incarnation`` must be ours (from Stats): a view collected
        before this shim started could miss a copy a previous life validated after the collection.
        """
        complete = list(complete or [])
        if incarnation is not None and incarnation != self.incarnation:
            raise StaleViewError(
                f"view collected for shim incarnation {incarnation}, this is {self.incarnation}; "
                "read Stats again and resend"
            )
        if not all(s in self.cache_switches for s in complete):
            raise ValueError(
                f"complete: switches that cache keys of {self.server.name} are "
                f"{sorted(self.cache_switches)}, got {sorted(complete)}"
            )
        for key, switches in cached.items():
            self.cached[key].update(switches)
        self.known.update(complete)

    def _load_state(self) -> None:
        """A state file means this shim was configured before: it restarted, and switches may hold copies
        of its keys that it no longer knows about.  No state file: nothing of this server can be cached
        (only this shim validates copies of its keys), so the view is known and empty."""
        if self.state_file is None or not self.state_file.exists():
            return
        try:
            d = json.loads(self.state_file.read_text())
            self.set_partition(d["buckets"], d.get("down", []), d.get("epoch", 0))
        except (ValueError, KeyError, TypeError) as e:
            log.warning("ignoring unreadable state file %s: %s", self.state_file, e)

    def _save_state(self) -> None:
        if self.state_file is None:
            return
        tmp = self.state_file.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({"buckets": self.buckets, "down": sorted(self.down), "epoch": self.epoch}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_file)

    def stats(self) -> dict:
        c = self.coherence.stats
        return {
            "server": self.server.name,
            "requests": dict(self.requests),
            "malformed": dict(self.malformed),
            "errors": dict(self.errors),
            "duplicates": dict(self.duplicates),
            "redis_restarts": self.redis_restarts,
            # request-equivalents admitted under the server's rate (requests and coherence); 0 with no limit
            "rate_spent": round(self.limiter.spent, 1) if self.limiter is not None else 0.0,
            "redis_down": self.redis_down,
            "resynced": dict(self.resynced),
            "cached_keys": len(self.cached),
            "view_known": self.view_known,
            "unknown_switches": sorted(self.cache_switches - self.known - self.down),
            "incarnation": self.incarnation,
            "epoch": self.epoch,
            "down": sorted(self.down),
            "coherence": {
                "invalidates": c.invalidates,
                "updates": c.updates,
                "retransmits": c.retransmits,
                "failed_invalidates": c.failed_invalidates,
                "failed_updates": c.failed_updates,
                "stray_acks": c.stray_acks,
            },
        }
