"""Each write applied once, at any rate (issue 45): the shim remembers every write for the whole retry span,
bounded by memory, and refuses a write it has no room to remember with BUSY, recorded in Redis (database 1,
beside no user key) so that no later copy of it is applied either.  The table itself: shim/parts_test.go."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
import redis

from client_lib import Client, ServerBusyError
from distcache.hashing import N_SPINE_BUCKETS
from distcache.records import ENTRY_BYTES, MARKER_DB, dedup_marker
from distcache.rpc.shim import ShimLink
from distcache.wire import Message, Op, Status, decode, encode
from tests.common.keys import digest
from tests.common.shim_bed import CLUSTER, ShimThread, SwitchPeer

SPINE = CLUSTER.spine(0).switch_id


def test_a_client_refuses_a_retry_budget_longer_than_the_span() -> None:
    with pytest.raises(ValueError, match="outlasts the 30s"):
        Client(CLUSTER, timeout=8.0, retries=3)
    Client(CLUSTER, timeout=7.5, retries=3).close()  # exactly the span: fine


def _put(sock: socket.socket, port: int, key: str, value: bytes, seq: int, op: Op = Op.PUT) -> Message:
    sock.sendto(encode(Message(op, key.encode(), digest(key), seq=seq, value=value)), ("127.0.0.1", port))
    return decode(sock.recvfrom(2048)[0])


@pytest.fixture
def small(redis_sock: Path, tmp_path: Path):  # noqa: ANN201
    """A shim that remembers 3 writes for 1 s, a raw client socket, and the user and marker databases."""
    redis.Redis(unix_socket_path=str(redis_sock)).flushall()
    peer = SwitchPeer(redis_sock)
    shim = ShimThread(redis_sock, peer, tmp_path / "s.sock", dedup_memory=3 * ENTRY_BYTES, dedup_span=1.0)
    ShimLink(shim.control_addr).partition([SPINE] * N_SPINE_BUCKETS)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(3)
    users = redis.Redis(unix_socket_path=str(redis_sock))
    markers = redis.Redis(unix_socket_path=str(redis_sock), db=MARKER_DB)
    try:
        yield shim, sock, users, markers
    finally:
        sock.close()
        shim.close()
        peer.close()


def test_a_write_refused_busy_is_not_applied_by_any_later_copy(small) -> None:  # noqa: ANN001
    shim, sock, users, markers = small
    for seq in range(3):
        assert _put(sock, shim.port, f"k{seq}", b"v", seq).status == Status.OK
    time.sleep(0.5)
    refused = _put(sock, shim.port, "late", b"x", 10)
    assert refused.status == Status.BUSY and users.get("late") is None
    rid = ("127.0.0.1", 10)  # the client address and seq: its port does not count
    assert markers.get(dedup_marker(*rid)) == b"B"  # recorded where no user key is
    assert _put(sock, shim.port, "late", b"x", 10).status == Status.BUSY  # a copy while still full
    time.sleep(0.6)  # the three remembered writes' span ended: there is room, but this write was refused
    assert _put(sock, shim.port, "late", b"x", 10).status == Status.BUSY
    assert users.get("late") is None
    assert _put(sock, shim.port, "late", b"y", 11).status == Status.OK  # a new write is applied
    assert users.get("late") == b"y"
    stats = ShimLink(shim.control_addr).stats()
    assert stats["errors"]["busy"] == 2 and stats["dedup"]["capacity"] == 3
    assert b'distcache_shim_errors_total{kind="busy"' in ShimLink(shim.control_addr).metrics()


def test_the_client_raises_server_busy(small) -> None:  # noqa: ANN001
    shim, sock, users, _ = small
    for seq in range(3):
        _put(sock, shim.port, f"k{seq}", b"v", seq)
    with (
        Client(CLUSTER, resolve=lambda _h: ("127.0.0.1", shim.port), timeout=2.0, retries=0) as c,
        pytest.raises(ServerBusyError, match="the write was not applied"),
    ):
        c.put("mine", "v")
    assert users.get("mine") is None


def test_markers_live_beside_no_user_key_and_survive_a_flush_of_user_data(redis_sock: Path, tmp_path: Path) -> None:
    """A write's marker is in database 1: database 0 holds the user's keys only (SCAN, DBSIZE see nothing
    else), a FLUSHDB of the data keeps the markers, and a shim restarted after it still answers a retry of a
    write it applied instead of applying it again."""
    redis.Redis(unix_socket_path=str(redis_sock)).flushall()
    peer = SwitchPeer(redis_sock)
    state = tmp_path / "shim.state.json"
    users = redis.Redis(unix_socket_path=str(redis_sock))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(3)
    first = ShimThread(redis_sock, peer, tmp_path / "a.sock", state_file=state)
    try:
        ShimLink(first.control_addr).partition([SPINE] * N_SPINE_BUCKETS)
        assert _put(sock, first.port, "k", b"A", 5).status == Status.OK
        assert _put(sock, first.port, "gone", b"", 6, Op.DELETE).status == Status.NOT_FOUND
    finally:
        first.close()
    assert users.keys() == [b"k"] and users.dbsize() == 1
    users.flushdb()  # the user's data only
    second = ShimThread(redis_sock, peer, tmp_path / "b.sock", state_file=state, fresh=False)
    try:
        assert _put(sock, second.port, "k", b"A", 5).status == Status.OK  # answered from the marker
        assert _put(sock, second.port, "gone", b"", 6, Op.DELETE).status == Status.NOT_FOUND
        assert users.dbsize() == 0  # not applied again
        assert ShimLink(second.control_addr).stats()["duplicates"] == {"replayed_after_restart": 2}
    finally:
        second.close()
        sock.close()
        peer.close()


def test_writes_at_full_rate_each_retried_later_are_each_applied_once(redis_sock: Path, tmp_path: Path) -> None:
    """Issue 45's done-when: writes at the shim's full rate, each retried once 1.5 s later, are each applied
    exactly once.  Every key gets write A, then write B once A is answered; A's retry, 1.5 s after A, must be
    answered again, never applied (that would bring A back over B)."""
    redis.Redis(unix_socket_path=str(redis_sock)).flushall()
    peer = SwitchPeer(redis_sock)
    shim = ShimThread(redis_sock, peer, tmp_path / "s.sock")
    users = redis.Redis(unix_socket_path=str(redis_sock))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sent: list[tuple[float, Message]] = []  # (when, write A) to retry
    lates: dict[int, Message] = {}  # seq -> write A, retried once 1.5 s after it was sent
    replies: dict[int, Message] = {}  # seq -> the first reply
    again: list[Message] = []  # replies to the retries
    done = threading.Event()

    def receive() -> None:
        sock.settimeout(0.2)
        while not done.is_set():
            try:
                m = decode(sock.recvfrom(2048)[0])
            except TimeoutError:
                continue
            if m.seq in replies:
                again.append(m)
            else:
                replies[m.seq] = m

    rx = threading.Thread(target=receive, daemon=True)
    rx.start()
    try:
        ShimLink(shim.control_addr).partition([SPINE] * N_SPINE_BUCKETS)
        dest = ("127.0.0.1", shim.port)
        window = 64  # first copies in flight: enough to keep the shim busy, as many clients would
        end = time.monotonic() + 4.0
        n = firsts = 0  # keys begun; first copies sent (A and B)
        b_next = 0  # the next key whose B is due once its A is answered
        # a copy lost on a loaded machine is sent again after 1 s, as a client retries (another retry to apply once)
        unanswered: dict[int, tuple[float, Message]] = {}
        checked = 0.0
        while time.monotonic() < end or b_next < n or sent:
            now = time.monotonic()
            progressed = False
            if now - checked > 0.1:
                checked = now
                for seq, (at, m) in list(unanswered.items()):
                    if seq in replies:
                        del unanswered[seq]
                    elif now - at > 1.0:
                        sock.sendto(encode(m), dest)
                        unanswered[seq] = (now, m)
            if b_next < n and 2 * b_next in replies and firsts - len(replies) < window:
                b = Message(Op.PUT, f"key{b_next}".encode(), digest(f"key{b_next}"), seq=2 * b_next + 1, value=b"B")
                sock.sendto(encode(b), dest)  # B over the key, after A was answered
                unanswered[b.seq] = (now, b)
                b_next += 1
                firsts += 1
                progressed = True
            if sent and sent[0][0] + 1.5 <= now:
                late = sent.pop(0)[1]
                sock.sendto(encode(late), dest)  # A once more, 1.5 s after it was first sent
                lates[late.seq] = late
                progressed = True
            if now < end and firsts - len(replies) < window:
                a = Message(Op.PUT, f"key{n}".encode(), digest(f"key{n}"), seq=2 * n, value=b"A")
                sock.sendto(encode(a), dest)
                sent.append((now, a))
                unanswered[a.seq] = (now, a)
                n += 1
                firsts += 1
                progressed = True
            if not progressed:
                assert now < end + 15, (
                    f"stuck: {firsts - len(replies)} unanswered, {ShimLink(shim.control_addr).stats()}"
                )
                time.sleep(0.0002)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(replies) < 2 * n:
            for seq, (at, m) in list(unanswered.items()):
                if seq not in replies and time.monotonic() - at > 1.0:
                    sock.sendto(encode(m), dest)
                    unanswered[seq] = (time.monotonic(), m)
            time.sleep(0.05)
        assert len(replies) == 2 * n, f"{2 * n - len(replies)} of {2 * n} writes got no reply"
        retried = {2 * i for i in range(n)}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not retried <= {m.seq for m in list(again)}:
            time.sleep(0.5)
            for seq in retried - {m.seq for m in list(again)}:  # a late copy or its reply lost: sent once more
                sock.sendto(encode(lates[seq]), dest)
        lost = len(retried - {m.seq for m in again})  # lost again and again on a loaded machine: untested
        assert lost <= n // 100, f"{lost} of {n} late copies of A got no answer"
        assert all(m.status == Status.OK for m in again)
        values = users.mget([f"key{i}" for i in range(n)])
        assert values.count(b"B") == n, f"{n - values.count(b'B')} of {n} keys got write A again"
        stats = ShimLink(shim.control_addr).stats()
        assert stats["duplicates"].get("replayed", 0) >= n and "busy" not in stats["errors"]
        print(f"{2 * n} writes in about 4 s, each A retried 1.5 s later ({lost} lost): each applied once")
    finally:
        done.set()
        rx.join()
        sock.close()
        shim.close()
        peer.close()
