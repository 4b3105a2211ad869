"""EXEC: any single-key command, run by the key's shim (shim/commands.py), against a real redis-server.

Read-modify-write commands run at the shim, never read by a client and written back, so 8 clients' INCRs add up;
a write command goes through the two-phase protocol (HSET over a cached string invalidates it, and a GET then
answers WRONGTYPE as Redis does); a command that sets a TTL is a write and leaves the key uncacheable; a retried
command is applied once and answers its first reply; what the shim does not run is refused with a clear error.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path

import pytest
import redis

from client_lib import AsyncClient, Client, CommandError, ServerError, WrongTypeError
from distcache.wire import Message, Op, Status, decode, encode
from tests.common.keys import digest
from tests.common.shim_bed import CLUSTER, shim_on_loopback

WRONGTYPE = b"WRONGTYPE Operation against a key holding the wrong kind of value"  # Redis' words, for a GET

pytestmark = pytest.mark.timeout(120)
SPINE = CLUSTER.spine(0).switch_id


@pytest.fixture
def bed(redis_sock: Path, tmp_path: Path):  # noqa: ANN201
    with shim_on_loopback(redis_sock, tmp_path / "shim.sock") as b:
        yield b, redis.Redis(unix_socket_path=str(redis_sock))


def test_commands_run_at_the_shim_and_answer_as_redis_does(bed) -> None:  # noqa: ANN001
    b, r = bed
    c = b.client
    assert c.execute("INCR", "n") == 1 and c.execute("INCRBY", "n", 41) == 42
    assert c.execute("APPEND", "s", "ab") == 2 and c.execute("GET", "s") == b"ab"
    assert c.execute("SET", "s", "x", "GET") == b"ab"  # SET ... GET: the old value, atomically
    assert c.execute("SET", "s", "y", "NX") is None and r.get("s") == b"x"
    assert c.execute("HSET", "h", "f", "v", "g", "w") == 2 and c.execute("HGETALL", "h") == [b"f", b"v", b"g", b"w"]
    assert c.execute("DEL", "h") == 1 and c.execute("EXISTS", "h") == 0
    with pytest.raises(CommandError, match="not an integer"):
        c.execute("INCR", "s")  # Redis' own error, as redis-cli shows it
    assert c.get("n") == b"42"  # the same key through GET


def test_eight_clients_incr_a_thousand_times_each_and_land_on_eight_thousand(bed) -> None:  # noqa: ANN001
    b, r = bed
    errors: list[BaseException] = []

    def incr() -> None:
        try:
            with Client(CLUSTER, resolve=lambda _h: ("127.0.0.1", b.shim.port), timeout=2.0, retries=3) as c:
                for _ in range(1000):
                    c.execute("INCR", "counter")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=incr) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert r.get("counter") == b"8000"


def test_a_write_command_over_a_cached_string_invalidates_it(bed) -> None:  # noqa: ANN001
    b, r = bed
    c = b.client
    c.put("k", "string")
    assert b.link.populate(digest("k"), SPINE, 0, 1) == "valid"
    b.peer.seen.clear()
    assert c.execute("DEL", "k") == 1
    assert c.execute("HSET", "k", "f", "v") == 1
    time.sleep(0.1)
    invalidates = [m for m, _ in b.peer.seen if m.op == Op.INVALIDATE]
    assert len(invalidates) == 2  # each write command invalidated the copy before it ran
    assert [m.op for m, _ in b.peer.seen].count(Op.UPDATE) == 0  # a hash is never cached
    with pytest.raises(WrongTypeError, match="WRONGTYPE"):
        c.get("k")
    assert b.link.populate(digest("k"), SPINE, 0, 2) == "wrong_type"
    assert c.execute("SET", "k", "again") == b"OK"
    time.sleep(0.1)  # its phase 2 follows its reply
    b.peer.seen.clear()
    c.execute("APPEND", "k", "!")
    time.sleep(0.1)
    updates = [m for m, _ in b.peer.seen if m.op == Op.UPDATE]
    assert [m.value for m in updates] == [b"again!"]  # phase 2 carries what the command left
    assert r.get("k") == b"again!"


def test_commands_that_set_a_ttl_are_writes_and_leave_the_key_uncached(bed) -> None:  # noqa: ANN001
    b, r = bed
    c = b.client
    c.put("t", "v")
    assert b.link.populate(digest("t"), SPINE, 0, 1) == "valid"
    b.peer.seen.clear()
    assert c.execute("EXPIRE", "t", 100) == 1
    time.sleep(0.1)
    assert [m.op for m, _ in b.peer.seen] == [Op.INVALIDATE]  # invalidated, and not filled again: it has a TTL
    assert b.link.populate(digest("t"), SPINE, 0, 2) == "expires"
    assert c.execute("PERSIST", "t") == 1 and r.pttl("t") == -1
    assert c.execute("EXPIRE", "t", -1) == 1  # a TTL in the past deletes the key (Redis' rule): a write too
    assert r.exists("t") == 0 and c.get("t") is None


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (("FROBNICATE", "k"), "unknown command"),
        (("EVAL", "return 1", "1", "k"), "script"),
        (("MGET", "k", "other"), "other keys"),
        (("SET", "k"), "wrong number of arguments"),
        (("RENAME", "k", "elsewhere"), "other keys"),
        (("SELECT", "k"), "reaches past one key"),
        (("MOVE", "k", "1"), "reaches past one key"),
    ],
)
def test_what_the_shim_does_not_run_is_refused_with_a_clear_error(bed, args: tuple[str, ...], why: str) -> None:  # noqa: ANN001
    b, r = bed
    with pytest.raises(ServerError, match=why) as e:
        b.client.execute(*args)
    assert e.value.status == Status.BAD_REQUEST
    assert r.dbsize() == 0  # nothing ran


def test_a_key_that_is_not_where_redis_says_is_refused(bed) -> None:  # noqa: ANN001
    b, r = bed
    with pytest.raises(ServerError, match="other keys"):
        b.client.execute("SET", "k", "v", key="not-k")  # the request's key is not SET's key
    with pytest.raises(ServerError, match="names no key"):
        b.client.execute("PING", key="k")
    assert r.dbsize() == 0


def test_a_retried_command_is_applied_once_and_answers_its_first_reply(bed) -> None:  # noqa: ANN001
    b, r = bed
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(3)
    try:
        msg = Message(Op.EXEC, b"n", digest("n"), seq=77, args=[b"INCR", b"n"])
        replies = []
        for _ in range(3):  # the first copy and two retries of it
            sock.sendto(encode(msg), ("127.0.0.1", b.shim.port))
            replies.append(decode(sock.recv(2048)))
        assert [m.value for m in replies] == [b":1\r\n"] * 3 and r.get("n") == b"1"
    finally:
        sock.close()


def test_asyncio_clients_execute_too(bed) -> None:  # noqa: ANN001
    b, _ = bed

    async def run() -> list[object]:
        async with AsyncClient(CLUSTER, resolve=lambda _h: ("127.0.0.1", b.shim.port), timeout=2.0) as c:
            incrs = await asyncio.gather(*(c.execute("INCR", "a") for _ in range(20)))
            return [*incrs, await c.execute("GET", "a")]

    got = asyncio.run(run())
    assert sorted(got[:20]) == list(range(1, 21)) and got[20] == b"20"


def test_reads_that_arrive_together_are_each_answered_for_what_their_key_holds(bed) -> None:  # noqa: ANN001
    """Reads sent at once leave for Redis in one batch (one pipeline): each is still its own GET, so a hash
    answers WRONGTYPE, a string its value and a missing key NOT_FOUND, in the batch as alone.  (The Python
    shim's batched MGET answered nil for a hash and looked again apart from it, which read a hash as absent
    after a SET had replaced it: the fault matrix's HSET mix found it.)"""
    b, r = bed
    r.hset("h", "f", "v")
    r.set("s", "new")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(3)
    keys = [b"h", b"s", b"gone"] * 20
    try:
        for seq, k in enumerate(keys):  # sent before any reply is read: one recvmmsg takes many
            sock.sendto(encode(Message(Op.GET, k, digest(k), seq=seq)), ("127.0.0.1", b.shim.port))
        got = {}
        for _ in keys:
            m = decode(sock.recv(2048))
            got[m.seq] = (m.status, m.value)
    finally:
        sock.close()
    expect = {b"h": (Status.WRONG_TYPE, WRONGTYPE), b"s": (Status.OK, b"new"), b"gone": (Status.NOT_FOUND, b"")}
    assert got == {seq: expect[k] for seq, k in enumerate(keys)}
