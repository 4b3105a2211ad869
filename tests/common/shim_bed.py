"""A real shim on loopback for tests: its coherence peer and the shim on its own event loop thread.

The switches' part in coherence is played by a UDP peer on 127.0.0.1 that reflects INVALIDATE/UPDATE
as acknowledgements (and can drop some), records what it saw, and checks Redis at the moment phase 1
arrives.  It is the shim's network peer, not a stand-in for any code under test.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from client_lib import Client
from distcache.cluster import Cluster
from distcache.hashing import N_SPINE_BUCKETS
from distcache.rpc.shim import ShimLink
from distcache.wire import Message, Op, decode, encode
from shim.control import serve_control
from shim.server import Shim

CLUSTER = Cluster(spines=2)


class SwitchPeer:
    """Plays the coherence path's far end: acknowledges, records, optionally drops."""

    def __init__(self, redis_sock: Path, **login: str) -> None:
        """``login``: ``username`` and ``password`` of a Redis with ACL users (it reads what a packet's key holds)."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.seen: list[tuple[Message, bytes | None]] = []  # message, Redis value when it arrived
        self.drop = 0  # drop this many upcoming packets
        self.mute = False  # never answer
        self.answer_only: set[int] | None = None  # answer only packets addressed to these spines
        self.redis = redis.Redis(unix_socket_path=str(redis_sock), **login)  # type: ignore[arg-type]
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data, addr = self.sock.recvfrom(2048)
            except TimeoutError:
                continue
            m = decode(data)
            try:
                at_redis = self.redis.get(m.key)
            except redis.ResponseError:  # the key holds a hash, a list...
                at_redis = None
            self.seen.append((decode(data), at_redis))
            if self.mute or (self.answer_only is not None and m.target not in self.answer_only):
                continue
            if self.drop:
                self.drop -= 1
                continue
            m.op = m.op.reply()
            self.sock.sendto(encode(m), addr)

    def ops(self) -> list[tuple[Op, int]]:
        return [(m.op, m.seq) for m, _ in self.seen]

    def close(self) -> None:
        self._stop.set()
        self.thread.join(2)
        self.sock.close()
        self.redis.close()


class ShimThread:
    """A real Shim with its control channel, on its own event loop thread."""

    def __init__(
        self,
        redis_sock: Path,
        peer: SwitchPeer,
        control: Path,
        state_file: Path | None = None,
        cluster: Cluster = CLUSTER,
        fresh: bool = True,
        **shim_options: object,
    ) -> None:
        """``shim_options``: more of Shim's keyword arguments (e.g. ``dedup_memory``)."""
        self.loop = asyncio.new_event_loop()
        self.shim = Shim(
            cluster,
            cluster.server(0, 0),
            f"unix://{redis_sock}",
            listen="127.0.0.1",
            port=0,
            coherence_address=lambda _spine: ("127.0.0.1", peer.port),
            state_file=state_file,
            fresh=fresh,
            **shim_options,  # type: ignore[arg-type]
        )
        self.control_addr = f"unix:{control}"
        self.closed = False
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.run(self._start())
        self.port = self.shim.transport.get_extra_info("sockname")[1]

    async def _start(self) -> None:
        await self.shim.start()
        self.control = await serve_control(self.shim, self.control_addr)

    def run(self, coro):  # noqa: ANN001, ANN201
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def close(self) -> None:
        """Stop the shim and its loop (again: nothing)."""
        if self.closed:
            return
        self.closed = True

        async def stop() -> None:
            await self.control.stop(0.5)
            await self.shim.close()

        self.run(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)


@dataclass
class LoopbackShim:
    """A running shim on loopback with its coherence peer, its control link and a client of it."""

    client: Client
    shim: ShimThread
    peer: SwitchPeer
    link: ShimLink


@contextmanager
def shim_on_loopback(redis_sock: Path, control: Path, cluster: Cluster = CLUSTER) -> Iterator[LoopbackShim]:
    """Redis emptied, a shim of ``cluster``'s server r0s0 whose partition gives every bucket to the first
    spine, and a client that sends every request to it (no retries); all stopped on exit."""
    redis.Redis(unix_socket_path=str(redis_sock)).flushall()
    peer = SwitchPeer(redis_sock)
    shim = ShimThread(redis_sock, peer, control, cluster=cluster)
    link = ShimLink(shim.control_addr)
    link.partition([cluster.spine(0).switch_id] * N_SPINE_BUCKETS)
    client = Client(cluster, resolve=lambda _host: ("127.0.0.1", shim.port), timeout=3.0, retries=0)
    try:
        yield LoopbackShim(client, shim, peer, link)
    finally:
        client.close()
        shim.close()
        peer.close()
