"""Nothing writes behind the caches (issue 45): a storage host's Redis has no default user, the shim logs in as
its own user, and operators' read-only user reads and cannot write; nothing is evicted."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from client_lib import Client
from distcache.hashing import N_SPINE_BUCKETS
from distcache.rpc.shim import ShimLink
from harness.redis import READER_USER, SHIM_USER, RedisUsers, redis_argv, wait_for_redis
from tests.common.keys import digest
from tests.common.shim_bed import CLUSTER, SHIM_BINARY, ShimThread, SwitchPeer


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[tuple[Path, RedisUsers]]:
    """A redis-server as a storage host runs it: its users from RedisUsers, on a Unix socket."""
    users = RedisUsers.create(tmp_path)
    sock = tmp_path / "redis.sock"
    proc = subprocess.Popen(redis_argv(sock, tmp_path, users=users), stdout=subprocess.DEVNULL)
    wait_for_redis(sock, proc)
    yield sock, users
    proc.terminate()
    proc.wait(5)


def test_the_shim_writes_as_its_user_and_the_reader_only_reads(storage, tmp_path: Path) -> None:  # noqa: ANN001
    sock, users = storage
    login = {"username": SHIM_USER, "password": users.shim_password}
    peer = SwitchPeer(sock, **login)
    shim = ShimThread(sock, peer, tmp_path / "s.sock", redis_username=SHIM_USER, redis_password=users.shim_password)
    reader = redis.Redis(unix_socket_path=str(sock), username=READER_USER, password=users.reader_password)
    try:
        ShimLink(shim.control_addr).partition([CLUSTER.spine(0).switch_id] * N_SPINE_BUCKETS)
        with Client(CLUSTER, resolve=lambda _h: ("127.0.0.1", shim.port), timeout=2.0, retries=0) as c:
            c.put("k", "v")
            assert c.get("k") == b"v"
            assert reader.get("k") == b"v"  # an operator reads what the shim wrote
            for cmd in (("SET", digest("k"), b"x"), ("DEL", digest("k")), ("FLUSHDB",), ("CONFIG", "GET", "*")):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    reader.execute_command(*cmd)
            assert c.get("k") == b"v"
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis(unix_socket_path=str(sock)).ping()  # the default user is off
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis(unix_socket_path=str(sock), username=READER_USER, password="guess").ping()
        assert redis.Redis(unix_socket_path=str(sock), **login).config_get("maxmemory-policy") == {
            "maxmemory-policy": "noeviction"
        }
    finally:
        reader.close()
        shim.close()
        peer.close()


def test_the_passwords_stay_across_restarts_and_the_acl_file_hides_them(tmp_path: Path) -> None:
    first = RedisUsers.create(tmp_path)
    again = RedisUsers.create(tmp_path)
    assert first.shim_password == again.shim_password != first.reader_password
    acl = first.acl_file.read_text()
    assert first.shim_password not in acl and first.reader_password not in acl
    for f in (first.acl_file, first.shim_password_file, first.reader_password_file):
        assert f.stat().st_mode & 0o077 == 0, f  # only its owner reads it


def test_the_shim_refuses_a_user_without_a_password_and_a_url_naming_a_database(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.json"
    CLUSTER.save(cluster)
    base = ["--cluster", str(cluster), "--server", "r0s0", "--control", f"unix:{tmp_path / 'c.sock'}"]
    for extra, says in (
        (["--redis-url", "unix:///tmp/r.sock", "--redis-user", SHIM_USER], "go together"),
        (["--redis-url", "redis://127.0.0.1:6379/3"], "names database 3"),
        (["--redis-url", "unix:///tmp/r.sock", "--dedup-memory", "lots"], "is not a size"),
    ):
        res = subprocess.run([str(SHIM_BINARY), *base, *extra], capture_output=True, text=True, timeout=30)
        assert res.returncode == 2 and res.stdout == "", res
        assert says in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_what_the_shim_wrote_survives_a_kill_of_its_redis_with_users(tmp_path: Path) -> None:
    """Redis replays its append-only file as its default user: with that user's commands taken away (not just its
    login), every MULTI/EXEC the shim wrote failed NOPERM on a restart and the data was lost (make test's fault
    matrix cell caught it: reads of nothing after a redis-server kill)."""
    users = RedisUsers.create(tmp_path)
    sock = tmp_path / "redis.sock"
    argv = redis_argv(sock, tmp_path, durable=True, appendfsync="always", name="r", users=users)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    wait_for_redis(sock, proc)
    login = {"username": SHIM_USER, "password": users.shim_password}
    peer = SwitchPeer(sock, **login)
    shim = ShimThread(sock, peer, tmp_path / "s.sock", redis_username=SHIM_USER, redis_password=users.shim_password)
    try:
        ShimLink(shim.control_addr).partition([CLUSTER.spine(0).switch_id] * N_SPINE_BUCKETS)
        with Client(CLUSTER, resolve=lambda _h: ("127.0.0.1", shim.port), timeout=2.0, retries=0) as c:
            c.put("kept", "v")  # the value and its dedup marker, in one MULTI/EXEC
            assert c.delete("gone") is False  # a script
        proc.kill()
        proc.wait(5)
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        wait_for_redis(sock, proc)
        after = redis.Redis(unix_socket_path=str(sock), **login)
        assert after.get("kept") == b"v"
        assert len(redis.Redis(unix_socket_path=str(sock), db=1, **login).keys(b"dc:applied:*")) == 2
    finally:
        shim.close()
        peer.close()
        proc.terminate()
        proc.wait(5)
