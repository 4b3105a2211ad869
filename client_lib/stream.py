"""The client's half of the stream path (shim/stream.py): requests that do not fit a datagram, over TCP.

A request too large for a datagram (a long key, a value over about 1 400 bytes, a big command), and one
whose datagram reply came back ``STREAM`` (its reply does not fit one), is sent framed on a TCP connection
to the same storage server's DistCache port, with the same seq: the server's dedup knows it by (address,
seq) on either path, so a write answered ``STREAM`` is not applied again, its reply comes in full.

A connection carries one request at a time and is kept for the next (one idle connection per server, more
for the asyncio client's requests in flight).  A copy is sent again, on a new connection, only when the
connection broke or no reply came within the copy's time; every copy stays within ``wire.RETRY_SPAN`` of
the first, so the server's dedup still knows the write.  A copy may take the client's ``timeout`` plus a
second per :data:`RATE_FLOOR` bytes to leave and as long for its reply to begin, then ``timeout`` per
piece of the reply.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections import defaultdict

from distcache.wire import FRAME_SLACK, MAX_KEY, MAX_VALUE, Message, Status, WireError, decode, frame

RATE_FLOOR = 4 << 20  # bytes per second a stream copy is given at least (a 512 MB value: about 2 minutes)
MAX_REPLY = MAX_KEY + MAX_VALUE + FRAME_SLACK  # a longer frame from a server is a broken connection
IDLE_PER_SERVER = 4  # connections kept open per server for the next requests
PIECE = 1 << 20  # bytes read at a time
_LEN = struct.Struct("!I")

Address = tuple[str, int]


class BrokenStreamError(ConnectionError):
    """The connection ended or sent what is no frame: the copy is lost, a new connection may retry it."""


def copy_time(timeout: float, nbytes: int) -> float:
    """Seconds one copy of a stream request of ``nbytes`` (request and expected reply) may take."""
    return timeout + nbytes / RATE_FLOOR


def matches(req: Message, data: bytes) -> Message | None:
    """``data`` decoded if it is the reply to ``req`` (same seq, digest, op, key when it carries one)."""
    try:
        m = decode(data)
    except WireError:
        return None
    if m.seq != req.seq or m.digest != req.digest or m.op != req.op.reply() or (m.key and m.key != req.key):
        return None
    return m


def _keep(kept: list, reply: Message) -> bool:
    """Whether the connection that brought ``reply`` is kept for the next request: while fewer than
    IDLE_PER_SERVER are kept, and not after TOO_LARGE (the server closes the connection after that answer)."""
    return len(kept) < IDLE_PER_SERVER and reply.status != Status.TOO_LARGE


class StreamLinks:
    """Blocking connections to the servers' stream ports, one request at a time on each."""

    def __init__(self) -> None:
        self._idle: dict[Address, list[socket.socket]] = defaultdict(list)
        self.ignored = 0  # frames that answered no request of ours

    def exchange(self, addr: Address, req: Message, data: bytes, idle: float) -> Message:
        """Send ``data`` (``req`` encoded) and return its reply.  The request may take ``copy_time(idle,
        len(data))`` to leave and its reply as long to begin; then each piece of it ``idle`` seconds.
        BrokenStreamError, TimeoutError or another OSError: no reply on this connection (it is closed).
        A kept connection the server has closed meanwhile is replaced by a new one (the same copy: the
        server's dedup knows it if it got there)."""
        if self._idle[addr]:
            try:
                return self._exchange(addr, self._idle[addr].pop(), req, data, idle)
            except (BrokenStreamError, ConnectionError):
                pass
        return self._exchange(addr, None, req, data, idle)

    def _exchange(self, addr: Address, sock: socket.socket | None, req: Message, data: bytes, idle: float) -> Message:
        first = copy_time(idle, len(data))
        try:
            if sock is None:
                sock = socket.create_connection(addr, timeout=idle)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(first)
            sock.sendall(frame(data))
            while True:
                sock.settimeout(first)
                (n,) = _LEN.unpack(_read_exactly(sock, _LEN.size))
                if n > MAX_REPLY:
                    raise BrokenStreamError(f"a frame of {n} bytes from the server")
                sock.settimeout(idle)
                m = matches(req, _read_exactly(sock, n))
                if m is not None:
                    if _keep(self._idle[addr], m):
                        self._idle[addr].append(sock)
                        sock = None
                    return m
                self.ignored += 1
        finally:
            if sock is not None:
                sock.close()

    def close(self) -> None:
        for socks in self._idle.values():
            for s in socks:
                s.close()
        self._idle.clear()


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        piece = sock.recv(min(n - len(buf), PIECE))
        if not piece:
            raise BrokenStreamError("the server closed the connection")
        buf += piece
    return bytes(buf)


class AsyncStreamLinks:
    """asyncio connections to the servers' stream ports: one per request in flight, kept for the next."""

    def __init__(self) -> None:
        self._idle: dict[Address, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = defaultdict(list)
        self.ignored = 0

    async def exchange(self, addr: Address, req: Message, data: bytes, idle: float) -> Message:
        """:meth:`StreamLinks.exchange`, awaited."""
        if self._idle[addr]:
            try:
                return await self._exchange(addr, self._idle[addr].pop(), req, data, idle)
            except (BrokenStreamError, ConnectionError):
                pass
        link = await asyncio.wait_for(asyncio.open_connection(*addr, limit=PIECE), idle)
        return await self._exchange(addr, link, req, data, idle)

    async def _exchange(
        self, addr: Address, link: tuple[asyncio.StreamReader, asyncio.StreamWriter], req: Message, data: bytes,
        idle: float,
    ) -> Message:  # fmt: skip
        first = copy_time(idle, len(data))
        reader, writer = link
        keep = False
        try:
            writer.write(frame(data))
            await asyncio.wait_for(writer.drain(), first)
            while True:
                try:
                    (n,) = _LEN.unpack(await asyncio.wait_for(reader.readexactly(_LEN.size), first))
                    if n > MAX_REPLY:
                        raise BrokenStreamError(f"a frame of {n} bytes from the server")
                    reply = bytearray()
                    while len(reply) < n:
                        reply += await asyncio.wait_for(reader.readexactly(min(PIECE, n - len(reply))), idle)
                except asyncio.IncompleteReadError:
                    raise BrokenStreamError("the server closed the connection") from None
                m = matches(req, bytes(reply))
                if m is not None:
                    keep = _keep(self._idle[addr], m)
                    return m
                self.ignored += 1
        finally:
            if keep:
                self._idle[addr].append(link)
            else:
                writer.close()

    def close(self) -> None:
        for links in self._idle.values():
            for _, w in links:
                w.close()
        self._idle.clear()
