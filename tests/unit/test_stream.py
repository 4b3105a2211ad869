"""The stream path (shim/stream.py, client_lib/stream.py): what does not fit a datagram, over TCP to the shim.

Against a real redis-server and a real shim on loopback: large values and long keys written and read back
byte for byte (and by an operator's read-only redis-cli), a datagram reply too large for one redirected and
asked again with the same request (a write is not applied twice), the two-phase protocol for a stream write
over a cached key, the byte budget (BUSY, TOO_LARGE), and bad frames counted and answered, never a crash.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from client_lib import AsyncClient, Client, RequestTimeoutError, ServerBusyError, ServerError
from distcache.hashing import N_SPINE_BUCKETS
from distcache.rpc.shim import ShimLink
from distcache.wire import HEADER_LEN, Message, Op, Status, decode, encode, frame
from harness.redis import READER_USER, SHIM_USER, RedisUsers, redis_argv, wait_for_redis
from tests.common.keys import digest
from tests.common.shim_bed import CLUSTER, ShimThread, SwitchPeer, shim_on_loopback

pytestmark = pytest.mark.timeout(120)
SPINE = CLUSTER.spine(0).switch_id
MB = 1 << 20


@pytest.fixture
def bed(redis_sock: Path, tmp_path: Path):  # noqa: ANN201
    with shim_on_loopback(redis_sock, tmp_path / "shim.sock") as b:
        yield b, redis.Redis(unix_socket_path=str(redis_sock))


def _client(port: int, **kw: object) -> Client:
    return Client(CLUSTER, resolve=lambda _h: ("127.0.0.1", port), timeout=3.0, retries=0, **kw)  # type: ignore[arg-type]


def _wait(cond, what: str, within: float = 5.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + within
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[tuple[Path, RedisUsers]]:
    """A redis-server as a storage host runs it: the shim's user and the operators' read-only one."""
    users = RedisUsers.create(tmp_path)
    sock = tmp_path / "redis.sock"
    proc = subprocess.Popen(redis_argv(sock, tmp_path, users=users), stdout=subprocess.DEVNULL)
    wait_for_redis(sock, proc)
    yield sock, users
    proc.terminate()
    proc.wait(5)


def test_a_megabyte_under_a_binary_key_reads_back_byte_for_byte_and_in_redis_cli(storage, tmp_path: Path) -> None:  # noqa: ANN001
    sock, users = storage
    login = {"username": SHIM_USER, "password": users.shim_password}
    peer = SwitchPeer(sock, **login)
    s = ShimThread(sock, peer, tmp_path / "s.sock", redis_username=SHIM_USER, redis_password=users.shim_password)
    key, value = os.urandom(200), os.urandom(MB)  # every byte value, NULs and newlines among them
    try:
        ShimLink(s.control_addr).partition([SPINE] * N_SPINE_BUCKETS)
        with _client(s.port) as c:
            c.put(key, value)
            assert c.get(key) == value
            reply = c.get_reply(key)
            assert reply.value == value and not reply.cached
        cli = subprocess.run(  # the key from stdin (-x): a binary key cannot be an argv string
            ["redis-cli", "-s", str(sock), "--user", READER_USER, "--pass", users.reader_password, "--raw",
             "--no-auth-warning", "-x", "GET"],
            input=key, capture_output=True, timeout=30, check=True,
        )  # fmt: skip
        assert cli.stdout == value + b"\n"  # --raw ends the reply with a newline
        assert s.stats()["requests"]["PUT"] == 1
        _wait(lambda: s.stats()["stream"]["bytes"] == 0, "the budget given back")
    finally:
        s.close()
        peer.close()


def test_the_asyncio_client_and_mget_take_the_stream_path_where_they_must(bed) -> None:  # noqa: ANN001
    b, r = bed
    big, long_key = os.urandom(300_000), b"k" * 1500  # a key too long for a datagram: the request streams

    async def run() -> None:
        async with AsyncClient(CLUSTER, resolve=lambda _h: ("127.0.0.1", b.shim.port), timeout=3.0) as c:
            await asyncio.gather(c.put("big", big), c.put(long_key, "v"), c.put("small", "s"))
            assert await c.get("big") == big and await c.get(long_key) == b"v"
            assert await c.execute("STRLEN", "big") == len(big)
            assert await c.execute("GETRANGE", "big", 0, -1) == big  # a command's reply redirected too
            assert await c.mget(["small", "big", "nothing"]) == [b"s", big, None]

    asyncio.run(run())
    assert r.get(long_key) == b"v"
    assert b.client.mget(["small", "big", long_key, "nothing"]) == [b"s", big, b"v", None]


def test_a_datagram_reply_too_large_for_one_is_redirected_and_a_write_is_not_applied_again(bed) -> None:  # noqa: ANN001
    b, r = bed
    r.set("big", b"x" * 5000)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(3)
    try:
        get = Message(Op.GET, b"big", digest("big"), seq=7)
        sock.sendto(encode(get), ("127.0.0.1", b.shim.port))
        m = decode(sock.recv(65535))
        assert (m.op, m.status, m.seq, m.value, m.key) == (Op.GET_REPLY, Status.STREAM, 7, b"", b"big")
    finally:
        sock.close()
    # GETSET answers the old 5000 bytes: redirected, asked again on the stream path with the same seq
    assert b.client.execute("GETSET", "big", "new") == b"x" * 5000
    assert r.get("big") == b"new"
    assert b.shim.stats()["duplicates"]["replayed"] == 1  # the second copy got the first one's reply, not a second SET
    assert b.client.execute("GETSET", "big", "newer") == b"new"


def test_a_stream_write_over_a_cached_key_invalidates_it_before_redis_is_written(bed) -> None:  # noqa: ANN001
    b, r = bed
    c = b.client
    c.put("k", "old")
    assert b.link.populate(digest("k"), SPINE, 0, 1) == "valid"
    b.peer.seen.clear()
    big = os.urandom(64 * 1024)
    c.put("k", big)
    assert r.get("k") == big
    phase1 = [(m, at_redis) for m, at_redis in b.peer.seen if m.op == Op.INVALIDATE]
    assert phase1 and phase1[0][1] == b"old"  # every copy invalid before Redis held the new value
    assert not [m for m, _ in b.peer.seen if m.op == Op.UPDATE]  # a value that fits no slot is never cached
    c.put("k", "small again")  # phase 2 follows the reply
    _wait(lambda: [m.value for m, _ in b.peer.seen if m.op == Op.UPDATE] == [b"small again"], "the UPDATE")


def _stall(port: int, n: int, sent: int) -> socket.socket:
    """A connection that sent the first ``sent`` bytes of an ``n``-byte frame and nothing more."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(struct.pack("!I", n) + bytes(sent))
    return s


def test_past_the_budget_a_write_is_refused_busy_unread_and_not_applied(redis_sock: Path, tmp_path: Path) -> None:
    redis.Redis(unix_socket_path=str(redis_sock)).flushall()
    peer = SwitchPeer(redis_sock)
    s = ShimThread(redis_sock, peer, tmp_path / "s.sock", stream_budget=MB, stream_stall="1s")
    r = redis.Redis(unix_socket_path=str(redis_sock))
    try:
        ShimLink(s.control_addr).partition([SPINE] * N_SPINE_BUCKETS)
        with _client(s.port) as c:
            with pytest.raises(ServerError, match=r"TOO_LARGE.*exceeds this server's"):
                c.put("huge", bytes(2 * MB))  # could never fit the budget: refused, the connection closed
            hog = _stall(s.port, 700_000, 1000)  # reserves 700 000 bytes and sends no more
            _wait(lambda: s.stats()["stream"]["bytes"] >= 700_000, "the stalled frame's reservation")
            with pytest.raises(ServerBusyError, match="stream budget"):
                c.put("k", bytes(500_000))
            assert r.get("k") is None and s.stats()["errors"]["stream_busy"] == 1
            _wait(lambda: s.stats()["malformed"].get("stalled") == 1, "the stalled frame's connection closed")
            hog.close()
            _wait(lambda: s.stats()["stream"]["bytes"] == 0, "the budget given back")
            c.put("k", bytes(500_000))  # room again
            assert r.strlen("k") == 500_000
            r.set("toolong", bytes(2 * MB))  # written behind the shim's back, longer than the budget
            with pytest.raises(ServerError, match=r"TOO_LARGE.*stream budget"):
                c.get("toolong")
    finally:
        r.close()
        s.close()
        peer.close()


def test_bad_frames_are_counted_and_answered_never_a_crash(bed) -> None:  # noqa: ANN001
    b, r = bed
    port = b.shim.port

    def count(kind: str, what: str) -> int:
        return b.shim.stats()[kind].get(what, 0)

    def talk(data: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            out = b""
            while piece := s.recv(65536):
                out += piece
            return out

    put = Message(Op.PUT, b"k", digest("k"), seq=1, value=bytes(3000))
    assert talk(frame(encode(put))[:2000]) == b""  # cut inside the frame: no request, counted
    _wait(lambda: count("malformed", "truncated") == 1, "a truncated frame counted")
    assert talk(frame(b"\x02\x01")) == b"" and count("malformed", "short") == 1
    bad = bytearray(encode(put))
    bad[0] = 1  # a v1 peer
    assert talk(frame(bytes(bad))) == b"" and count("malformed", "version") == 1
    wrong_len = encode(put) + b"extra"
    answer = decode(talk(frame(wrong_len))[4:])
    assert (answer.op, answer.status, answer.seq) == (Op.PUT_REPLY, Status.BAD_REQUEST, 1)
    ack = Message(Op.INVALIDATE_ACK, b"k", digest("k"), seq=99)  # coherence is not a client's to send
    assert talk(frame(encode(ack))) == b"" and count("malformed", "unexpected_op") == 1
    forged = Message(Op.PUT, b"k", digest("other"), seq=2, value=bytes(3000))
    assert decode(talk(frame(encode(forged)))[4:]).status == Status.BAD_REQUEST
    assert talk(struct.pack("!I", 0xFFFFFFFF) + encode(put)[:HEADER_LEN])[4:] != b""  # past any frame: TOO_LARGE
    assert count("malformed", "frame") == 1 and count("refused", "TOO_LARGE") == 1 and r.get("k") is None
    assert count("refused", "BAD_REQUEST") == 2  # the wrong length and the forged digest, as datagrams count them
    b.client.put("k", bytes(3000))  # the shim goes on
    assert r.strlen("k") == 3000
    _wait(lambda: b.shim.stats()["stream"]["bytes"] == 0, "the budget given back")  # (just after the reply left)


def test_a_connection_the_shim_closed_is_replaced_and_a_dead_shim_is_given_up_on(
    redis_sock: Path, tmp_path: Path
) -> None:
    redis.Redis(unix_socket_path=str(redis_sock)).flushall()
    peer = SwitchPeer(redis_sock)
    s = ShimThread(redis_sock, peer, tmp_path / "s.sock", stream_idle="0.2s")
    try:
        ShimLink(s.control_addr).partition([SPINE] * N_SPINE_BUCKETS)
        with _client(s.port) as c:
            c.put("a", bytes(5000))
            _wait(lambda: s.stats()["stream"]["connections"] == 0, "the idle connection closed by the shim")
            began = time.monotonic()
            c.put("b", bytes(5000))  # the kept connection is gone: a new one at once, the same copy
            assert time.monotonic() - began < 1.0  # (not a second copy, which waits the 3 s timeout)
            assert c.get_reply("b").attempts == 1 and c.get("a") == bytes(5000)
        port = s.port
    finally:
        s.close()
        peer.close()
    with Client(CLUSTER, resolve=lambda _h: ("127.0.0.1", port), timeout=0.05, retries=2) as c:
        began = time.monotonic()
        with pytest.raises(RequestTimeoutError, match=r"stream path \(TCP\) after 3 attempts"):
            c.put("k", bytes(5000))  # nothing listens: refused at once, three copies 50 ms apart
        assert 0.1 <= time.monotonic() - began < 1.0
