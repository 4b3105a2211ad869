"""The storage-server shim: DistCache over UDP in front of one redis-server.

It answers GET/PUT/DELETE from clients out of its own Redis (redis-py's
asyncio client with hiredis), runs the coherence protocol for keys that some
switch caches, and fills caches on request of the switch agents.  A request carries the user's key (what
Redis stores, byte for byte) and its digest (what switches, agents and the controller know it by): the shim
checks that they agree (a request whose digest is not its key's could invalidate the wrong entry) and
learns the pair (:mod:`shim.names`).  Writes to a
key are serialized (one asyncio lock per key in use), and every write checks
under that lock whether the key is cached, so a write can never slip between
a cache insertion and its population.  Malformed datagrams are counted by
reason and dropped; nothing a client sends can stop the shim.

Which switches may hold a copy of a key (the invariant every write relies on), the
controller's partition and down-set: :mod:`shim.view`; reads leave for Redis in batches
(:mod:`shim.redis_reads`), writes in pipelines (:mod:`shim.redis_writes`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import cast

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from distcache.cluster import Cluster, Host
from distcache.fill import Fill
from distcache.ratelimit import TokenBucket
from distcache.wire import (
    DC_PORT,
    MAX_CACHEABLE,
    MAX_DATAGRAM,
    MAX_VALUE,
    REQUEST_OPS,
    RETRY_SPAN,
    Message,
    Op,
    Status,
    WireError,
    decode,
    encode,
    redirect,
    refusal,
)
from shim.coherence import SEQ_FLOOR_KEY, Coherence
from shim.commands import MARKER_REPLY, RUN, WRONGTYPE, CommandRefusedError, CommandTable, refusal_reply, reply_status
from shim.dedup import BUSY, DEDUP_MEMORY, MARKER_DB, PENDING, Dedup, RequestId, dedup_marker
from shim.evictions import watch_evictions
from shim.key_locks import KeyLocks
from shim.metrics import ShimMetrics, stats_of
from shim.names import KeyNames
from shim.phases import CoherenceAddress, Phases
from shim.redis_reads import ReadBatcher
from shim.redis_watch import watch_redis
from shim.redis_writes import MARKER_BUSY, MARKER_ERROR, WriteBatcher
from shim.stream import STREAM_BUDGET, STREAM_FULL, StreamPeer, StreamServer
from shim.view import CacheView

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 4096  # requests being served at once; beyond, new ones are dropped and counted
Address = tuple[str, int] | StreamPeer  # where a reply goes: a datagram's source or a stream connection


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
        fresh: bool = False,
        dedup_memory: int = DEDUP_MEMORY,
        dedup_span: float = RETRY_SPAN,
        redis_username: str | None = None,
        redis_password: str | None = None,
        stream_budget: int = STREAM_BUDGET,
        max_value: int = MAX_VALUE,
    ) -> None:
        """``redis_url`` names the server, never a database: user data is database 0, the shim's own
        records (dedup markers, the coherence floor) database MARKER_DB.  ``stream_budget`` and ``max_value``
        bound the stream path (shim/stream.py).  ``redis_username`` and
        ``redis_password``: the ACL user it logs in as (a storage host's Redis has no default user)."""
        self.cluster, self.server = cluster, server
        self.state_file = state_file
        self.listen, self.port = listen or server.ip, port
        login = {"username": redis_username, "password": redis_password} if redis_username else {}
        self.redis = aioredis.from_url(redis_url, db=0, **login)
        self.markers = aioredis.from_url(redis_url, db=MARKER_DB, **login)
        self.dedup = Dedup(dedup_memory, dedup_span)
        self.names = KeyNames(self.markers)
        self.commands = CommandTable({})  # Redis' own, read at start
        self.writes = WriteBatcher(self.redis, self.markers, marker_ttl=dedup_span)
        self.coherence_address = coherence_address or (lambda spine_id: (Cluster.spine_address(spine_id), DC_PORT))
        self.view = CacheView(cluster, server, fresh)
        self.fresh = fresh
        self.locks = KeyLocks()  # a write or populate of a key runs under the key's lock
        self._saving = asyncio.Lock()  # one state-file write at a time (set_partition_durably)
        self.transport: asyncio.DatagramTransport | None = None
        self.coherence = Coherence(send=self.send, is_down=lambda switch: switch in self.view.down)
        self.phases = Phases(self.coherence, self.view, self.coherence_address)
        self._load_state()
        # the storage server's capacity (paper §6: rate-limited servers): requests beyond it wait their turn,
        # up to the cluster's server_queue seconds, and are dropped (counted) beyond that, as a saturated
        # server's queue would
        self.limiter = TokenBucket(cluster.server_rate, cluster.server_burst) if cluster.server_rate else None
        self.requests: Counter[str] = Counter()
        self.malformed: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()  # malformed requests answered TOO_LARGE or BAD_REQUEST
        self.errors: Counter[str] = Counter()
        self.duplicates: Counter[str] = Counter()  # retried writes not applied again: replayed / in_progress
        self._recheck_until = 0.0  # until then, new write ids are looked up in Redis (set by start and refuse_busy)
        self._refusing: set[RequestId] = set()  # writes being refused BUSY: their copies are dropped meanwhile
        self._watcher: asyncio.Task | None = None
        self.redis_run_id = ""
        self.redis_down = False
        self.redis_restarts = 0
        self.resynced: Counter[str] = Counter()  # cached copies populated again after a Redis restart, by state
        self.evicted: Counter[str] = Counter()  # cached keys Redis evicted, invalidated (an evicting policy)
        self._evictions: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self.metrics = ShimMetrics()  # replies and latencies for the Prometheus series (shim/metrics.py)
        self.stream = StreamServer(self, stream_budget, max_value)
        self.reads = ReadBatcher(self.redis, self.send, self.errors, self._tasks, self.metrics.replied)

    # -- lifecycle --------------------------------------------------------------------
    async def start(self) -> None:
        await self.redis.ping()
        self.commands = await CommandTable.load(self.redis)
        if not self.fresh:  # maybe a restart (with or without the state file): clients may still retry writes
            # our previous life applied; for as long as retries live, ask Redis before applying one we do not know
            self._recheck_until = time.monotonic() + self.dedup.span
        self.redis_run_id = (await self.redis.info("server"))["run_id"]
        await self.coherence.start_from(await self._floor(), lambda n: self.markers.set(SEQ_FLOOR_KEY, str(n)))
        loop = asyncio.get_running_loop()
        await self._listen(loop)
        self._watcher = loop.create_task(watch_redis(self))
        policy = (await self.redis.config_get("maxmemory-policy")).get("maxmemory-policy", "noeviction")
        if (policy.decode() if isinstance(policy, bytes) else policy) != "noeviction":
            self._evictions = loop.create_task(watch_evictions(self))

    async def _listen(self, loop: asyncio.AbstractEventLoop) -> None:
        """Datagrams and the stream path on one port number (port 0: one both protocols have free)."""
        for attempt in range(8):
            self.transport, _ = await loop.create_datagram_endpoint(
                lambda: ShimProtocol(self), local_addr=(self.listen, self.port)
            )
            port = self.transport.get_extra_info("sockname")[1]
            try:
                await self.stream.start(self.listen, port)
            except OSError:
                self.transport.close()
                if self.port or attempt == 7:
                    raise
                continue
            self.port = port
            return

    async def _floor(self) -> int | None:
        """The coherence floor earlier lives persisted (in MARKER_DB; database 0 is the user's only)."""
        floor = await self.markers.get(SEQ_FLOOR_KEY)
        try:
            return int(floor) if floor else None
        except ValueError:
            log.warning("ignoring an unreadable coherence floor %r: starting from the clock", floor)
            return None

    async def close(self) -> None:
        if self._evictions is not None:
            self._evictions.cancel()
        if self._watcher is not None:
            self._watcher.cancel()
        if self.transport is not None:
            self.transport.close()
        await self.stream.close()
        for t in list(self._tasks):
            t.cancel()
        await self.redis.aclose()
        await self.markers.aclose()

    def send(self, data: bytes, dest: Address) -> None:
        """Send a message: framed on its stream connection, or as a datagram; a reply too large for one is
        redirected to the stream path (``wire.redirect``)."""
        if isinstance(dest, StreamPeer):
            dest.conn.send(data)
        elif self.transport is not None:
            self.transport.sendto(data if len(data) <= MAX_DATAGRAM else redirect(data), dest)

    # -- datagrams --------------------------------------------------------------------
    def decode(self, data: bytes, addr: Address) -> Message | None:
        """``data`` as a message, or None: what does not decode is counted by reason, and a request we cannot
        act on is told so at once (``wire.refusal``), whichever path it came by."""
        try:
            return decode(data)
        except WireError as e:
            self.malformed[e.reason] += 1
            if (answer := refusal(data, e)) is not None:
                self.refused[answer.status.name] += 1
                self.send(encode(answer), addr)
            return None

    def on_datagram(self, data: bytes, addr: tuple[str, int]) -> None:
        if (msg := self.decode(data, addr)) is None:
            return
        if msg.op in REQUEST_OPS:
            self.on_message(msg, addr, time.monotonic())
        elif msg.op in (Op.INVALIDATE_ACK, Op.UPDATE_ACK):
            self.coherence.on_ack(msg)
        else:
            self.malformed["unexpected_op"] += 1

    def on_message(self, msg: Message, addr: Address, received: float) -> asyncio.Task | None:
        """Serve a request that came as a datagram or on the stream path (``addr`` a StreamPeer): the task
        that serves it, or None if it was answered (or dropped) at once or queued for a batched read."""
        self.requests[msg.op.name] += 1
        if self.cluster.digest(msg.key) != msg.digest:  # it could invalidate (or fill) another key's entry
            self.malformed["digest"] += 1
            self.refused[Status.BAD_REQUEST.name] += 1
            self.send(encode(msg.reply(Status.BAD_REQUEST)), addr)
            return None
        self.names.learn(msg.digest, msg.key)
        if len(self._tasks) + len(self.reads) >= MAX_IN_FLIGHT:  # bounded work: a flood is dropped, counted
            self.errors["overload"] += 1
            return None
        wait = self.limiter.reserve(self.cluster.server_queue) if self.limiter else 0.0
        if wait is None:
            self.errors["rate_limited"] += 1
            return None
        if self.limiter is not None:
            self.metrics.queue_seconds.observe(wait)
        if msg.op != Op.GET:
            rid = (addr[0], msg.seq)
            if rid in self._refusing:  # a copy of a write being refused BUSY
                self.duplicates["in_progress"] += 1
                return None
            done = self.dedup.begin(rid)
            if done is BUSY:
                self.refuse_busy(msg, addr, rid, received)
                return None
            if done is not None:  # a retry of a write already applied (or being applied): never again
                self._known_copy(done, addr)
                return None
            if received < self._recheck_until:  # our memory is younger than a client's retries
                return self.spawn(self._serve_unless_applied(msg, addr, wait, received))
        if msg.op == Op.GET and not wait and not isinstance(addr, StreamPeer):
            self.reads.add(msg, addr, received)
            return None
        return self.spawn(self._serve(msg, addr, wait, received))

    def spawn(self, work: Coroutine[None, None, None]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def refuse_unread(self, msg: Message, addr: Address, received: float) -> asyncio.Task | None:
        """A write the stream path had no room to read (``msg``: its header): BUSY as a write the dedup table
        has no room for, unless a copy of it is known (in progress: dropped; applied: its reply again).
        The task that answers it, if any."""
        rid = (addr[0], msg.seq)
        done = PENDING if rid in self._refusing else self.dedup.peek(rid)
        if done is not None:
            self._known_copy(done, addr)
            return None
        return self.refuse_busy(msg, addr, rid, received, "stream_busy", STREAM_FULL)

    def _known_copy(self, done: bytes, addr: Address) -> None:
        """A copy of a write the dedup table knows (``done``: what it holds): dropped while the write runs
        (PENDING), else answered the write's reply again."""
        self.duplicates["replayed" if done else "in_progress"] += 1
        if done:
            self.send(done, addr)

    def refuse_busy(
        self, msg: Message, addr: Address, rid: RequestId, received: float, kind: str = "busy",
        why: str = "it has no room to remember the write for its retry span",
    ) -> asyncio.Task:  # fmt: skip
        """The dedup table is full (or, ``kind`` "stream_busy", the stream path's budget): refuse the write BUSY
        (not applied), recorded in Redis first as an ERROR is; ``why`` goes to the client.

        The table cannot remember this write, so a later copy of it would look new: until a retry span after
        the last refusal, every new write id is looked up in Redis before it is applied (as after a restart),
        and finds this refusal's marker (or, if an earlier copy was applied after all, that outcome).
        """
        self.errors[kind] += 1
        self._recheck_until = max(self._recheck_until, time.monotonic() + self.dedup.span)
        self._refusing.add(rid)

        def reply(status: Status, value: bytes = b"") -> None:
            self.metrics.replied(msg.op.name, status.name, time.monotonic() - received)
            self.send(encode(msg.reply(status, value)), addr)

        async def refuse() -> None:
            try:
                existing = await self.writes.refuse(dedup_marker(rid), MARKER_BUSY)
                if existing is None:
                    reply(Status.BUSY, f"-ERR {why}".encode())
                else:
                    reply(self._marked_status(msg, existing))
            except (RedisConnectionError, RedisTimeoutError):
                self.errors["redis_unavailable"] += 1  # no answer: the outcome stays unknown (and nothing ran)
            finally:
                self._refusing.discard(rid)

        return self.spawn(refuse())

    async def _serve_unless_applied(self, msg: Message, addr: Address, wait: float, received: float) -> None:
        """After a restart (or a BUSY refusal): a write whose marker is in Redis was applied (or refused) before;
        answer it again, with the status it had (a DELETE's marker says whether the key existed: OK or
        NOT_FOUND)."""
        try:
            marker = await self.writes.marker(dedup_marker((addr[0], msg.seq)))
        except (RedisConnectionError, RedisTimeoutError):
            self.errors["redis_unavailable"] += 1
            return  # no answer: the client retries
        if marker is None:
            await self._serve(msg, addr, wait, received)
            return
        self.duplicates["replayed_after_restart"] += 1
        status = self._marked_status(msg, marker)
        self.metrics.replied(msg.op.name, status.name, time.monotonic() - received)
        data = encode(msg.reply(status, marker[1:] if marker.startswith(MARKER_REPLY) else b""))
        self.dedup.finish((addr[0], msg.seq), data)
        self.send(data, addr)

    @staticmethod
    def _marked_status(msg: Message, marker: bytes) -> Status:
        """The answer a write's Redis marker records (a DELETE's says whether the key existed)."""
        if marker == MARKER_ERROR:
            return Status.ERROR
        if marker == MARKER_BUSY:
            return Status.BUSY
        if marker.startswith(MARKER_REPLY):  # an EXEC's: the reply it had
            return reply_status(marker[1:])
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

    async def _serve(self, msg: Message, addr: Address, wait: float, received: float) -> None:
        replied = False
        if wait > 0:
            await asyncio.sleep(wait)

        def reply(status: Status, value: bytes = b"") -> None:
            nonlocal replied
            replied = True
            self.metrics.replied(msg.op.name, status.name, time.monotonic() - received)
            data = encode(msg.reply(status, value))
            if msg.op != Op.GET:
                self.dedup.finish((addr[0], msg.seq), data)
            self.send(data, addr)

        try:
            await self.handle(msg, reply, (addr[0], msg.seq))
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
                    await self._refuse(msg, reply, dedup_marker((addr[0], msg.seq)))
                except (RedisConnectionError, RedisTimeoutError):
                    self.errors["redis_unavailable"] += 1  # no answer: the outcome stays unknown

    # -- requests ---------------------------------------------------------------------
    async def handle(self, msg: Message, reply: Callable[..., None], rid: RequestId | None = None) -> None:
        """Serve one request; ``reply(status, value)`` answers the client; ``rid`` marks a write in Redis."""
        marker = dedup_marker(rid) if rid is not None else None
        if msg.op == Op.GET:
            try:
                value = await self.redis.get(msg.key)
            except ResponseError as e:
                if not str(e).startswith("WRONGTYPE"):
                    raise
                reply(Status.WRONG_TYPE, WRONGTYPE)
                return
            reply(Status.NOT_FOUND) if value is None else reply(Status.OK, value)
            return
        if msg.op == Op.EXEC and not await self._command_writes(msg, reply):
            return  # refused, or a read command: answered
        digest = msg.digest  # what the view, the locks and the switches know the key by
        async with self.locks.hold(digest):
            cached = bool(self.view.holders(digest))
            # a number only for a write that sends coherence messages: the numbers a life of this shim uses
            # per second bound how far ahead of the clock it runs (Coherence._seq), so none is spent idle
            seq = self.coherence.next_seq() if cached else 0
            paths = self.view.paths(digest) if cached else []
            if cached and self.limiter is not None:
                # the server's rate pays for coherence too: phase 1 and phase 2 on every path cost a request
                # each, as the paper's rate-limited servers (and the simulator, coherence_cost = 1) count them
                self.limiter.charge(2 * len(paths))
            if cached:
                began = time.monotonic()
                live = await self.phases.invalidate(digest, seq, paths, name=msg.key)
                self.metrics.phase_seconds.observe("invalidate", time.monotonic() - began)
                if live is None:
                    self.errors["invalidate_timeout"] += 1
                    await self._refuse(msg, reply, marker)  # copies may still be valid: do not write
                    return
                paths = live
            fill: bytes | None = None  # what phase 2 may fill the copies with
            if msg.op == Op.EXEC:  # in one script with its marker and a read of what it left of the key
                keys = (msg.key, marker) if marker is not None else (msg.key,)
                resp, kind, value, ttl = await self.redis.eval(
                    RUN, len(keys), *keys, self.writes.marker_ms, MARKER_DB, 0, *msg.args
                )
                reply(reply_status(resp), resp)  # safe before phase 2: every copy is invalid
                fill = value if kind == b"string" and int(ttl) < 0 else None  # a TTL'd key is never cached
            elif msg.op == Op.PUT:
                await self.writes.set(msg.key, msg.value, marker)
                reply(Status.OK)  # safe before phase 2: every copy is invalid
                fill = msg.value
            else:
                reply(Status.OK if await self.writes.delete(msg.key, marker) else Status.NOT_FOUND)
            if cached and fill is not None and len(fill) <= MAX_CACHEABLE:
                began = time.monotonic()
                await self.phases.update(digest, seq, fill, paths, msg.key)  # still under the key's lock
                self.metrics.phase_seconds.observe("update", time.monotonic() - began)

    async def _command_writes(self, msg: Message, reply: Callable[..., None]) -> bool:
        """An EXEC (shim/commands.py): True for a write command, which then runs as every write does (handle);
        a refused command or a read command is answered here (a read never touches a cache)."""
        try:
            cmd = await self.commands.check(self.redis, msg.args, msg.key)
        except (CommandRefusedError, ResponseError) as e:  # ResponseError: COMMAND GETKEYS refused the arguments
            self.refused[Status.BAD_REQUEST.name] += 1
            self.errors["command_refused"] += 1
            reply(Status.BAD_REQUEST, refusal_reply(str(e)))
            return False
        if cmd.write:
            return True
        resp = (await self.redis.eval(RUN, 1, msg.key, 0, 0, 0, *msg.args))[0]
        reply(reply_status(resp), resp)
        return False

    # -- control commands (from the controller and the switch agents) ---------------------
    async def populate(self, digest: bytes, switch: int, tag: tuple[int, int] = (0, 0), name: bytes = b"") -> Fill:
        """Fill a freshly inserted (invalid) cache entry of ``switch`` for the key of ``digest``, tagged ``tag`` =
        (cache_epoch, version), with the current value: an INVALIDATE that carries the tag (only it may arm the
        new entry), addressed to ``switch`` itself, then the UPDATE of the same seq.

        ``name``: the key itself, when the caller knows it (an operator's ``cache``); else the shim's
        :class:`KeyNames` must (Fill.NO_KEY if they do not: a read of the key brings it).  ValueError for a
        name that is not the digest's key.

        A switch declared down is refused ("down"): writes skip it, so a copy there could go stale.  So is
        every spine until we have the controller's down-set (a restart without our state file).
        """
        view = self.view
        if switch in view.down or (switch != view.leaf_id and not view.down_known):
            return Fill.DOWN
        if switch not in view.cache_switches:
            raise ValueError(
                f"switch {switch} cannot cache keys of {self.server.name} "
                f"(its spines and storage leaf: {sorted(view.cache_switches)})"
            )
        if name and self.cluster.digest(name) != digest:
            raise ValueError(f"name: {name!r} is not the key of digest {digest.hex()}")
        key = name or await self.names.lookup(digest)
        if key is None:
            return Fill.NO_KEY
        await self.names.record(digest, key)  # before the entry can hold a copy: a refresh must find its key
        view.cached[digest].add(switch)
        async with self.locks.hold(digest):
            value, expires = await self._value(key)
            seq = self.coherence.next_seq()
            paths = await self.phases.invalidate(digest, seq, [switch], tag, key)
            return Fill.DOWN if paths == [] else await self.phases.fill(digest, seq, value, paths, expires, key)

    async def _value(self, key: bytes) -> tuple[bytes | Fill | None, bool]:
        """A key's value and whether it has a time to live, read in one step (MULTI: GET, PTTL), so a TTL
        set by a write just before or after cannot slip between them; Fill.WRONG_TYPE for a key that holds
        another type than a string (never cached)."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.get(key)
        pipe.pttl(key)
        value, ttl = await pipe.execute(raise_on_error=False)
        if isinstance(value, ResponseError):
            return Fill.WRONG_TYPE, False
        return cast("bytes | None", value), int(ttl) >= 0

    async def refresh(self, digest: bytes) -> Fill:
        """Invalidate every copy of the key of ``digest`` and fill it again with Redis's value, as a write of it
        would; a key whose name is not known is only invalidated (Fill.NO_KEY), which is always safe."""
        async with self.locks.hold(digest):
            if not self.view.holders(digest):
                return Fill.UNCACHED
            key = await self.names.lookup(digest)
            value, expires = await self._value(key) if key is not None else (None, False)
            seq = self.coherence.next_seq()
            paths = await self.phases.invalidate(digest, seq, self.view.paths(digest), name=key or b"")
            if key is None:
                return Fill.NO_KEY
            return await self.phases.fill(digest, seq, value, paths, expires, key)

    async def evict(self, digest: bytes, switch: int) -> bool:
        """The agent of ``switch`` evicted the key of ``digest``: the entry is gone from the switch."""
        evicted = self.view.evict(digest, switch)
        if digest not in self.view.cached:
            await self.names.forget(digest)
        return evicted

    def set_partition(
        self, buckets: list[int], down: list[int] | None = None, epoch: int | None = None, save: bool = True
    ) -> None:
        """Adopt the controller's partition (and the switches it declared down); saved to the state file
        unless ``save`` is False (then :meth:`set_partition_durably` saves it off the event loop)."""
        self.view.set_partition(buckets, down, epoch)
        if down is not None:
            self.coherence.release(self.view.down)
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
        """Merge the controller's view of which switches cache which keys (:meth:`CacheView.add_view`)."""
        self.view.add_view(cached, complete, incarnation)

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
        if self.state_file is not None:
            self.view.save(self.state_file)

    def stats(self) -> dict:
        """What Stats answers (shim/metrics.py: stats_of)."""
        return stats_of(self)
