"""The storage-server shim: DistCache over UDP in front of one redis-server.

It answers GET/PUT/DELETE from clients out of its own Redis (redis-py's
asyncio client with hiredis), runs the coherence protocol for keys that some
switch caches, and fills caches on request of the switch agents.  Writes to a
key are serialized (one asyncio lock per key in use), and every write checks
under that lock whether the key is cached, so a write can never slip between
a cache insertion and its population.  Malformed datagrams are counted by
reason and dropped; nothing a client sends can stop the shim.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import asynccontextmanager

import redis.asyncio as aioredis

from distcache.cluster import Cluster, Host
from distcache.hashing import N_SPINE_BUCKETS, h0
from distcache.wire import DC_PORT, MAX_CACHEABLE, REQUEST_OPS, Message, Op, Status, WireError, decode, encode
from shim.coherence import Coherence

log = logging.getLogger(__name__)

CoherenceAddress = Callable[[int], tuple[str, int]]


class ShimProtocol(asyncio.DatagramProtocol):
    def __init__(self, shim: Shim) -> None:
        self.shim = shim

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.shim.on_datagram(data, addr)

    def error_received(self, exc: Exception) -> None:
        log.debug("UDP error: %s", exc)


class Shim:
    def __init__(self, cluster: Cluster, server: Host, redis_url: str, listen: str | None = None,
                 port: int = DC_PORT, coherence_address: CoherenceAddress | None = None) -> None:
        self.cluster, self.server = cluster, server
        self.listen, self.port = listen or server.ip, port
        self.redis = aioredis.from_url(redis_url)
        self.coherence_address = coherence_address or (lambda spine_id: (Cluster.spine_address(spine_id), DC_PORT))
        self.buckets: list[int] = []
        self.cached: dict[bytes, set[int]] = defaultdict(set)  # key -> switch ids caching it
        self._locks: dict[bytes, asyncio.Lock] = {}
        self._users: Counter[bytes] = Counter()
        self.transport: asyncio.DatagramTransport | None = None
        self.coherence = Coherence(send=self._send)
        self.requests: Counter[str] = Counter()
        self.malformed: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self._tasks: set[asyncio.Task] = set()

    # -- lifecycle --------------------------------------------------------------------
    async def start(self) -> None:
        await self.redis.ping()
        loop = asyncio.get_running_loop()
        self.transport, _ = await loop.create_datagram_endpoint(lambda: ShimProtocol(self),
                                                                local_addr=(self.listen, self.port))

    async def close(self) -> None:
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
            task = asyncio.get_running_loop().create_task(self._serve(msg, addr))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif msg.op in (Op.INVALIDATE_ACK, Op.UPDATE_ACK):
            self.coherence.on_ack(msg)
        else:
            self.malformed["unexpected_op"] += 1

    async def _serve(self, msg: Message, addr: tuple[str, int]) -> None:
        replied = False

        def reply(status: Status, value: bytes = b"") -> None:
            nonlocal replied
            replied = True
            if self.transport is not None:
                self.transport.sendto(encode(msg.reply(status, value)), addr)

        try:
            await self.handle(msg, reply)
        except Exception as e:  # noqa: BLE001 - a failing request must not take the shim down
            log.exception("request %s failed", msg.op.name)
            self.errors[type(e).__name__] += 1
            if not replied:
                reply(Status.ERROR)

    # -- requests ---------------------------------------------------------------------
    async def handle(self, msg: Message, reply: Callable[..., None]) -> None:
        """Serve one request; ``reply(status, value)`` answers the client."""
        if msg.op == Op.GET:
            value = await self.redis.get(msg.key)
            reply(Status.NOT_FOUND) if value is None else reply(Status.OK, value)
            return
        async with self._key_lock(msg.key):
            cached = bool(self.cached.get(msg.key))
            seq = self.coherence.next_seq()
            if cached and not await self._invalidate(msg.key, seq):
                self.errors["invalidate_timeout"] += 1
                reply(Status.ERROR)  # copies may still be valid: do not write
                return
            if msg.op == Op.PUT:
                await self.redis.set(msg.key, msg.value)
                status = Status.OK
            else:
                status = Status.OK if await self.redis.delete(msg.key) else Status.NOT_FOUND
            reply(status)  # safe before phase 2: every copy is invalid
            if cached and msg.op == Op.PUT and len(msg.value) <= MAX_CACHEABLE:
                await self._update(msg.key, seq, msg.value)  # still under the key's lock

    # -- coherence paths --------------------------------------------------------------
    def _target(self, key: bytes) -> tuple[int, tuple[str, int]] | None:
        """The spine at the far end of the key's coherence path, and where to send to reach it."""
        if len(self.buckets) != N_SPINE_BUCKETS:
            return None
        spine = self.buckets[h0(key)]
        return (spine, self.coherence_address(spine)) if spine else None

    async def _invalidate(self, key: bytes, seq: int) -> bool:
        t = self._target(key)
        if t is None:
            log.error("no spine partition known: cannot invalidate %s; has the controller pushed it?", key.hex())
            return False
        return await self.coherence.invalidate(key, seq, *t)

    async def _update(self, key: bytes, seq: int, value: bytes) -> bool:
        t = self._target(key)
        return t is not None and await self.coherence.update(key, seq, value, *t)

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
    async def populate(self, key: bytes, switch: int) -> str:
        """Fill a freshly inserted (invalid) cache entry with the current value."""
        self.cached[key].add(switch)
        async with self._key_lock(key):
            value = await self.redis.get(key)
            seq = self.coherence.next_seq()
            if not await self._invalidate(key, seq):
                return "failed"
            if value is None:
                return "absent"
            if len(value) > MAX_CACHEABLE:
                return "too_large"
            return "valid" if await self._update(key, seq, value) else "failed"

    def evict(self, key: bytes, switch: int) -> bool:
        switches = self.cached.get(key)
        if not switches or switch not in switches:
            return False
        switches.discard(switch)
        if not switches:
            del self.cached[key]
        return True

    def set_partition(self, buckets: list[int]) -> None:
        if len(buckets) != N_SPINE_BUCKETS or not all(isinstance(b, int) and 0 <= b < 256 for b in buckets):
            raise ValueError(f"partition must list {N_SPINE_BUCKETS} spine ids (0..255)")
        self.buckets = list(buckets)

    def stats(self) -> dict:
        c = self.coherence.stats
        return {
            "server": self.server.name,
            "requests": dict(self.requests),
            "malformed": dict(self.malformed),
            "errors": dict(self.errors),
            "cached_keys": len(self.cached),
            "coherence": {"invalidates": c.invalidates, "updates": c.updates, "retransmits": c.retransmits,
                          "failed_invalidates": c.failed_invalidates, "failed_updates": c.failed_updates,
                          "stray_acks": c.stray_acks},
        }
