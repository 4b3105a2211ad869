"""End to end in Mininet: client -> client leaf -> spine -> storage leaf -> shim -> redis-server.

Real switches processes (softswitch) controlled over gRPC, real UDP between
network namespaces, real redis-server.  A cache hit is proved twice: by the
reply's cache mark and by redis-server's GET count not moving.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest
from dcnet.deploy import ClientProcess, Deployment

from distcache import p4names
from distcache.cluster import Cluster
from distcache.p4names import DropReason, Stat
from distcache.rpc.shim import ShimLink
from tests.e2e.targets import targets

pytestmark = [
    pytest.mark.timeout(240),
]

CLUSTER = Cluster()
SERVER, CLIENT = CLUSTER.server(0, 0), CLUSTER.client(0, 0)
CACHES = {CLUSTER.spine(0).switch_id, CLUSTER.storage_leaf(0).switch_id}


TARGETS = targets()


@pytest.fixture(scope="module", params=TARGETS)
def dep(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """The same scenarios on softswitch and, where BMv2 and p4c are installed, on BMv2."""
    with Deployment(CLUSTER, target=request.param, run_dir=tmp_path_factory.mktemp("run")) as d:
        yield d


@pytest.fixture(scope="module")
def client(dep: Deployment) -> ClientProcess:
    return dep.client()


def redis_gets(dep: Deployment) -> int:
    r = dep.redis_reader(SERVER)
    try:
        return int(r.info("commandstats").get("cmdstat_get", {}).get("calls", 0))
    finally:
        r.close()


def counter(dep: Deployment, switch: str, name: str, index: int) -> int:
    return dep.controller.conns[switch].read_counter(name, index)[index][0]


def test_put_then_get_from_server(client) -> None:  # noqa: ANN001
    assert client.call("put", "alpha", "one")["ok"]
    r = client.call("get", "alpha")
    assert r["ok"] and r["value"] == "one" and r["cached"] is False and r["served_by"] == 0


def test_cached_key_is_served_by_a_switch_without_touching_redis(dep: Deployment, client) -> None:  # noqa: ANN001
    assert client.call("put", "beta", "cached-value")["ok"]
    placed = dep.controller.cache("beta")
    assert {sw: e.state for sw, e in placed.items()} == {"sp0": "valid", "sl0": "valid"}
    before = redis_gets(dep)
    served = set()
    for _ in range(6):
        r = client.call("get", "beta")
        assert r["ok"] and r["value"] == "cached-value"
        assert r["cached"] is True, r
        served.add(r["served_by"])
    assert redis_gets(dep) == before  # no GET reached redis-server
    assert served <= CACHES and served  # answered by the spine and/or the storage leaf
    hits = sum(counter(dep, sw, p4names.DC_STATS, Stat.READ_HIT) for sw in ("sp0", "sl0"))
    assert hits >= 6


def test_write_to_cached_key_is_coherent(dep: Deployment, client) -> None:  # noqa: ANN001
    assert client.call("put", "gamma", "v1")["ok"]
    dep.controller.cache("gamma")
    assert client.call("get", "gamma")["cached"] is True
    assert client.call("put", "gamma", "v2")["ok"]
    for _ in range(4):  # never the old value, from any cache
        assert client.call("get", "gamma")["value"] == "v2"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # phase 2 refills the caches shortly after the ack
        if client.call("get", "gamma")["cached"]:
            break
        time.sleep(0.05)
    else:
        pytest.fail("caches were not refilled by phase 2")


def test_commands_run_at_the_shim_and_a_write_command_invalidates_the_copies(dep: Deployment, client) -> None:  # noqa: ANN001
    """EXEC end to end: INCRs from two client hosts add up; HSET over a cached string invalidates it (no switch
    answers it after), and a GET then answers WRONGTYPE as Redis does."""
    other = dep.client()  # a second client process (its own socket and sequence numbers)
    for _ in range(100):
        for c in (client, other):
            assert c.call("exec", args=["INCR", "hits"])["ok"]
    assert client.call("get", "hits")["value"] == "200"
    assert client.call("put", "shape", "a string")["ok"]
    dep.controller.cache("shape")
    assert client.call("get", "shape")["cached"] is True
    assert client.call("exec", args=["DEL", "shape"])["reply"] == 1
    assert client.call("exec", args=["HSET", "shape", "f", "v"])["reply"] == 1
    for _ in range(5):
        r = client.call("get", "shape")
        assert (r["ok"], r["error"]) == (False, "WrongTypeError"), r  # never the old string, from any cache
    assert client.call("exec", args=["HGET", "shape", "f"])["reply"] == "v"


def test_a_key_with_a_ttl_is_never_answered_by_a_switch_after_redis_expired_it(dep: Deployment, client) -> None:  # noqa: ANN001
    """Issue 45's done-when: keys with a 1 s TTL, read hot and cached by hand meanwhile (an operator's cache,
    the detector's reports): a switch never answers them (a key with a TTL is never filled), and once Redis
    has expired one every read answers it absent."""
    for i in range(3):
        key = f"ttl{i}"
        assert client.call("exec", args=["SET", key, "short-lived", "PX", "1000"])["reply"] == "OK"
        written = time.monotonic()  # the SET ran before this: Redis expires the key by written + 1 s
        placed = dep.controller.cache(key)
        assert placed and all(e.state == "expires" for e in placed.values()), placed
        reads = []
        while time.monotonic() - written < 1.6:
            r = client.call("get", key)
            reads.append((time.monotonic() - written, r))
        assert len(reads) > 50 and not any(r["cached"] for _, r in reads)  # no switch answered it
        late = [(round(t, 3), r) for t, r in reads if t > 1.05 and r["found"]]
        assert not late, late[:3]  # expired: absent from then on
        assert any(r["found"] for _, r in reads)  # (it was there first)


def test_an_operators_redis_cli_reads_and_cannot_write_behind_the_caches(dep: Deployment, client) -> None:  # noqa: ANN001
    """Issue 45: the storage host's Redis has no default user; redis-cli there as the read-only user sees the
    value a client wrote (and a switch caches) and is refused a write, a delete and a flush; the shim's own
    user wrote it; nothing evicts."""
    assert client.call("put", "opview", "seen by operators")["ok"]
    dep.controller.cache("opview")
    host = dep.host(SERVER.name)
    sock = dep.redis_socket(SERVER)

    def cli(*args: str, user: str | None = "reader") -> str:
        login = f"--user {user} " if user else ""
        secret = f"REDISCLI_AUTH=$(cat {dep.redis_users.reader_password_file}) " if user else ""
        return host.cmd(f"{secret}redis-cli --no-auth-warning -s {sock} {login}{' '.join(args)}").strip()  # type: ignore[attr-defined]

    assert cli("--raw", "GET", "opview") == "seen by operators"  # stored under the key the client wrote
    assert int(cli("--raw", "DBSIZE")) >= 1
    for refused in ("SET opview x", "DEL opview", "FLUSHALL", "CONFIG SET maxmemory-policy allkeys-lru"):
        assert "NOPERM" in cli(refused), refused
    assert "NOAUTH" in cli("GET", "opview", user=None)  # the default user is off
    assert client.call("get", "opview")["value"] == "seen by operators"  # nothing was changed behind the caches
    assert "maxmemory_policy:noeviction" in cli("INFO", "memory")


def test_a_megabyte_under_a_binary_key_crosses_the_fabric_and_reads_back_in_redis_cli(dep: Deployment, client) -> None:  # noqa: ANN001
    """Issue 45's done-when: a 1 MB value under a 200-byte binary key, written and read with client_lib on a
    client host (the stream path: TCP through the switches to the shim), and read by redis-cli as the
    read-only user on the key's storage host, byte for byte."""
    key, value = os.urandom(200), os.urandom(1 << 20)
    assert client.call("put", key_hex=key.hex(), hex=value.hex())["ok"]
    got = client.call("get", key_hex=key.hex())
    assert got["ok"] and got["value"] == "hex:" + value.hex() and not got["cached"]
    server = dep.cluster.server_for_key(dep.cluster.digest(key))
    keyfile, out = dep.run_dir / "binary.key", dep.run_dir / "binary.value"
    keyfile.write_bytes(key)
    dep.host(server.name).cmd(  # type: ignore[attr-defined]
        f"REDISCLI_AUTH=$(cat {dep.redis_users.reader_password_file}) redis-cli --no-auth-warning "
        f"-s {dep.redis_socket(server)} --user reader --raw -x GET < {keyfile} > {out}"
    )
    assert out.read_bytes() == value + b"\n"  # --raw ends the reply with a newline


def test_deleted_key_reads_as_not_found(dep: Deployment, client) -> None:  # noqa: ANN001
    assert client.call("put", "delta", "soon gone")["ok"]
    dep.controller.cache("delta")
    assert client.call("get", "delta")["cached"] is True
    assert client.call("delete", "delta")["deleted"] is True
    r = client.call("get", "delta")
    assert r["ok"] and r["found"] is False and r["cached"] is False


def send_garbage(dep: Deployment, host: str, dst: str, payloads: list[bytes]) -> None:
    code = (
        "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
        f"for p in {payloads!r}:\n    s.sendto(p,({dst!r},8888))\n"
    )
    out = dep.host(host).popen(["python3", "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert out.wait(10) == 0, out.stdout.read()


def test_garbage_to_switch_is_dropped_and_counted(dep: Deployment, client) -> None:  # noqa: ANN001
    before = {r: counter(dep, "cl0", p4names.DC_DROPS, r) for r in DropReason}
    send_garbage(dep, CLIENT.name, SERVER.ip, [b"x", b"\x02" * 51, b"\x09" + b"\x00" * 51])  # 51: under a header
    time.sleep(0.5)
    after = {r: counter(dep, "cl0", p4names.DC_DROPS, r) for r in DropReason}
    assert after[DropReason.TRUNCATED] == before[DropReason.TRUNCATED] + 2
    assert after[DropReason.BAD_VERSION] == before[DropReason.BAD_VERSION] + 1
    assert client.call("put", "after-garbage", "still fine")["ok"]
    assert client.call("get", "after-garbage")["value"] == "still fine"


def test_garbage_to_shim_is_dropped_and_counted(dep: Deployment, client) -> None:  # noqa: ANN001
    shim = ShimLink(dep.shim_control(SERVER))
    before = shim.stats()
    # sent from inside the storage host to its own address: straight to the shim, no switch on the way
    send_garbage(dep, SERVER.name, SERVER.ip, [b"", b"junk", b"\x01\x42" + b"\x00" * 38])
    time.sleep(0.5)
    after = shim.stats()
    assert _malformed(after) == _malformed(before) + 3
    assert client.call("put", "after-shim-garbage", "ok")["ok"]
    assert client.call("get", "after-shim-garbage")["value"] == "ok"


def _malformed(stats: dict) -> int:
    m = stats.get("malformed", {})
    return sum(m.values()) if isinstance(m, dict) else int(m)


PER_PACKET = "Processing packet received on port"  # BMv2's first per-packet log line


def test_switch_log_holds_events_not_every_packet(dep: Deployment, client) -> None:  # noqa: ANN001
    """By default a switch logs no line per packet (BMv2's per-packet trace slows it ~10x)."""
    for i in range(20):
        assert client.call("put", f"quiet-{i}", "v")["ok"]
    if dep.target == "bmv2":
        logs = sorted(dep.run_dir.glob("sp0*.txt"))
        assert logs, "BMv2 wrote no log"
        assert not any(PER_PACKET in p.read_text(errors="replace") for p in logs)
    else:
        assert "pipeline" in (dep.run_dir / "sp0.log").read_text()  # events are logged
