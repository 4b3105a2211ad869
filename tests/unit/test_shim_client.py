"""Shim and client library on loopback, against a real redis-server.

The switches' part in coherence is played by a UDP peer on 127.0.0.1 (tests/common/shim_bed.py's
SwitchPeer) that reflects INVALIDATE/UPDATE as acknowledgements (and can drop some), records
what it saw, and checks Redis at the moment phase 1 arrives.  It is the
shim's network peer, not a stand-in for any code under test.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path

import pytest
import redis

from client_lib import (
    AsyncClient,
    Client,
    InvalidKeyError,
    InvalidValueError,
    RequestTimeoutError,
    ServerError,
    ValueTooLargeError,
)
from distcache.cluster import Cluster
from distcache.hashing import N_SPINE_BUCKETS
from distcache.rpc.shim import ShimLink, ShimRequestError, ShimUnavailableError
from distcache.wire import MAX_DATAGRAM, MAX_VALUE, Flag, Message, Op, Status, decode, encode
from tests.common.keys import digest
from tests.common.shim_bed import CLUSTER, ShimThread, SwitchPeer, shim_on_loopback

pytestmark = pytest.mark.timeout(60)
SPINE = CLUSTER.spine(0).switch_id
LEAF = CLUSTER.storage_leaf(0).switch_id  # server r0s0's
SEQ_BLOCK = 1 << 20  # coherence numbers a shim reserves at a time (shim/coherence.go)


def serial_newer(a: int, b: int) -> bool:
    """Whether 64-bit sequence number a is newer than b (RFC 1982), as switches compare them."""
    return a != b and ((a - b) & 0xFFFFFFFFFFFFFFFF) < 1 << 63


@pytest.fixture
def env(redis_sock: Path, tmp_path: Path):  # noqa: ANN201
    with shim_on_loopback(redis_sock, tmp_path / "shim.sock") as b:
        yield b.client, b.shim, b.peer, b.link, redis.Redis(unix_socket_path=str(redis_sock))


def test_put_get_delete(env) -> None:  # noqa: ANN001
    client, _, peer, _, r = env
    assert client.get("nope") is None
    client.put("k1", "v1")
    assert r.get("k1") == b"v1"  # stored under the key itself
    reply = client.get_reply("k1")
    assert reply.value == b"v1" and not reply.cached and reply.served_by == 0
    client.set(b"k2", b"\x00\xffbinary")
    assert client.get(b"k2") == b"\x00\xffbinary"
    big = b"B" * (MAX_DATAGRAM - 52 - 3)  # the largest value one datagram carries with a 3-byte key
    client.put("big", big)
    assert client.get("big") == big
    key = b"\x00binary key\xff" + bytes(range(200))  # any bytes, stored as they are
    client.put(key, "v")
    assert r.get(key) == b"v" and client.get(key) == b"v"
    client.put("", "the empty key")  # Redis allows it, so does DistCache
    assert r.get("") == b"the empty key" and client.get(b"") == b"the empty key"
    assert client.delete("k1") is True
    assert client.delete("k1") is False
    assert client.get("k1") is None
    assert peer.seen == []  # nothing is cached: no coherence traffic at all


def test_write_to_cached_key_runs_both_phases_in_order(env) -> None:  # noqa: ANN001
    client, _shim, peer, link, r = env
    client.put("hot", "old")
    key = digest("hot").hex()
    assert link.populate(bytes.fromhex(key), SPINE, 0, 1) == "valid"
    assert [op for op, _ in peer.ops()] == [Op.INVALIDATE, Op.UPDATE]
    assert peer.seen[1][0].value == b"old" and peer.seen[0][0].seq == peer.seen[1][0].seq
    peer.seen.clear()
    client.put("hot", "new")
    assert r.get("hot") == b"new"  # written before the client was answered
    deadline = time.monotonic() + 2
    while len(peer.seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    (inv, redis_at_inv), (upd, _) = peer.seen[:2]
    assert inv.op == Op.INVALIDATE and inv.target == SPINE and redis_at_inv == b"old"
    assert upd.op == Op.UPDATE and upd.seq == inv.seq and upd.value == b"new"
    peer.seen.clear()
    assert client.delete("hot") is True
    time.sleep(0.2)
    assert [op for op, _ in peer.ops()] == [Op.INVALIDATE]  # a delete has no phase 2
    assert link.evict(bytes.fromhex(key), SPINE) is True
    peer.seen.clear()
    client.put("hot", "uncached again")
    time.sleep(0.1)
    assert peer.seen == []


def test_only_writes_with_coherence_messages_take_a_sequence_number(env) -> None:  # noqa: ANN001
    """The numbers a shim's life takes per second bound how far ahead of the clock it runs, and so whether
    its next life starts ahead of it: writes of keys no switch holds take none."""
    client, _shim, peer, link, _ = env
    client.put("hot2", "v0")
    assert link.populate(digest("hot2"), SPINE, 0, 1, b"hot2") == "valid"
    first = [m for m, _ in peer.seen if m.op == Op.INVALIDATE][-1].seq  # the populate's number
    for i in range(50):
        client.put(f"cold{i}", "x")
    client.put("hot2", "v1")
    _wait_seen(peer, 4)
    inv = [m for m, _ in peer.seen if m.op == Op.INVALIDATE][-1]
    assert inv.seq == first + 1  # the 50 uncached writes took none


def _wait_seen(peer: SwitchPeer, n: int, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while len(peer.seen) < n and time.monotonic() < deadline:
        time.sleep(0.01)


def test_write_invalidates_every_spine_that_caches_the_key(env) -> None:  # noqa: ANN001
    """After a partition change a key can be cached on its old and new owner: a write must reach both."""
    client, _, peer, link, _ = env
    key = digest("moved").hex()
    client.put("moved", "v0")
    other = SPINE + 1
    for sw in (SPINE, other):
        assert link.populate(bytes.fromhex(key), sw, 0, 1) == "valid"
    assert [m.target for m, _ in peer.seen] == [SPINE, SPINE, other, other]  # each populate takes its own path
    peer.seen.clear()
    client.put("moved", "v1")
    _wait_seen(peer, 4)
    invs = [m for m, _ in peer.seen if m.op == Op.INVALIDATE]
    upds = [m for m, _ in peer.seen if m.op == Op.UPDATE]
    assert sorted(m.target for m in invs) == [SPINE, other] and len({m.seq for m in invs}) == 1
    assert sorted(m.target for m in upds) == [SPINE, other] and all(m.value == b"v1" for m in upds)


def test_ack_from_one_path_does_not_complete_another(env) -> None:  # noqa: ANN001
    """Acks are matched by (op, seq, target): one spine's ack must not stand in for a silent spine's."""
    client, _, peer, link, r = env
    client.put("two", "before")
    other = SPINE + 1
    for sw in (SPINE, other):
        link.populate(digest("two"), sw, 0, 1, b"two")
    peer.answer_only = {SPINE}  # the other spine stays silent
    with pytest.raises(ServerError):
        client.put("two", "after")
    assert r.get("two") == b"before"


def test_spines_declared_down_are_skipped_and_cannot_be_populated(env) -> None:  # noqa: ANN001
    client, _, peer, link, _ = env
    other = SPINE + 1
    client.put("k", "v0")
    for sw in (SPINE, other):
        link.populate(digest("k"), sw, 0, 1, b"k")
    link.partition([SPINE] * N_SPINE_BUCKETS, [other], 2)
    peer.seen.clear()
    client.put("k", "v1")  # the dead spine never answers; the write must not wait for it
    _wait_seen(peer, 2)
    assert {m.target for m, _ in peer.seen} == {SPINE}
    assert link.populate(digest("k"), other, 0, 1, b"k") == "down"
    st = link.stats()
    assert st["down"] == [other] and st["epoch"] == 2


def test_write_waiting_on_a_spine_completes_when_it_is_declared_down(env) -> None:  # noqa: ANN001
    """A write already retransmitting to a spine that just died finishes as soon as the controller declares
    the spine down, instead of failing at the invalidation deadline."""
    client, _shim, peer, link, r = env
    other = SPINE + 1
    client.put("k", "v0")
    for sw in (SPINE, other):
        link.populate(digest("k"), sw, 0, 1, b"k")
    peer.answer_only = {SPINE}  # without the release the write would wait 2.5 s, then be refused
    done: list[float] = []
    t0 = time.monotonic()
    writer = threading.Thread(target=lambda: (client.put("k", "v1"), done.append(time.monotonic() - t0)))
    writer.start()
    time.sleep(0.3)
    assert not done and r.get("k") == b"v0"  # still waiting for the silent spine
    link.partition([SPINE] * N_SPINE_BUCKETS, [other], 3)
    writer.join(3)
    assert done and done[0] < 1.0 and r.get("k") == b"v1"


def test_restarted_shim_treats_every_key_as_cached_until_the_view(redis_sock: Path, tmp_path: Path) -> None:
    """A restarted shim forgot which keys are cached: until the controller's view, every write invalidates,
    along the partition it saved before the restart."""
    redis.Redis(unix_socket_path=str(redis_sock)).flushall()
    peer = SwitchPeer(redis_sock)
    state = tmp_path / "shim.state.json"
    first = ShimThread(redis_sock, peer, tmp_path / "a.sock", state_file=state)
    ShimLink(first.control_addr).partition([SPINE + 1] * N_SPINE_BUCKETS, [SPINE], 7)
    first.close()
    shim = ShimThread(redis_sock, peer, tmp_path / "b.sock", state_file=state, fresh=False)
    link = ShimLink(shim.control_addr)
    try:
        st = link.stats()
        assert st["view_known"] is False and st["epoch"] == 7 and st["down"] == [SPINE]
        with Client(CLUSTER, resolve=lambda _h: ("127.0.0.1", shim.port), timeout=3.0, retries=0) as client:
            client.put("never-cached", "v")
            _wait_seen(peer, 2)
            assert [(m.op, m.target) for m, _ in peer.seen] == [(Op.INVALIDATE, SPINE + 1), (Op.UPDATE, SPINE + 1)]
            link.view({}, [SPINE + 1, LEAF], st["incarnation"])  # every switch in service: known
            assert link.stats()["view_known"] is True
            peer.seen.clear()
            client.put("never-cached", "w")
            time.sleep(0.2)
            assert peer.seen == []
    finally:
        shim.close()
        peer.close()


def test_server_rate_limit_queues_then_drops(redis_sock: Path, tmp_path: Path) -> None:
    """A rate-limited server (cluster server_rate) serves a burst, queues a little, and drops and counts the rest."""
    rate, burst = 20.0, 2
    peer = SwitchPeer(redis_sock)
    shim = ShimThread(redis_sock, peer, tmp_path / "s.sock", cluster=Cluster(server_rate=rate, server_burst=burst))
    link = ShimLink(shim.control_addr)

    async def flood() -> list[bool]:
        async with AsyncClient(CLUSTER, resolve=lambda _h: ("127.0.0.1", shim.port), timeout=1.0, retries=0) as c:

            async def one(i: int) -> bool:
                try:
                    await c.get(f"k{i}")
                    return True
                except RequestTimeoutError:
                    return False

            return await asyncio.gather(*(one(i) for i in range(40)))

    try:
        answered = sum(asyncio.run(flood()))
        dropped = link.stats()["errors"].get("rate_limited", 0)
        assert answered + dropped == 40
        assert 1 <= answered <= burst + rate * Cluster().server_queue + 2  # the rest arrived beyond the queue bound
    finally:
        shim.close()
        peer.close()


@pytest.mark.parametrize("cached", [False, True], ids=["uncached", "cached"])
def test_coherence_is_paid_from_the_server_rate(redis_sock: Path, tmp_path: Path, cached: bool) -> None:
    """A write of a cached key costs the server 1 + 2 per coherence path (phase 1 and 2) of its rate,
    as the simulator's coherence_cost = 1: three such writes leave too little for the reads after them."""
    redis.Redis(unix_socket_path=str(redis_sock)).flushall()
    peer = SwitchPeer(redis_sock)
    shim = ShimThread(redis_sock, peer, tmp_path / "s.sock", cluster=Cluster(server_rate=0.5, server_burst=10))
    link = ShimLink(shim.control_addr)
    link.partition([SPINE] * N_SPINE_BUCKETS)
    client = Client(CLUSTER, resolve=lambda _h: ("127.0.0.1", shim.port), timeout=0.5, retries=0)
    try:
        if cached:
            assert link.populate(digest("hot"), SPINE, 0, 1, b"hot") in ("absent", "valid")
        for i in range(3):
            client.put("hot", f"v{i}")  # 3 tokens, or 3 x (1 + 2 x 1 path) = 9
        answered = 0
        for i in range(5):
            try:
                client.get(f"other{i}")
                answered += 1
            except RequestTimeoutError:
                pass
        assert answered == (1 if cached else 5)
        assert link.stats()["errors"].get("rate_limited", 0) == 5 - answered
    finally:
        client.close()
        shim.close()
        peer.close()


def test_mget_reads_many_keys_at_once_sync_and_async(env) -> None:  # noqa: ANN001
    client, shim, _, _, _ = env
    for i in range(20):
        client.put(f"m{i}", f"value{i}")
    keys = [f"m{i}" for i in range(20)] + ["missing"]
    expected = [f"value{i}".encode() for i in range(20)] + [None]
    assert client.mget(keys) == expected
    assert client.mget([]) == []

    async def amget() -> list[bytes | None]:
        async with AsyncClient(CLUSTER, resolve=lambda _h: ("127.0.0.1", shim.port), timeout=3.0) as c:
            return await c.mget(keys)

    assert asyncio.run(amget()) == expected


def test_mget_without_a_server_names_the_missing_replies() -> None:
    dead = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    with (
        Client(CLUSTER, resolve=lambda _h: ("127.0.0.1", port), timeout=0.05, retries=1) as c,
        pytest.raises(RequestTimeoutError, match="3 of 3 reads got no reply after 2 attempts"),
    ):
        c.mget(["a", "b", "c"])
    dead.close()


def _raw_write(sock: socket.socket, port: int, key: str, value: str, seq: int) -> Message:
    sock.sendto(encode(Message(Op.PUT, key.encode(), digest(key), seq=seq, value=value.encode())), ("127.0.0.1", port))
    return decode(sock.recvfrom(2048)[0])


def test_a_retried_write_is_applied_once(env) -> None:  # noqa: ANN001
    """A's PUT, then B's PUT, then a late copy of A's PUT (a client retry): the copy gets A's reply again and
    must not overwrite B."""
    client, shim, _, link, r = env
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a.settimeout(3)
    try:
        first = _raw_write(a, shim.port, "dup", "A", seq=7)
        assert first.status == 0 and r.get("dup") == b"A"
        client.put("dup", "B")
        again = _raw_write(a, shim.port, "dup", "A", seq=7)
        assert again == first and r.get("dup") == b"B"
        assert link.stats()["duplicates"] == {"replayed": 1}
        assert _raw_write(a, shim.port, "dup", "C", seq=8).status == 0  # a new seq is a new write
        assert r.get("dup") == b"C"
    finally:
        a.close()


def test_a_retried_write_is_applied_once_across_a_shim_restart(redis_sock: Path, tmp_path: Path) -> None:
    """The shim crashes after applying A's PUT; A's client retries into the restarted shim after B's PUT: the
    retry must be answered, not applied again (found by make linearizability before the fix)."""
    redis.Redis(unix_socket_path=str(redis_sock)).flushall()
    peer = SwitchPeer(redis_sock)
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a.settimeout(3)
    state = tmp_path / "shim.state.json"  # what tells a shim it is restarting
    first = ShimThread(redis_sock, peer, tmp_path / "a.sock", state_file=state)
    try:
        ShimLink(first.control_addr).partition([SPINE] * N_SPINE_BUCKETS)  # the controller configured it
        assert _raw_write(a, first.port, "k", "A", seq=5).status == 0
    finally:
        first.close()
    second = ShimThread(redis_sock, peer, tmp_path / "b.sock", state_file=state, fresh=False)
    r = redis.Redis(unix_socket_path=str(redis_sock))
    try:
        with Client(CLUSTER, resolve=lambda _h: ("127.0.0.1", second.port), timeout=3.0, retries=0) as b:
            b.put("k", "B")
        assert _raw_write(a, second.port, "k", "A", seq=5).status == 0  # the retry of A, long after
        assert r.get("k") == b"B"
        assert ShimLink(second.control_addr).stats()["duplicates"] == {"replayed_after_restart": 1}
        assert _raw_write(a, second.port, "k", "C", seq=6).status == 0 and r.get("k") == b"C"
    finally:
        second.close()
        peer.close()
        a.close()


def test_a_write_answered_error_stays_unwritten_when_retried(env) -> None:  # noqa: ANN001
    """ERROR means nothing was written; a retry of that request must not write it later."""
    client, shim, peer, link, r = env
    client.put("k", "before")
    link.populate(digest("k"), SPINE, 0, 1, b"k")
    peer.mute = True
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a.settimeout(3)
    try:
        assert _raw_write(a, shim.port, "k", "lost", seq=99).status == 2  # ERROR: the invalidation never acked
        peer.mute = False  # the fabric works again: a re-applied write would now succeed
        assert _raw_write(a, shim.port, "k", "lost", seq=99).status == 2
        assert r.get("k") == b"before"
    finally:
        a.close()


def test_lost_invalidate_is_retransmitted(env) -> None:  # noqa: ANN001
    client, _shim, peer, link, _ = env
    link.populate(digest("k"), SPINE, 0, 1, b"k")
    peer.seen.clear()
    peer.drop = 2
    client.put("k", "v")
    invs = [seq for op, seq in peer.ops() if op == Op.INVALIDATE]
    assert len(invs) == 3 and len(set(invs)) == 1
    assert link.stats()["coherence"]["retransmits"] >= 2


def test_write_fails_without_touching_redis_when_never_acknowledged(env) -> None:  # noqa: ANN001
    client, _shim, peer, link, r = env
    client.put("k", "before")
    link.populate(digest("k"), SPINE, 0, 1, b"k")
    peer.mute = True
    with pytest.raises(ServerError) as e:
        client.put("k", "after")
    assert e.value.status == 2
    assert r.get("k") == b"before"
    assert link.stats()["coherence"]["failed_invalidates"] == 1


def test_population_of_absent_and_large_values(env) -> None:  # noqa: ANN001
    client, _, peer, link, _ = env
    assert link.populate(digest("ghost"), SPINE, 0, 1, b"ghost") == "absent"
    client.put("large", "L" * 200)
    peer.seen.clear()
    assert link.populate(digest("large"), SPINE, 0, 1, b"large") == "too_large"
    assert [op for op, _ in peer.ops()] == [Op.INVALIDATE]


def test_garbage_is_counted_and_dropped(env) -> None:  # noqa: ANN001
    client, shim, _, link, _ = env
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    v1_get = bytes([1, 1, 0, 0]) + bytes(36)  # a version 1 peer's GET: refused, never misparsed
    for junk in (b"", b"\x02" * 10, v1_get, encode(Message(Op.GET_REPLY, b"k", digest("k")))):
        s.sendto(junk, ("127.0.0.1", shim.port))
    s.close()
    time.sleep(0.2)
    client.put("still", "serving")
    assert client.get("still") == b"serving"
    assert link.stats()["malformed"] == {"short": 2, "version": 1, "unexpected_op": 1}
    assert link.stats()["refused"] == {}  # no request among them: nobody is answered


def test_a_request_the_shim_cannot_read_is_answered_at_once(env) -> None:  # noqa: ANN001
    """TOO_LARGE for a value over the limit, BAD_REQUEST for a request whose header and body disagree; the
    sender gets its error instead of waiting out its timeout (before: dropped and counted, never answered)."""
    _client, shim, _, link, r = env
    good = encode(Message(Op.PUT, b"k", digest("k"), seq=7, value=b"v" * 20))
    oversized = bytearray(good)
    oversized[40:44] = (MAX_VALUE + 1).to_bytes(4, "big")  # vlen over the limit
    # a digest that is not the key's would invalidate (or fill) another key's cache entry
    lying = encode(Message(Op.PUT, b"other", digest("k"), seq=7, value=b"v"))
    cases = [
        (bytes(oversized), Status.TOO_LARGE),
        (good + b"trailing", Status.BAD_REQUEST),
        (lying, Status.BAD_REQUEST),
    ]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2.0)
    try:
        for data, status in cases:
            s.sendto(data, ("127.0.0.1", shim.port))
            got = decode(s.recv(2048))
            assert (got.op, got.digest, got.seq, got.status) == (Op.PUT_REPLY, digest("k"), 7, status)
    finally:
        s.close()
    assert r.get("k") is None  # nothing written
    assert r.get("other") is None
    assert link.stats()["refused"] == {"TOO_LARGE": 1, "BAD_REQUEST": 2}
    assert link.stats()["malformed"] == {"too_large": 1, "length": 1, "digest": 1}


def test_control_api_rejects_bad_arguments_and_stays_usable(env) -> None:  # noqa: ANN001
    _, shim, _, link, _ = env
    for call, expected in (
        (lambda: link.populate(b"zz", SPINE, 0, 1), "16-byte key digest"),
        (lambda: link.populate(digest("k"), SPINE, 0, 1, b"not k"), "not the key of digest"),
        (lambda: link.evict(digest("k"), 0), "switch id"),
        (lambda: link.partition([1, 2]), "1024 spine ids"),
        (lambda: link.partition([SPINE] * N_SPINE_BUCKETS, [300]), "switch ids"),
        (lambda: link.view({b"short": [SPINE]}), "16-byte key digest"),
    ):
        with pytest.raises(ShimRequestError, match=expected):
            call()
    link.ping()
    assert link.stats()["server"] == CLUSTER.server(0, 0).name
    with pytest.raises(ShimUnavailableError):
        ShimLink(f"unix:{shim.control_addr[5:]}.nothing-here", timeout=1).ping()


def test_client_errors_are_typed_and_raised_before_sending(env) -> None:  # noqa: ANN001
    client, _, _, _, _ = env
    with pytest.raises(ValueTooLargeError, match="exceeds the 512 MB a value may have"):
        client.put("k", bytes(MAX_VALUE + 1))  # what fits no datagram takes the stream path; this fits neither
    with pytest.raises(InvalidValueError):
        client.put("k", 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidKeyError):
        client.get(b"k" * 0x10000)
    with pytest.raises(TypeError):  # typed errors are also the builtin kinds people catch
        client.get(3.5)  # type: ignore[arg-type]


def test_timeout_after_bounded_retries() -> None:
    dead = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dead.bind(("127.0.0.1", 0))  # a port that never answers
    port = dead.getsockname()[1]
    with Client(CLUSTER, resolve=lambda _h: ("127.0.0.1", port), timeout=0.05, retries=2) as c:
        t = time.monotonic()
        with pytest.raises(RequestTimeoutError, match="3 attempts"):
            c.get("k")
        assert time.monotonic() - t < 1.0
    received = 0
    dead.settimeout(0.1)
    try:
        while dead.recvfrom(2048):
            received += 1
    except TimeoutError:
        pass
    dead.close()
    assert received == 3


def test_async_client_many_in_flight(env) -> None:  # noqa: ANN001
    _, shim, _, _, _ = env

    async def main() -> list:
        async with AsyncClient(CLUSTER, resolve=lambda _h: ("127.0.0.1", shim.port), timeout=2.0) as c:
            await asyncio.gather(*(c.put(f"a{i}", f"v{i}") for i in range(50)))
            values = await asyncio.gather(*(c.get(f"a{i}") for i in range(50)))
            assert await c.delete("a0") is True
            return values

    assert asyncio.run(main()) == [f"v{i}".encode() for i in range(50)]


def test_restarted_shim_invalidates_every_live_spine_until_each_switch_is_known(
    redis_sock: Path, tmp_path: Path
) -> None:
    """Issue 15, defect 2: a restarted shim -- with or without its state file -- cannot know which switches
    cache a key (CacheReplication and Hybrid keep copies in every spine, not only at the partition owner).
    Until the controller's view covers a switch, every write invalidates it; a view that leaves a switch out
    (its agent did not answer) leaves that switch counted as caching every key."""
    redis.Redis(unix_socket_path=str(redis_sock)).flushall()
    peer = SwitchPeer(redis_sock)
    other = SPINE + 1
    for name, state in (("with-state", tmp_path / "shim.state.json"), ("without-state", None)):
        first = ShimThread(redis_sock, peer, tmp_path / f"{name}-a.sock", state_file=state)
        ShimLink(first.control_addr).partition([SPINE] * N_SPINE_BUCKETS)
        first.close()
        shim = ShimThread(redis_sock, peer, tmp_path / f"{name}-b.sock", state_file=state, fresh=False)
        link = ShimLink(shim.control_addr)
        try:
            with Client(CLUSTER, resolve=lambda _h, s=shim: ("127.0.0.1", s.port), timeout=3.0, retries=0) as c:
                peer.seen.clear()
                c.put("replicated", "v1")
                _wait_seen(peer, 4)
                assert sorted((m.op, m.target) for m, _ in peer.seen) == [
                    (Op.INVALIDATE, SPINE),
                    (Op.INVALIDATE, other),
                    (Op.UPDATE, SPINE),
                    (Op.UPDATE, other),
                ], name
                st = link.stats()
                assert st["view_known"] is False and st["unknown_switches"] == [SPINE, other, LEAF]
                link.view({}, [SPINE, LEAF], st["incarnation"])  # other's agent did not answer
                assert link.stats()["unknown_switches"] == [other]
                peer.seen.clear()
                c.put("replicated", "v2")
                _wait_seen(peer, 2)
                assert sorted((m.op, m.target) for m, _ in peer.seen) == [(Op.INVALIDATE, other), (Op.UPDATE, other)], (
                    name
                )
                link.view({}, [other], st["incarnation"])
                peer.seen.clear()
                c.put("replicated", "v3")
                time.sleep(0.2)
                assert peer.seen == [], name  # every switch known, none caches the key
        finally:
            shim.close()
    peer.close()


def test_a_view_collected_for_an_earlier_life_of_the_shim_is_refused(env) -> None:  # noqa: ANN001
    _, _shim, _, link, _ = env
    inc = link.stats()["incarnation"]
    with pytest.raises(ShimRequestError, match="incarnation"):
        link.view({}, [SPINE], inc + 1)
    with pytest.raises(ShimRequestError, match="complete"):
        link.view({}, [99], inc)
    link.view({}, [SPINE], inc)


def test_spine_declared_down_mid_write_still_invalidates_and_updates_the_leaf(env) -> None:  # noqa: ANN001
    """Issue 15, defect 3: a write's INVALIDATE towards a spine may be lost before the storage leaf on its
    path sees it.  When the controller declares that spine down, the path does not count as done: the
    leaf gets the INVALIDATE on a path of its own, and phase 2 goes there too, not to the dead spine."""
    client, _shim, peer, link, r = env
    other = SPINE + 1
    link.partition([other] * N_SPINE_BUCKETS)
    client.put("k", "v0")
    for sw in (other, LEAF):
        assert link.populate(digest("k"), sw, 0, 1, b"k") == "valid"
    peer.answer_only = {SPINE, LEAF}  # the spine other died: without the release, the write waits 2.5 s
    peer.seen.clear()
    done: list[bool] = []
    writer = threading.Thread(target=lambda: done.append(client.put("k", "v1") is None))
    writer.start()
    time.sleep(0.3)
    assert not done
    link.partition([SPINE] * N_SPINE_BUCKETS, [other], 2)
    writer.join(3)
    assert done and r.get("k") == b"v1"
    # phase 2 follows the write's answer: wait for its UPDATE (a loaded machine sends it later)
    deadline = time.monotonic() + 3.0
    while not any(m.op == Op.UPDATE and m.target == LEAF for m, _ in list(peer.seen)) and time.monotonic() < deadline:
        time.sleep(0.01)
    leaf_ops = [m.op for m, _ in peer.seen if m.target == LEAF]
    assert leaf_ops[:1] == [Op.INVALIDATE] and Op.UPDATE in leaf_ops
    assert not [m for m, _ in peer.seen if m.op == Op.UPDATE and m.target == other]
    upd = next(m for m, _ in peer.seen if m.op == Op.UPDATE and m.target == LEAF)
    assert upd.value == b"v1"


def test_populate_carries_the_entry_tag_and_is_addressed_to_the_switch(env) -> None:  # noqa: ANN001
    """Only an INVALIDATE carrying a new entry's own tag may arm it (p4src coherence.p4): the shim puts the
    agent's (cache_epoch, version) into the populate, addressed to the switch it fills (a leaf reflects it)."""
    client, _, peer, link, _ = env
    client.put("k", "v0")
    peer.seen.clear()
    assert link.populate(digest("k"), LEAF, 7, 42, b"k") == "valid"
    inv, upd = (m for m, _ in peer.seen)
    assert (inv.op, inv.target, inv.flags, inv.spine_load, inv.leaf_load) == (Op.INVALIDATE, LEAF, Flag.POPULATE, 7, 42)
    assert (upd.op, upd.target, upd.seq, upd.value) == (Op.UPDATE, LEAF, inv.seq, b"v0")
    with pytest.raises(ShimRequestError, match="version"):
        link.populate(digest("k"), LEAF, 7, 0, b"k")


def test_a_shim_restarted_without_state_populates_no_spine_before_it_has_the_down_set(
    redis_sock: Path, tmp_path: Path
) -> None:
    """Without its state file the shim does not know which spines the controller declared down: a copy it
    populated in one would be skipped by writes once the controller's down-set arrives.  It refuses spines
    until then (the storage leaf is never declared down)."""
    redis.Redis(unix_socket_path=str(redis_sock)).set("k", b"v")
    peer = SwitchPeer(redis_sock)
    shim = ShimThread(redis_sock, peer, tmp_path / "a.sock", fresh=False)  # restarted, no state file
    try:
        link = ShimLink(shim.control_addr)
        assert link.populate(digest("k"), SPINE, 1, 1, b"k") == "down"
        assert link.populate(digest("k"), LEAF, 1, 1, b"k") == "valid"
        seq = peer.seen[0][0].seq  # the leaf's populate (retransmitted, on a loaded machine, before its ack came)
        assert set(peer.ops()) == {(Op.INVALIDATE, seq), (Op.UPDATE, seq)}
        link.partition([SPINE] * N_SPINE_BUCKETS)  # the controller's push (no spine down)
        assert link.populate(digest("k"), SPINE, 1, 2, b"k") == "valid"
    finally:
        shim.close()
        peer.close()


def test_a_write_answered_error_is_not_applied_by_a_restarted_shim(redis_sock: Path, tmp_path: Path) -> None:
    """A PUT answered ERROR (phase 1 not acknowledged: nothing written) whose copy reaches the shim's next
    life must be answered ERROR again, not applied: the client was told it did not happen (found by the
    model: model/README.md, the error marker)."""
    r = redis.Redis(unix_socket_path=str(redis_sock))
    r.flushall()
    r.set("k", b"before")
    peer = SwitchPeer(redis_sock)
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a.settimeout(5)
    state = tmp_path / "shim.state.json"
    first = ShimThread(redis_sock, peer, tmp_path / "a.sock", state_file=state, fresh=False)  # knows no view
    try:
        ShimLink(first.control_addr).partition([SPINE] * N_SPINE_BUCKETS)
        peer.mute = True  # no switch acknowledges phase 1
        assert _raw_write(a, first.port, "k", "lost", seq=9).status == Status.ERROR
        assert r.get("k") == b"before"
    finally:
        first.close()
    peer.mute = False
    second = ShimThread(redis_sock, peer, tmp_path / "b.sock", state_file=state, fresh=False)
    try:
        assert _raw_write(a, second.port, "k", "lost", seq=9).status == Status.ERROR  # the copy, later
        assert r.get("k") == b"before"
        assert ShimLink(second.control_addr).stats()["duplicates"] == {"replayed_after_restart": 1}
        assert _raw_write(a, second.port, "k", "next", seq=10).status == Status.OK  # a new write goes through
        assert r.get("k") == b"next"
    finally:
        second.close()
        peer.close()
        a.close()


def test_a_retried_delete_gets_its_first_status_across_a_shim_restart(redis_sock: Path, tmp_path: Path) -> None:
    """A DELETE answered NOT_FOUND, retried into a restarted shim, must answer NOT_FOUND again (and one answered
    OK, OK): the marker the write leaves in Redis records the status (found by the delete-aware checker)."""
    redis.Redis(unix_socket_path=str(redis_sock)).flushall()
    redis.Redis(unix_socket_path=str(redis_sock)).set("there", b"x")
    peer = SwitchPeer(redis_sock)
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a.settimeout(3)

    def delete(port: int, key: str, seq: int) -> Status:
        a.sendto(encode(Message(Op.DELETE, key.encode(), digest(key), seq=seq)), ("127.0.0.1", port))
        return Status(decode(a.recvfrom(2048)[0]).status)

    state = tmp_path / "shim.state.json"
    first = ShimThread(redis_sock, peer, tmp_path / "a.sock", state_file=state)
    try:
        ShimLink(first.control_addr).partition([SPINE] * N_SPINE_BUCKETS)
        assert (delete(first.port, "absent", 5), delete(first.port, "there", 6)) == (Status.NOT_FOUND, Status.OK)
    finally:
        first.close()
    second = ShimThread(redis_sock, peer, tmp_path / "b.sock", state_file=state, fresh=False)
    try:
        assert (delete(second.port, "absent", 5), delete(second.port, "there", 6)) == (Status.NOT_FOUND, Status.OK)
        assert ShimLink(second.control_addr).stats()["duplicates"] == {"replayed_after_restart": 2}
    finally:
        second.close()
        peer.close()
        a.close()


def test_a_shim_restarted_under_a_clock_stepped_back_continues_above_its_earlier_life(
    redis_sock: Path, tmp_path: Path
) -> None:
    """Its floor is in Redis, which outlives it with or without its state file: an INVALIDATE of the new life
    is newer than every one of the old, so switches re-arm their entries for it and no UPDATE the old life
    left in flight matches them.  The second life's wall clock reads an hour early (the breaks build's
    clock-back condition, as the fault matrix imposes it)."""
    redis.Redis(unix_socket_path=str(redis_sock)).flushall()
    peer = SwitchPeer(redis_sock)

    def numbers(shim: ShimThread, n: int) -> list[int]:
        """The sequence numbers of n populates of the leaf's entry (each takes one)."""
        link = ShimLink(shim.control_addr)
        for version in range(1, n + 1):
            assert link.populate(digest("k"), LEAF, 0, version, b"k") == "valid"
        return [m.seq for m, _ in peer.seen if m.op == Op.INVALIDATE][-n:]

    try:
        redis.Redis(unix_socket_path=str(redis_sock)).set("k", "v")
        first = ShimThread(redis_sock, peer, tmp_path / "a.sock")
        used = numbers(first, 3)
        first.close()
        second = ShimThread(redis_sock, peer, tmp_path / "b.sock", fresh=False, breaks=("clock-back",))
        try:
            (again,) = numbers(second, 1)
        finally:
            second.close()
    finally:
        peer.close()
    assert serial_newer(again, used[-1]) and (again - used[-1]) & 0xFFFFFFFF <= SEQ_BLOCK + 1, (used, again)


def test_a_restarted_shim_counts_every_switch_any_mechanism_may_cache_its_keys_in(
    redis_sock: Path, tmp_path: Path
) -> None:
    """Until the controller's view, a shim that did not start fresh counts every key as cached at every switch
    that may cache its keys under some mechanism (distcache/placement.py possible_holders)."""
    from distcache.placement import possible_holders

    cluster = Cluster(spines=3, storage_racks=2)
    peer = SwitchPeer(redis_sock)
    shim = ShimThread(redis_sock, peer, tmp_path / "a.sock", cluster=cluster, fresh=False)
    try:
        assert shim.stats()["unknown_switches"] == sorted(possible_holders(cluster, cluster.server(0, 0)))
    finally:
        shim.close()
        peer.close()


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_flood_of_garbage_from_many_ports_is_counted_and_the_shim_serves_on_in_bounded_memory(
    redis_sock: Path, tmp_path: Path
) -> None:
    """Datagrams that are no message, half a header, a header whose lengths lie, an ack nobody waits for, a
    request whose digest is another key's: from 64 ports at once, each counted by reason and dropped (or
    refused), the shim's memory flat, and a client served as before."""
    import os
    import random

    rng = random.Random(7)
    redis.Redis(unix_socket_path=str(redis_sock)).flushall()
    peer = SwitchPeer(redis_sock)
    shim = ShimThread(redis_sock, peer, tmp_path / "s.sock")
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(64)]
    try:
        good = encode(Message(Op.PUT, b"k", digest("k"), seq=1, value=b"v"))
        kinds = [
            lambda: os.urandom(rng.randrange(1, 1400)),  # noise
            lambda: good[: rng.randrange(1, 52)],  # a header cut short
            lambda: good + os.urandom(rng.randrange(1, 100)),  # lengths that lie
            lambda: encode(Message(Op.INVALIDATE_ACK, b"k", digest("k"), seq=rng.randrange(1 << 60))),  # stray
            lambda: encode(Message(Op.PUT, b"k", digest("other"), seq=rng.randrange(1 << 60), value=b"x")),
        ]
        before = _rss_kb(shim.proc.pid)
        for i in range(20_000):
            socks[i % 64].sendto(kinds[i % len(kinds)](), ("127.0.0.1", shim.port))
        deadline = time.monotonic() + 10
        while sum(shim.stats()["malformed"].values()) < 12_000 and time.monotonic() < deadline:
            time.sleep(0.1)
        st = shim.stats()
        assert {"short", "length", "digest"} <= set(st["malformed"]), st["malformed"]
        assert st["coherence"]["stray_acks"] > 0 and st["refused"].get("BAD_REQUEST", 0) > 0
        assert _rss_kb(shim.proc.pid) - before < 64 << 10, (before, _rss_kb(shim.proc.pid))  # under 64 MB more
        with Client(CLUSTER, resolve=lambda _h: ("127.0.0.1", shim.port), timeout=3.0, retries=0) as c:
            c.put("after", "fine")
            assert c.get("after") == b"fine"
        assert redis.Redis(unix_socket_path=str(redis_sock)).get("k") is None  # no garbage wrote anything
    finally:
        for s in socks:
            s.close()
        shim.close()
        peer.close()
