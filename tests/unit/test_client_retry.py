"""Clients that do not wait on a dead path (issue 16, item 3): an adaptive retransmission timeout, and
retries that carry their attempt number.

Real UDP sockets on loopback.  A test server at 127.0.0.1 answers every request it keeps (GET: a value
derived from the key; PUT/DELETE: OK) and drops the copies it is told to, as a dead path would; it
records every copy it receives (arrival time, seq, attempt number).  Once a client has seen a few
replies, a lost copy is sent again after a few milliseconds instead of the fixed timeout, with the same
seq and attempt 1, and the request succeeds.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from client_lib.client import AsyncClient, Client
from client_lib.rto import DEFAULT_FLOOR
from distcache.cluster import Cluster
from distcache.errors import RequestTimeoutError
from distcache.wire import Flag, Message, Op, Status, attempt_flags, attempt_of, decode, encode
from tests.common.keys import digest
from tests.common.udp_server import LoopbackServer

pytestmark = pytest.mark.timeout(60)

CLUSTER = Cluster()
TIMEOUT = 0.5  # the fixed timeout clients had: the adaptive one must beat it by far


@dataclass
class Copy:
    at: float  # time.perf_counter() when it arrived
    seq: int
    op: Op
    attempt: int


class Server(LoopbackServer):
    """Answers requests on 127.0.0.1; ``drop(msg)`` says which copies are lost on the way."""

    def __init__(self) -> None:
        self.copies: list[Copy] = []
        self.drop: Callable[[Message], bool] = lambda _m: False
        super().__init__()

    def serve(self, req: Message, client: tuple[str, int]) -> None:
        self.copies.append(Copy(time.perf_counter(), req.seq, req.op, attempt_of(req.flags)))
        if self.drop(req):
            return
        value = b"v:" + req.key if req.op == Op.GET else b""
        self.sock.sendto(encode(req.reply(Status.OK, value)), client)

    def of(self, seq: int) -> list[Copy]:
        return [c for c in self.copies if c.seq == seq]


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


def drop_first_copy_of(keys: set[str]) -> Callable[[Message], bool]:
    """Loses attempt 0 of the requests for ``keys``."""
    wanted = {k.encode() for k in keys}
    return lambda m: attempt_of(m.flags) == 0 and m.key in wanted


def _check_retry(server: Server, seq: int, attempts: int) -> float:
    """The request ``seq`` arrived twice, same seq, attempts 0 then 1; the gap, in seconds."""
    first, retry = server.of(seq)
    assert (first.attempt, retry.attempt, attempts) == (0, 1, 2)
    gap = retry.at - first.at
    assert DEFAULT_FLOOR * 0.8 <= gap < TIMEOUT / 4, f"retry {gap * 1000:.1f} ms after the lost copy"
    return gap


def test_sync_retry_is_quick_carries_attempt_1_and_succeeds(server: Server) -> None:
    with Client(CLUSTER, resolve=server.resolve(), timeout=TIMEOUT, retries=3) as c:
        for i in range(20):  # replies teach the client the round trip: reads and writes apart
            assert c.get(f"w{i}") == f"v:w{i}".encode()
            c.put(f"w{i}", b"x")
        addr = ("127.0.0.1", server.port)
        rto = c.rto(addr)
        assert rto.samples == 20 and rto.current < TIMEOUT / 4
        server.drop = drop_first_copy_of({"lost", "lostw"})
        r = c.get_reply("lost")
        assert r.value is not None
        _check_retry(server, server.copies[-1].seq, r.attempts)
        assert rto.samples == 20  # Karn: a request sent twice gives no sample
        t = time.perf_counter()
        c.put("lostw", b"y")  # a write's retry: the same seq (the shim's dedup needs it), attempt 1
        assert time.perf_counter() - t < TIMEOUT / 4
        seq = server.copies[-1].seq
        assert [(x.op, x.attempt) for x in server.of(seq)] == [(Op.PUT, 0), (Op.PUT, 1)]


def test_async_retry_is_quick_carries_attempt_1_and_succeeds(server: Server) -> None:
    async def go() -> None:
        async with AsyncClient(CLUSTER, resolve=server.resolve(), timeout=TIMEOUT, retries=3) as c:
            await asyncio.gather(*(c.get(f"w{i}") for i in range(5)))  # concurrent: each its own sample
            for i in range(15):
                await c.get(f"w{i}")
            rto = c.rto(("127.0.0.1", server.port))
            assert rto.samples == 20 and rto.current < TIMEOUT / 4
            server.drop = drop_first_copy_of({"lost"})
            r = await c.get_reply("lost")
            assert r.value is not None
            _check_retry(server, server.copies[-1].seq, r.attempts)
            assert rto.samples == 20

    asyncio.run(go())


def test_mget_retries_each_lost_read_alone(server: Server) -> None:
    with Client(CLUSTER, resolve=server.resolve(), timeout=TIMEOUT, retries=3) as c:
        for i in range(10):
            c.get(f"w{i}")
        server.drop = drop_first_copy_of({"b"})
        n = len(server.copies)
        t = time.perf_counter()
        assert c.mget(["a", "b", "c"]) == [b"v:" + k.encode() for k in "abc"]
        assert time.perf_counter() - t < TIMEOUT / 4
        assert sorted(x.attempt for x in server.copies[n:]) == [0, 0, 0, 1]


def test_a_dead_destination_backs_off_to_the_cap_and_gives_up_in_bounded_time(server: Server) -> None:
    """Every copy lost: the waits double from the learned RTO up to ``timeout``, each copy says its attempt,
    and the request gives up (retries + 1) * timeout after its first copy, with one line."""
    timeout, retries = 0.2, 1
    with Client(CLUSTER, resolve=server.resolve(), timeout=timeout, retries=retries) as c:
        for i in range(10):
            c.get(f"w{i}")
        server.drop = lambda _m: True
        t = time.perf_counter()
        with pytest.raises(RequestTimeoutError) as e:
            c.get("dead")
        took = time.perf_counter() - t
    assert (retries + 1) * timeout <= took < (retries + 1) * timeout + 0.15
    assert "\n" not in str(e.value) and "attempts" in str(e.value)
    copies = server.of(server.copies[-1].seq)
    assert [x.attempt for x in copies] == list(range(len(copies)))
    shorter = math.ceil(math.log2(timeout / DEFAULT_FLOOR))  # waits under the cap, doubling from the floor
    assert 4 <= len(copies) <= retries + 1 + shorter
    gaps = [b.at - a.at for a, b in itertools.pairwise(copies)]
    assert gaps[0] < timeout / 4 and max(gaps) < timeout + 0.05
    assert gaps[2] > 1.5 * gaps[0]  # backing off (two steps, so timer noise cannot fake it)


def test_fixed_timeout_when_asked(server: Server) -> None:
    """``min_timeout=timeout`` is the old fixed timeout; a floor above the timeout is refused."""
    with Client(CLUSTER, resolve=server.resolve(), timeout=0.1, retries=1, min_timeout=0.1) as c:
        for i in range(5):
            c.get(f"w{i}")
        server.drop = drop_first_copy_of({"lost"})
        c.get("lost")
        first, retry = server.of(server.copies[-1].seq)
        assert retry.at - first.at >= 0.095
    with pytest.raises(ValueError, match="min_timeout"):
        Client(CLUSTER, resolve=server.resolve(), timeout=0.1, min_timeout=0.2)


def test_attempt_field_round_trips_and_leaves_the_other_flags_alone() -> None:
    """Attempts 0..7 ride in flags bits 2..4 as they are; later ones carry 2..7 again (still past every cache,
    each through the next transit spine); CACHED and POPULATE are untouched; a negative attempt is refused."""
    assert [attempt_of(attempt_flags(a)) for a in range(8)] == list(range(8))
    assert [attempt_of(attempt_flags(a)) for a in range(8, 20)] == [2, 3, 4, 5, 6, 7] * 2
    for a in range(20):
        f = attempt_flags(a)
        assert not f & (Flag.CACHED | Flag.POPULATE) and f & ~Flag.ATTEMPT == 0
        assert attempt_of(f | Flag.CACHED | Flag.POPULATE) == attempt_of(f)
        m = decode(encode(Message(Op.GET, b"k", digest("k"), seq=1, flags=f)))
        assert attempt_of(m.flags) == attempt_of(f)
    with pytest.raises(ValueError, match="attempt"):
        attempt_flags(-1)
