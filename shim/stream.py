"""The stream path: what does not fit a datagram, over TCP to the shim's own port.

A message too large for a datagram (``wire.MAX_DATAGRAM``: a value over about 1 400 bytes, a long key, a
big command) is sent as a frame (``wire.frame``: its length, then the message) on a TCP connection to the
shim's DistCache port.  The request inside is the datagram path's in every respect: the same identity
(client address, seq), the same dedup, the key's lock and the two-phase protocol when it overwrites a cached
key (:meth:`shim.server.Shim.on_message` serves both); its reply comes back framed on the same connection.
A datagram reply that does not fit one is sent as a ``STREAM`` redirect instead (``wire.redirect``), and the
client asks again here with the same request.  Only requests travel here: a coherence ack from a TCP peer is
counted and dropped, as a client has no say in coherence.

One connection carries one request at a time: its next frame is read once the previous one's reply has been
written out (a client opens more connections for more requests in flight).  Memory is bounded by one byte
budget (:data:`STREAM_BUDGET`) that every connection shares: a frame reserves its length before its body is
read, a GET the value's length (STRLEN) before it is read from Redis, and a reply whatever it carries beyond
that until the connection has taken it.  A frame or a GET that finds no room is answered ``BUSY`` (a write
through the shim's BUSY refusal, recorded as any is) and its body skipped unread; one that could never fit
(longer than the budget or than ``max_value`` allows) is answered ``TOO_LARGE``, and a frame longer than that
closes the connection after the answer (and its body, read and dropped).  A frame whose body stops coming for
:data:`STALL` seconds, and a connection that ends inside a frame, are counted as malformed and closed; a
connection idle for :data:`IDLE` seconds between frames is closed.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import TYPE_CHECKING, NamedTuple

from redis.exceptions import RedisError

from distcache.wire import (
    FRAME_SLACK,
    HEADER_LEN,
    HEADER_STRUCT,
    MAX_KEY,
    MAX_VALUE,
    REQUEST_OPS,
    VERSION,
    Message,
    Op,
    Status,
    WireError,
    encode,
    frame,
    refusal,
)

if TYPE_CHECKING:
    from shim.server import Shim

log = logging.getLogger(__name__)

STREAM_BUDGET = 256 << 20
"""Default bound on the bytes of stream requests and replies in flight, over every connection."""
MAX_STREAMS = 1024  # connections at once; more are closed at once (counted)
STALL = 10.0  # seconds a frame's body (or a reply being written) may go without progress
IDLE = 60.0  # seconds a connection may wait between frames before the shim closes it
PIECE = 1 << 20  # bytes read at a time from a connection: a skipped body is never held whole
BUFFER = 64 << 10  # a connection's read buffer between frames (asyncio pauses the socket past twice this)
_LEN = struct.Struct("!I")
STREAM_FULL = "the server's stream budget is full"


class Budget:
    """Bytes in flight on the stream path, against one limit."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0

    def take(self, n: int) -> bool:
        """Reserve ``n`` bytes if they fit."""
        if self.used + n > self.limit:
            return False
        self.used += n
        return True

    def charge(self, n: int) -> None:
        """Reserve ``n`` bytes whether or not they fit: a reply already made (the next frame waits for room)."""
        self.used += n

    def give(self, n: int) -> None:
        self.used -= n


class StreamPeer(NamedTuple):
    """A reply's destination on the stream path; ``ip`` first, as a datagram address's host (the request's
    identity is (ip, seq) on either path)."""

    ip: str
    port: int
    conn: Connection


class Connection:
    """One client connection: replies are framed onto it and counted against the budget until written."""

    def __init__(self, writer: asyncio.StreamWriter, budget: Budget) -> None:
        self.writer, self.budget = writer, budget
        self.unwritten = 0  # reply bytes charged to the budget since the last drain

    def send(self, data: bytes) -> None:
        if self.writer.is_closing():
            return  # the client went away: the reply is lost, as a datagram's can be
        self.budget.charge(len(data))
        self.unwritten += len(data)
        self.writer.write(frame(data))

    async def drain(self) -> None:
        """Wait until the connection took the replies (no progress for STALL plus a second per MB: closed)."""
        try:
            await asyncio.wait_for(self.writer.drain(), STALL + self.unwritten / (1 << 20))
        finally:
            self.budget.give(self.unwritten)
            self.unwritten = 0


class StreamServer:
    """The shim's TCP listener for the stream path."""

    def __init__(self, shim: Shim, budget: int = STREAM_BUDGET, max_value: int = MAX_VALUE) -> None:
        if not 0 < max_value <= MAX_VALUE:
            raise ValueError(f"max value {max_value} B: give 1..{MAX_VALUE} (Redis' proto-max-bulk-len)")
        if budget < HEADER_LEN:
            raise ValueError(f"stream budget {budget} B holds no frame; give at least {HEADER_LEN} B")
        self.shim, self.budget, self.max_value = shim, Budget(budget), max_value
        # a frame longer than this cannot be served here at all: refused TOO_LARGE, and the connection closed
        self.max_frame = min(MAX_KEY + max_value + FRAME_SLACK, budget)
        self._open: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None

    @property
    def connections(self) -> int:
        return len(self._open)

    async def start(self, host: str, port: int) -> None:
        self.server = await asyncio.start_server(self._serve, host, port, limit=BUFFER)

    async def close(self) -> None:
        """Stop listening and end every connection (a request being served is cancelled with the shim's)."""
        if self.server is not None:
            self.server.close()
        for writer in list(self._open):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        shim = self.shim
        if self.connections >= MAX_STREAMS:
            shim.errors["stream_connections"] += 1
            writer.close()
            return
        self._open.add(writer)
        host, port = writer.get_extra_info("peername")[:2]
        peer = StreamPeer(host, port, Connection(writer, self.budget))
        try:
            while await self._one(reader, peer):
                await peer.conn.drain()
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError) as e:
            shim.malformed["stalled" if isinstance(e, TimeoutError) else "truncated"] += 1
        except OSError as e:
            log.debug("stream connection from %s:%d: %s", host, port, e)
        finally:
            self._open.discard(writer)
            self.budget.give(peer.conn.unwritten)
            peer.conn.unwritten = 0
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, peer: StreamPeer) -> bool:
        """Serve the connection's next frame; False when the connection is to end (the client closed it
        between frames, or a frame no peer of this version sends)."""
        try:
            (n,) = _LEN.unpack(await asyncio.wait_for(reader.readexactly(_LEN.size), IDLE))
        except asyncio.IncompleteReadError as e:
            if e.partial:
                raise
            return False  # closed between frames: the normal end
        except TimeoutError:
            return False  # idle: the client opens another when it needs one
        shim = self.shim
        if n > self.max_frame:
            head = await reader.readexactly(min(n, HEADER_LEN))
            shim.malformed["frame"] += 1
            if (answer := refusal(head, WireError("too_large", f"a frame of {n} bytes"))) is not None:
                self._answer(answer, peer, f"a frame of {n} bytes exceeds this server's {self.max_frame}")
            # the rest is read and dropped before the connection closes: closed with bytes unread, the
            # connection would be reset, and a client still sending could lose the answer
            await self._skip(reader, n - len(head))
            return False
        if not self.budget.take(n):
            head = await reader.readexactly(min(n, HEADER_LEN))
            await self._skip(reader, n - len(head))
            if (task := self._busy(head, peer)) is not None:
                await task
            return True
        try:  # the request's bytes stay reserved until it is served
            await self._request(await self._read(reader, n), peer)
        finally:
            self.budget.give(n)
        return True

    async def _request(self, body: bytes, peer: StreamPeer) -> None:
        shim, received = self.shim, time.monotonic()
        if (msg := shim.decode(body, peer)) is None:
            return
        if msg.op not in REQUEST_OPS:  # coherence is the switches' and the shim's
            shim.malformed["unexpected_op"] += 1
            return
        reserved = await self._value_room(msg, peer) if msg.op == Op.GET else 0
        if reserved is None:
            return  # answered: no room for the value
        try:
            task = shim.on_message(msg, peer, received)
            if task is not None:
                await task
        finally:
            self.budget.give(reserved)

    async def _value_room(self, msg: Message, peer: StreamPeer) -> int | None:
        """Reserve the length of the value a GET will read (None: answered BUSY or TOO_LARGE instead)."""
        try:
            size = int(await self.shim.redis.strlen(msg.key))
        except RedisError:
            size = 0  # another type (WRONGTYPE) or Redis unreachable: the read itself answers
        if size + HEADER_LEN + len(msg.key) > self.budget.limit:
            self._reply(msg, peer, Status.TOO_LARGE, f"a {size}-byte value exceeds this server's stream budget")
            return None
        if not self.budget.take(size):
            self.shim.errors["stream_busy"] += 1
            self._reply(msg, peer, Status.BUSY, STREAM_FULL)
            return None
        return size

    async def _read(self, reader: asyncio.StreamReader, n: int) -> bytes:
        """``n`` bytes of a frame's body, each piece within STALL seconds."""
        if n <= PIECE:
            return await asyncio.wait_for(reader.readexactly(n), STALL)
        out = bytearray()
        while len(out) < n:
            out += await asyncio.wait_for(reader.readexactly(min(PIECE, n - len(out))), STALL)
        return bytes(out)

    async def _skip(self, reader: asyncio.StreamReader, n: int) -> None:
        while n > 0:
            n -= len(await asyncio.wait_for(reader.readexactly(min(PIECE, n)), STALL))

    def _busy(self, head: bytes, peer: StreamPeer) -> asyncio.Task | None:
        """A frame the budget has no room for, whose header is ``head``: BUSY, a write through the shim's
        BUSY refusal (recorded in Redis, so no later copy applies it; a copy of a write the shim knows gets
        what that write got)."""
        shim = self.shim
        if len(head) < HEADER_LEN or head[0] != VERSION:
            shim.malformed["short" if len(head) < HEADER_LEN else "version"] += 1
            return None
        fields = HEADER_STRUCT.unpack_from(head)
        try:
            op = Op(fields[1])
        except ValueError:
            shim.malformed["op"] += 1
            return None
        msg = Message(op, digest=bytes(fields[5]), seq=fields[4])
        if op == Op.GET:
            shim.errors["stream_busy"] += 1
            self._reply(msg, peer, Status.BUSY, STREAM_FULL)
        elif op in REQUEST_OPS:
            return shim.refuse_unread(msg, peer, time.monotonic())
        else:
            shim.malformed["unexpected_op"] += 1
        return None

    def _reply(self, msg: Message, peer: StreamPeer, status: Status, why: str) -> None:
        self._answer(msg.reply(status), peer, why)

    def _answer(self, answer: Message, peer: StreamPeer, why: str) -> None:
        """Send ``answer`` with ``why`` as its value (a RESP error, as an EXEC's refusal is worded); a refusal
        (TOO_LARGE, BAD_REQUEST) is counted as the datagram path counts it."""
        answer.value = f"-ERR {why}".encode()
        if answer.status in (Status.TOO_LARGE, Status.BAD_REQUEST):
            self.shim.refused[answer.status.name] += 1
        self.shim.send(encode(answer), peer)
