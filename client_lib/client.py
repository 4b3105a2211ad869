"""The DistCache client library: ``get``, ``put``/``set``, ``delete``, sync and asyncio.

A call becomes one UDP request to the storage server that owns the key
(``Cluster.server_for_key``, hash h1), sent from this client's own ephemeral
port.  The network does the rest: the client-rack switch picks one of the
key's two caches, and a cache hit comes back from the switch to the same port
(it swaps addresses and ports), marked as served by a cache.

Keys are ``str`` (UTF-8) or ``bytes``, sent and stored byte for byte (the empty key too), with the
16-byte digest switches index them by (``Cluster.digest``, keyed by the deployment's secret).  Values are
``bytes`` or ``str``: up to ``MAX_CACHEABLE`` (128) bytes can be cached by switches; a request must fit
one datagram (``wire.MAX_DATAGRAM``: key and value together about 1 400 bytes); longer ones raise
:class:`ValueTooLargeError` before anything is sent.

A reply is taken only from the address and port its request went to (a cache
hit comes from there too: the switch swaps the addresses), and only when its
sequence number, digest and op match the request (and its key, when it carries one); anything else (strays, late
duplicates of retried requests, a reply forged by another host from another
port or address) is ignored and counted in ``ignored``.

A request without a reply is sent again after a retransmission timeout learned
as TCP learns it (client_lib/rto.py: RFC 6298 from the round-trip times of
requests sent once, per storage server and reads apart from writes, between
``min_timeout`` and ``timeout``, doubling with every timeout in a row), so a
copy lost on a dead path costs milliseconds, not ``timeout``.  Each copy
carries its attempt number in the header's flags (``wire.attempt_flags``): the
client-rack leaf sends attempt 1 of a read to the key's other cache and later
ones straight to the storage server, each attempt through another transit
spine.  A request gives up ``(retries + 1) * timeout`` after its first copy,
as with a fixed timeout, having sent at most ``retries + 1 +
ceil(log2(timeout / min_timeout))`` copies (``retries=0``: one); before a
server has answered once, its RTO is ``timeout``, so the first requests
behave exactly as before.  Every copy has
the same sequence number and leaves the same socket: the shim recognizes a
retried write by (address, seq) and applies it once, answering copies
with the first reply (shim/dedup.py), so a retry can neither apply a write
twice nor out of order, and a write answered ERROR stays unwritten.  The shim
remembers a write for ``wire.RETRY_SPAN`` (30 s), so a client refuses a retry
budget ``(retries + 1) * timeout`` longer than that; a shim with no room left
to remember a write answers BUSY (not applied), raised as
:class:`ServerBusyError`.  A reply to any copy is taken.  A request that times out on every attempt has an
unknown outcome: it may still take effect.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import hiredis

from client_lib.rto import DEFAULT_FLOOR, Rto, Schedule
from client_lib.stream import AsyncStreamLinks, BrokenStreamError, StreamLinks, matches
from distcache.cluster import Cluster, Host
from distcache.errors import (
    CommandError,
    InvalidKeyError,
    InvalidValueError,
    RequestTimeoutError,
    ServerBusyError,
    ServerError,
    ValueTooLargeError,
    WrongTypeError,
)
from distcache.hashing import key_bytes
from distcache.wire import (
    DC_PORT,
    FRAME_SLACK,
    MAX_VALUE,
    RETRY_SPAN,
    Flag,
    Message,
    Op,
    Status,
    WireError,
    attempt_flags,
    decode,
    encode,
    fits_datagram,
)

Resolver = Callable[[Host], tuple[str, int]]


@dataclass(frozen=True)
class Reply:
    """What a read returned and how: ``cached`` is True when a switch answered."""

    key: bytes
    value: bytes | None
    status: Status
    cached: bool
    served_by: int  # switch id that served a cache hit, 0 for a server
    target: int  # the cache switch the client rack routed the read to (0: none, straight to the server)
    latency: float  # seconds, request sent to reply received (last attempt)
    attempts: int  # copies sent (the reply may answer any of them)


def _cluster(c: Cluster | str | Path) -> Cluster:
    return c if isinstance(c, Cluster) else Cluster.load(c)


def numeric_address(addr: tuple[str, int]) -> tuple[str, int]:
    """``(host, port)`` as the kernel reports a datagram's source: an IPv4 address, so replies can be
    held to the address their request went to.  Raises ValueError for a port outside 1..65535
    (getaddrinfo would silently wrap it) and OSError (socket.gaierror) for a name that does not resolve."""
    host, port = addr
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"port {port!r} of {host}: expected 1..65535")
    info = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_DGRAM)
    return str(info[0][4][0]), port


def _value(value: bytes | str) -> bytes:
    if isinstance(value, str):
        value = value.encode("utf-8")
    elif isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    elif not isinstance(value, bytes):
        raise InvalidValueError(f"values must be bytes or str, not {type(value).__name__}")
    return value


def _arg(a: object) -> bytes:
    """A command's argument as Redis takes it: bytes as they are, str UTF-8 encoded, numbers in decimal."""
    if isinstance(a, (bytes, bytearray, memoryview)):
        return bytes(a)
    if isinstance(a, str):
        return a.encode("utf-8")
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return repr(a).encode()
    raise InvalidValueError(f"command arguments are bytes, str, int or float, not {type(a).__name__}")


def _command(command: str | bytes, args: tuple[object, ...], key: str | bytes | None) -> tuple[bytes, list[bytes]]:
    """The key and the argument block of ``command args``: the key is the first argument unless ``key`` says."""
    argv = [_arg(command), *(_arg(a) for a in args)]
    if key is None:
        if len(argv) < 2:
            raise InvalidKeyError(f"{argv[0]!r} has no argument to take as its key: name it with key=")
        return argv[1], argv
    return key_bytes(key), argv


def decode_reply(resp: bytes | None) -> object:
    """A command's reply as its EXEC_REPLY carries it (RESP) in Python: bytes, int, list, None; Redis' error
    raised (CommandError, WrongTypeError)."""
    if not resp:
        return None
    reader = hiredis.Reader(replyError=CommandError)
    reader.feed(resp)
    out = reader.gets()
    if isinstance(out, CommandError):
        raise WrongTypeError(str(out)) if str(out).startswith("WRONGTYPE") else out
    return out


class _ClientCore:
    def __init__(
        self,
        cluster: Cluster | str | Path,
        timeout: float,
        retries: int,
        resolve: Resolver | None,
        min_timeout: float | None,
    ) -> None:
        if timeout <= 0 or retries < 0:
            raise ValueError("timeout must be > 0 and retries >= 0")
        if (retries + 1) * timeout > RETRY_SPAN:
            raise ValueError(
                f"(retries + 1) * timeout = {(retries + 1) * timeout:g}s outlasts the {RETRY_SPAN:g}s a storage "
                "server remembers a write (wire.RETRY_SPAN): a late retry could be applied twice; lower either"
            )
        if min_timeout is None:
            min_timeout = min(DEFAULT_FLOOR, timeout)
        elif not 0 < min_timeout <= timeout:
            raise ValueError(f"min_timeout must be > 0 and at most timeout ({timeout}s), got {min_timeout}")
        self.cluster = _cluster(cluster)
        self.timeout, self.retries, self.min_timeout = timeout, retries, min_timeout
        # (server address, is a write) -> its retransmission timeout: coherence makes writes slower than reads
        self.rtos: dict[tuple[tuple[str, int], bool], Rto] = {}
        self.resolve = resolve or (lambda host: (host.ip, DC_PORT))
        # the high 32 bits drawn at random, so two clients of one host (one address: the shim's request identity
        # is (address, seq)) do not share sequence numbers (p ~ 2^-32 per pair that overlap in time)
        self._seq = itertools.count(random.getrandbits(32) << 32)
        self._numeric: dict[tuple[str, int], tuple[str, int]] = {}  # resolve()'s answers, as sources look
        self.ignored = 0  # datagrams not taken as a reply: wrong source, seq, key or op, or malformed

    def _prepare(
        self, op: Op, key: str | bytes, value: bytes = b"", args: list[bytes] | None = None
    ) -> tuple[Message, tuple[str, int]]:
        """The request and where it goes (numeric: a reply must come from exactly there)."""
        raw = key_bytes(key)
        digest = self.cluster.digest(raw)
        size = len(value) + sum(len(a) for a in args or ())
        if size > MAX_VALUE + (FRAME_SLACK if args else 0):
            what = "command's arguments" if args else "value"
            raise ValueTooLargeError(
                f"a {op.name} with a {size}-byte {what} exceeds the {MAX_VALUE >> 20} MB a value may have "
                "(Redis' proto-max-bulk-len); store it in parts"
            )
        msg = Message(op, raw, digest, next(self._seq) & 0xFFFFFFFFFFFFFFFF, value, args or [])
        addr = self.resolve(self.cluster.server_for_key(digest))
        dest = self._numeric.get(addr)
        if dest is None:
            dest = self._numeric[addr] = numeric_address(addr)
        return msg, dest

    def rto(self, addr: tuple[str, int], op: Op = Op.GET) -> Rto:
        """The retransmission timeout of requests like ``op`` to ``addr`` (numeric), created on first use."""
        k = (addr, op != Op.GET)
        r = self.rtos.get(k)
        if r is None:
            r = self.rtos[k] = Rto(initial=self.timeout, floor=self.min_timeout, cap=self.timeout)
        return r

    def _schedule(self, req: Message, addr: tuple[str, int]) -> Schedule:
        return Schedule(self.rto(addr, req.op), self.retries)

    @staticmethod
    def _copy(req: Message, sched: Schedule) -> bytes:
        """The next copy of ``req``: its attempt number (the copies sent so far) in flags, same seq."""
        req.flags = attempt_flags(sched.sent - 1)
        return encode(req)

    _matches = staticmethod(matches)

    def _stream_copy(self, req: Message) -> bytes:
        """The request as the stream path carries it (same seq: the server knows it on either path)."""
        req.flags = Flag.STREAM
        return encode(req)

    def _stream_again(self, attempts: int, start: float) -> bool:
        """Whether a stream request whose copy got no reply may be sent again: within the client's retries, and
        early enough in the server's retry span that its dedup still knows a write that was applied.  Copies
        leave at least ``timeout`` apart (a refused connection fails at once), as the datagram path's do."""
        return attempts <= self.retries and time.perf_counter() - start < RETRY_SPAN / 2

    @staticmethod
    def _stream_failed(req: Message, addr: tuple[str, int], attempts: int, err: Exception) -> RequestTimeoutError:
        return RequestTimeoutError(
            f"no reply to {req.op.name} from {addr[0]}:{addr[1]} on the stream path (TCP) after {attempts} "
            f"attempts: {err or type(err).__name__}; is the storage server (shim) up and reachable?"
        )

    @staticmethod
    def _reply(req: Message, m: Message, latency: float, attempts: int) -> Reply:
        if m.status == Status.BUSY:
            why = (
                m.value.decode("utf-8", "replace").removeprefix("-ERR ")
                if m.value
                else ("it has no room to remember the write for its retry span")
            )
            raise ServerBusyError(
                f"server answered BUSY to {req.op.name} of key {req.key!r}: {why}; "
                f"{'the write was not applied; ' if req.op != Op.GET else ''}try again later",
                m.status,
            )
        if m.status == Status.STREAM:  # a redirect the caller follows; on the stream path itself: a broken server
            raise ServerError(f"server redirected {req.op.name} of key {req.key!r} on the stream path", m.status)
        if m.status == Status.WRONG_TYPE and m.op == Op.GET_REPLY:
            raise WrongTypeError(m.value.decode("utf-8", "replace") or "WRONGTYPE")
        if m.status in (Status.ERROR, Status.BAD_REQUEST, Status.TOO_LARGE):
            why = f": {m.value.decode('utf-8', 'replace').strip().removeprefix('-ERR ')}" if m.value else ""
            raise ServerError(f"server answered {m.status.name} to {req.op.name} of key {req.key!r}{why}", m.status)
        value = m.value if (m.op in (Op.GET_REPLY, Op.EXEC_REPLY) and m.status != Status.NOT_FOUND) else None
        return Reply(req.key, value, m.status, m.cached, m.served_by, m.target, latency, attempts)

    def _timeout(self, req: Message, addr: tuple[str, int], sched: Schedule) -> RequestTimeoutError:
        return RequestTimeoutError(
            f"no reply to {req.op.name} from {addr[0]}:{addr[1]} after {sched.sent} attempts "
            f"in {sched.deadline - sched.start:.3g}s (timeout {self.timeout}s, retries "
            f"{self.retries}); is the storage server (shim) up and reachable?"
        )


class Client(_ClientCore):
    """Blocking client.  Not thread-safe: use one per thread (they are cheap).

    ``timeout`` is the longest wait for one copy and the RTO before a server has answered;
    ``min_timeout`` the RTO's floor (default 20 ms, or ``timeout`` if that is less;
    ``min_timeout=timeout``: a fixed timeout, as before); a request gives up ``(retries + 1) * timeout``
    after its first copy.
    """

    def __init__(
        self,
        cluster: Cluster | str | Path,
        *,
        timeout: float = 0.5,
        retries: int = 3,
        min_timeout: float | None = None,
        resolve: Resolver | None = None,
        bind: str = "0.0.0.0",
    ) -> None:
        super().__init__(cluster, timeout, retries, resolve, min_timeout)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((bind, 0))
        self.streams = StreamLinks()

    def close(self) -> None:
        self.sock.close()
        self.streams.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, op: Op, key: str | bytes, value: bytes = b"", args: list[bytes] | None = None) -> Reply:
        req, addr = self._prepare(op, key, value, args)
        if not fits_datagram(req):
            return self._stream(req, addr, time.perf_counter())
        sched = self._schedule(req, addr)
        while (until := sched.next_copy(sent := time.perf_counter())) is not None:
            self.sock.sendto(self._copy(req, sched), addr)
            while (left := until - time.perf_counter()) > 0:
                self.sock.settimeout(left)
                try:
                    raw, src = self.sock.recvfrom(65535)
                except TimeoutError:
                    break
                m = self._matches(req, raw) if src == addr else None
                if m is None:
                    self.ignored += 1
                    continue
                now = time.perf_counter()
                sched.replied(now)
                if m.status == Status.STREAM:  # the reply does not fit a datagram: ask again on the stream path
                    return self._stream(req, addr, sched.start)
                return self._reply(req, m, now - sent, sched.sent)
            sched.timed_out()
        raise self._timeout(req, addr, sched)

    def _stream(self, req: Message, addr: tuple[str, int], start: float) -> Reply:
        """``req`` on the stream path (client_lib/stream.py), sent again on a new connection while allowed."""
        data, attempts = self._stream_copy(req), 0
        while True:
            attempts += 1
            sent = time.perf_counter()
            try:
                m = self.streams.exchange(addr, req, data, self.timeout)
            except (OSError, BrokenStreamError) as e:  # TimeoutError is an OSError
                if self._stream_again(attempts, start):
                    time.sleep(max(0.0, sent + self.timeout - time.perf_counter()))  # a refused connect is instant
                    continue
                raise self._stream_failed(req, addr, attempts, e) from None
            return self._reply(req, m, time.perf_counter() - sent, attempts)

    def get_reply(self, key: str | bytes) -> Reply:
        """Read ``key`` and say how it was served (cache or server, latency)."""
        return self._call(Op.GET, key)

    def mget(self, keys: list[str | bytes]) -> list[bytes | None]:
        """The values of ``keys`` (None where absent), read with every request in flight at once.

        Each key is still its own request (to its own server, maybe answered by a cache, with its
        own retransmission schedule); RequestTimeoutError names how many never got a reply.
        """
        out: list[bytes | None] = [None] * len(keys)
        pending: dict[int, tuple[int, Message, tuple[str, int], Schedule]] = {}  # seq -> (index, req, dest, sched)
        until: dict[int, float] = {}  # seq -> end of its current copy's wait
        sent: dict[int, float] = {}
        failed: list[tuple[Message, tuple[str, int], Schedule]] = []
        restream: list[tuple[int, Message, tuple[str, int], float]] = []  # answered STREAM: read on the stream path

        def send(seq: int) -> None:
            _, req, addr, sched = pending[seq]
            end = sched.next_copy(now := time.perf_counter())
            if end is None:
                failed.append(pending.pop(seq)[1:])
                until.pop(seq, None)
                return
            self.sock.sendto(self._copy(req, sched), addr)
            until[seq], sent[seq] = end, now

        for i, k in enumerate(keys):
            req, addr = self._prepare(Op.GET, k)
            pending[req.seq] = (i, req, addr, self._schedule(req, addr))
            send(req.seq)
        while pending:
            for seq in [s for s, t in until.items() if t <= time.perf_counter()]:
                pending[seq][3].timed_out()
                send(seq)
            if not pending:
                break
            self.sock.settimeout(max(1e-4, min(until.values()) - time.perf_counter()))  # 0: non-blocking
            try:
                raw, src = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            try:
                seq = decode(raw).seq
            except WireError:
                self.ignored += 1
                continue
            entry = pending.get(seq)
            m = self._matches(entry[1], raw) if entry is not None and src == entry[2] else None
            if entry is None or m is None:
                self.ignored += 1
                continue
            now = time.perf_counter()
            entry[3].replied(now)
            if m.status == Status.STREAM:
                restream.append((entry[0], entry[1], entry[2], entry[3].start))
            else:
                out[entry[0]] = self._reply(entry[1], m, now - sent[seq], entry[3].sent).value
            del pending[seq], until[seq]
        for i, req, addr, start in restream:
            out[i] = self._stream(req, addr, start).value
        if failed:
            req, addr, sched = failed[0]
            raise RequestTimeoutError(
                f"{len(failed)} of {len(keys)} reads got no reply after {sched.sent} attempts in "
                f"{sched.deadline - sched.start:.3g}s (e.g. from {addr[0]}:{addr[1]}); is the "
                f"storage up?"
            )
        return out

    def get(self, key: str | bytes) -> bytes | None:
        """The value of ``key``, or None if it does not exist."""
        return self.get_reply(key).value

    def execute(self, command: str | bytes, *args: object, key: str | bytes | None = None) -> object:
        """Run one single-key command (any Redis command whose keys are all one key) at the key's storage server,
        atomically and in the key's order, and return Redis' reply (bytes, int, list or None); CommandError for
        Redis' error reply, WrongTypeError for WRONGTYPE, ServerError (BAD_REQUEST) for what the server does not
        run (no key, other keys, scripts, an unknown command).  The key is the first argument unless ``key``
        names it (a command whose key comes later).  A write invalidates every cached copy first, as put does;
        read-modify-write commands (INCR, APPEND, SET NX/GET, GETDEL...) run there, never read and written back.
        """
        k, argv = _command(command, args, key)
        return decode_reply(self._call(Op.EXEC, k, args=argv).value)

    def put(self, key: str | bytes, value: bytes | str) -> None:
        """Store ``value`` under ``key``; returns once the server acknowledged (caches are invalid by then)."""
        self._call(Op.PUT, key, _value(value))

    set = put

    def delete(self, key: str | bytes) -> bool:
        """Delete ``key``; True if it existed."""
        return self._call(Op.DELETE, key).status == Status.OK


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.waiters: dict[int, tuple[Message, tuple[str, int], asyncio.Future]] = {}  # seq -> (req, dest, fut)
        self.ignored = 0

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            seq = decode(data).seq
        except WireError:
            self.ignored += 1
            return
        entry = self.waiters.get(seq)
        m = _ClientCore._matches(entry[0], data) if entry is not None and addr == entry[1] else None
        if entry is None or m is None or entry[2].done():
            self.ignored += 1
            return
        entry[2].set_result(m)


class AsyncClient(_ClientCore):
    """asyncio client; many requests may be in flight at once.  Create it, then ``await start()``
    (or use ``async with``)."""

    def __init__(
        self,
        cluster: Cluster | str | Path,
        *,
        timeout: float = 0.5,
        retries: int = 3,
        min_timeout: float | None = None,
        resolve: Resolver | None = None,
        bind: str = "0.0.0.0",
    ) -> None:
        self._proto = _Protocol()  # before the base class sets ``ignored``, which lives here
        super().__init__(cluster, timeout, retries, resolve, min_timeout)
        self.bind = bind
        self._transport: asyncio.DatagramTransport | None = None
        self.streams = AsyncStreamLinks()

    @property
    def ignored(self) -> int:
        """Datagrams not taken as a reply (wrong source, seq, key or op; malformed; late)."""
        return self._proto.ignored

    @ignored.setter
    def ignored(self, value: int) -> None:
        self._proto.ignored = value

    async def start(self) -> AsyncClient:
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.create_datagram_endpoint(lambda: self._proto, local_addr=(self.bind, 0))
        return self

    async def __aenter__(self) -> AsyncClient:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        self.streams.close()

    async def _call(self, op: Op, key: str | bytes, value: bytes = b"", args: list[bytes] | None = None) -> Reply:
        if self._transport is None:
            raise RuntimeError("AsyncClient not started: use `async with AsyncClient(...)` or `await client.start()`")
        req, addr = self._prepare(op, key, value, args)
        if not fits_datagram(req):
            return await self._stream(req, addr, time.perf_counter())
        sched = self._schedule(req, addr)
        fut = asyncio.get_running_loop().create_future()  # a reply to any copy resolves it
        self._proto.waiters[req.seq] = (req, addr, fut)
        try:
            while (until := sched.next_copy(sent := time.perf_counter())) is not None:
                self._transport.sendto(self._copy(req, sched), addr)
                done, _ = await asyncio.wait((fut,), timeout=max(0.0, until - time.perf_counter()))
                if done:
                    now = time.perf_counter()
                    sched.replied(now)
                    if fut.result().status == Status.STREAM:
                        break  # the reply does not fit a datagram: ask again on the stream path
                    return self._reply(req, fut.result(), now - sent, sched.sent)
                sched.timed_out()
            else:
                raise self._timeout(req, addr, sched)
        finally:
            self._proto.waiters.pop(req.seq, None)
            fut.cancel()
        return await self._stream(req, addr, sched.start)

    async def _stream(self, req: Message, addr: tuple[str, int], start: float) -> Reply:
        """:meth:`Client._stream`, awaited."""
        data, attempts = self._stream_copy(req), 0
        while True:
            attempts += 1
            sent = time.perf_counter()
            try:
                m = await self.streams.exchange(addr, req, data, self.timeout)
            except (OSError, BrokenStreamError) as e:
                if self._stream_again(attempts, start):
                    await asyncio.sleep(max(0.0, sent + self.timeout - time.perf_counter()))
                    continue
                raise self._stream_failed(req, addr, attempts, e) from None
            return self._reply(req, m, time.perf_counter() - sent, attempts)

    async def get_reply(self, key: str | bytes) -> Reply:
        return await self._call(Op.GET, key)

    async def get(self, key: str | bytes) -> bytes | None:
        return (await self.get_reply(key)).value

    async def mget(self, keys: list[str | bytes]) -> list[bytes | None]:
        """The values of ``keys`` (None where absent), every read in flight at once."""
        return list(await asyncio.gather(*(self.get(k) for k in keys)))

    async def execute(self, command: str | bytes, *args: object, key: str | bytes | None = None) -> object:
        """Run one single-key command at the key's storage server (:meth:`Client.execute`)."""
        k, argv = _command(command, args, key)
        return decode_reply((await self._call(Op.EXEC, k, args=argv)).value)

    async def put(self, key: str | bytes, value: bytes | str) -> None:
        await self._call(Op.PUT, key, _value(value))

    set = put

    async def delete(self, key: str | bytes) -> bool:
        return (await self._call(Op.DELETE, key)).status == Status.OK
