"""The gateway against a plain redis-server: the same command sequences (hypothesis), replies compared byte for byte.

Two storage servers behind the gateway; a redis-server alone as the reference.  Each sequence works on keys of its
own (a prefix per example) spread over both storage servers, with every family the gateway serves: the strings
family with its options, the fan-out commands (MGET, MSET, DEL, UNLINK, EXISTS, TOUCH), other one-key commands run
by the storage servers' executor (lists, hashes, sets, sorted sets), and the error cases (unknown command, wrong
arity, WRONGTYPE, not an integer, syntax errors).  Both protocols: RESP2, and RESP3 after HELLO 3.

The documented differences (docs/gateway.md) are left out of what is generated: multi-key commands other than the
fanned-out ones, and time (a TTL is compared as "has one" / -1 / -2, as the two servers' clocks tick apart).
"""

from __future__ import annotations

import itertools
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.redis import redis_argv, wait_for_redis
from tests.common.gateway_bed import GatewayBed, gateway_on_loopback

Command = list[bytes]


class Raw:
    """A RESP connection that returns each reply's bytes exactly as the server sent them."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(10)
        self.buf = b""

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line + b"\r\n"

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def reply(self) -> bytes:
        line = self._line()
        kind, rest = line[:1], line[1:-2]
        if kind in b"$=!" and rest != b"-1":
            return line + self._exactly(int(rest) + 2)
        if kind in b"*~>" and rest != b"-1":
            return line + b"".join(self.reply() for _ in range(int(rest)))
        if kind in b"%|":
            return line + b"".join(self.reply() for _ in range(2 * int(rest)))
        return line

    def send(self, commands: list[Command]) -> list[bytes]:
        """Send the commands as one pipeline; their replies."""
        out = b""
        for cmd in commands:
            out += b"*%d\r\n" % len(cmd) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in cmd)
        self.sock.sendall(out)
        return [self.reply() for _ in commands]

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayBed]:
    with gateway_on_loopback(tmp_path_factory.mktemp("gateway")) as b:
        yield b


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A redis-server of its own (the storage servers' build), the reference."""
    d = tmp_path_factory.mktemp("reference")
    sock = d / "redis.sock"
    proc = subprocess.Popen(redis_argv(sock, d), stdout=subprocess.DEVNULL)
    wait_for_redis(sock, proc)
    yield sock
    proc.terminate()
    proc.wait(5)


def connect(bed: GatewayBed, reference: Path) -> tuple[Raw, Raw]:
    g = socket.create_connection((bed.host, bed.port))
    r = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    r.connect(str(reference))
    return Raw(g), Raw(r)


value = st.binary(max_size=12) | st.sampled_from([b"1", b"-7", b"10", b"3.5", b"abc", b""])
number = st.sampled_from([b"1", b"0", b"-3", b"100", b"x", b"1.5", b"99999999999999999999"])
ttl = st.sampled_from([b"100", b"1000", b"-5", b"0", b"x"])


def spread_keys(server_of: Callable[[bytes], str], prefix: bytes) -> list[bytes]:
    """Three keys of this prefix: two on one storage server, one on the other (few keys: commands meet)."""
    by_server: dict[str, list[bytes]] = {}
    for i in itertools.count():
        k = prefix + b"k%d" % i
        by_server.setdefault(server_of(k), []).append(k)
        if len(by_server) == 2 and any(len(v) >= 2 for v in by_server.values()):
            a, b = sorted(by_server.values(), key=len, reverse=True)
            return [*a[:2], b[0]]
    raise AssertionError("unreachable")


def families(keys_of_example: list[bytes]) -> dict[str, st.SearchStrategy[tuple | list]]:
    """The command families, each a strategy of commands on the example's keys."""
    key = st.sampled_from(keys_of_example)
    keys = st.lists(key, min_size=1, max_size=4)
    member = st.sampled_from([b"m", b"m", b"n"])
    field = st.sampled_from([b"f", b"f", b"g"])
    return {
        "strings": st.one_of(
            st.tuples(st.just(b"GET"), key),
            st.tuples(st.just(b"SET"), key, value),
            st.builds(lambda k, v, o: [b"SET", k, v, *o], key, value,
                      st.sampled_from([[b"NX"], [b"XX"], [b"GET"], [b"EX", b"100"], [b"PX", b"100000"], [b"KEEPTTL"],
                                       [b"NX", b"GET"], [b"EX", b"x"], [b"BAD"], [b"EX", b"100", b"PX", b"5"]])),
            st.tuples(st.just(b"SETNX"), key, value),
            st.tuples(st.sampled_from([b"SETEX", b"PSETEX"]), key, ttl, value),
            st.tuples(st.sampled_from([b"GETSET", b"APPEND"]), key, value),
            st.tuples(st.sampled_from([b"GETDEL", b"STRLEN", b"INCR", b"DECR", b"TYPE", b"PERSIST", b"TTL", b"PTTL"]),
                      key),
            st.builds(lambda k, o: [b"GETEX", k, *o], key,
                      st.sampled_from([[], [b"PERSIST"], [b"EX", b"100"], [b"X"]])),
            st.tuples(st.sampled_from([b"INCRBY", b"DECRBY", b"INCRBYFLOAT"]), key, number),
            st.tuples(st.just(b"GETRANGE"), key, number, number),
            st.tuples(st.just(b"SETRANGE"), key, st.sampled_from([b"0", b"3", b"-1", b"x"]), value),
            st.builds(lambda c, k, t, o: [c, k, t, *o], st.sampled_from([b"EXPIRE", b"PEXPIRE"]), key, ttl,
                      st.sampled_from([[], [b"NX"], [b"XX"], [b"GT"], [b"LT"], [b"ZZ"]])),
        ),
        "fan-out": st.one_of(
            st.tuples(st.just(b"SET"), key, value),
            st.builds(lambda c, ks: [c, *ks], st.sampled_from([b"MGET", b"DEL", b"UNLINK", b"EXISTS", b"TOUCH"]), keys),
            st.builds(lambda kv: [b"MSET", *itertools.chain.from_iterable(kv)],
                      st.lists(st.tuples(key, value), min_size=1, max_size=3)),
            st.tuples(st.just(b"MSET"), key),
        ),
        "lists": st.one_of(
            st.tuples(st.sampled_from([b"LPUSH", b"RPUSH", b"LREM"]), key, value),
            st.tuples(st.sampled_from([b"LPOP", b"RPOP", b"LLEN"]), key),
            st.tuples(st.sampled_from([b"LPOP", b"RPOP"]), key, st.sampled_from([b"2", b"0", b"x"])),
            st.tuples(st.just(b"LRANGE"), key, st.just(b"0"), st.just(b"-1")),
        ),
        "hashes": st.one_of(
            st.tuples(st.just(b"HSET"), key, field, value),
            st.tuples(st.sampled_from([b"HGET", b"HDEL", b"HEXISTS"]), key, field),
            st.tuples(st.sampled_from([b"HGETALL", b"HKEYS", b"HLEN"]), key),
        ),
        "sets": st.one_of(
            st.tuples(st.sampled_from([b"SADD", b"SREM", b"SISMEMBER"]), key, member),
            st.tuples(st.sampled_from([b"SMEMBERS", b"SCARD"]), key),
            st.tuples(st.just(b"SPOP"), key, st.just(b"0")),
        ),
        "sorted sets": st.one_of(
            st.tuples(st.just(b"ZADD"), key, number, member),
            st.builds(lambda k, m: [b"ZADD", k, b"INCR", b"2", m], key, member),
            st.tuples(st.sampled_from([b"ZSCORE", b"ZRANK", b"ZREM"]), key, member),
            st.tuples(st.just(b"ZINCRBY"), key, number, member),
            st.builds(lambda k: [b"ZMSCORE", k, b"m", b"n", b"o"], key),
            st.tuples(st.sampled_from([b"ZRANGE", b"ZREVRANGE"]), key, st.just(b"0"), st.just(b"-1"),
                      st.just(b"WITHSCORES")),
            st.tuples(st.just(b"ZRANGEBYSCORE"), key, st.just(b"-inf"), st.just(b"+inf"), st.just(b"WITHSCORES")),
            st.tuples(st.sampled_from([b"ZPOPMIN", b"ZPOPMAX"]), key),
            st.tuples(st.sampled_from([b"ZPOPMIN", b"ZPOPMAX"]), key, st.sampled_from([b"2", b"1"])),
            st.tuples(st.sampled_from([b"ZCARD", b"TYPE"]), key),
        ),
        "errors and the connection": st.one_of(
            st.tuples(st.sampled_from([b"NOSUCHCMD", b"GET"])),
            st.tuples(st.just(b"get"), key, key),
            st.tuples(st.just(b"SET"), key),
            st.tuples(st.just(b"PING")),
            st.tuples(st.just(b"ECHO"), value),
            st.tuples(st.just(b"OBJECT"), st.sampled_from([b"ENCODING", b"NOPE"]), key),
            st.tuples(st.sampled_from([b"INCR", b"STRLEN", b"LLEN"]), key),
        ),
    }  # fmt: skip


def commands(keys_of_example: list[bytes], chosen: list[str]) -> st.SearchStrategy[Command]:
    fam = families(keys_of_example)
    return st.one_of(*(fam[f] for f in chosen)).map(list)


def normalized(cmd: Command, reply: bytes) -> bytes:
    """A TTL's reply as "has one" (the clocks of two servers tick apart), a set's members in order (a set of
    strings is a hash table whose order is its process's hash seed); every other reply as it is."""
    name = cmd[0].upper()
    if name in (b"TTL", b"PTTL") and reply.startswith(b":") and not reply.startswith(b":-"):
        return b":<positive>\r\n"
    if name == b"SMEMBERS" and reply[:1] in b"*~":
        head, _, body = reply.partition(b"\r\n")
        items = body.split(b"\r\n")[:-1]
        pairs = sorted(zip(items[::2], items[1::2], strict=True))
        return head + b"\r\n" + b"".join(a + b"\r\n" + b + b"\r\n" for a, b in pairs)
    return reply


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), proto=st.sampled_from([2, 3]), pipelined=st.booleans())
def test_the_same_replies_as_redis(bed: GatewayBed, reference: Path, data: st.DataObject, proto: int,
                                   pipelined: bool) -> None:  # fmt: skip
    keys = spread_keys(bed.server_of, f"p{next(_examples)}:".encode())
    chosen = data.draw(st.lists(st.sampled_from(FAMILIES), min_size=1, max_size=2, unique=True))
    seq = data.draw(st.lists(commands(keys, chosen), min_size=3, max_size=25))
    gw, ref = connect(bed, reference)
    try:
        if proto == 3:
            assert gw.send([[b"HELLO", b"3"]])[0].startswith(b"%7")
            ref.send([[b"HELLO", b"3"]])
        batches = [seq] if pipelined else [[c] for c in seq]
        for batch in batches:
            got, want = gw.send(batch), ref.send(batch)
            for cmd, g, w in zip(batch, got, want, strict=True):
                assert normalized(cmd, g) == normalized(cmd, w), (proto, cmd, g, w, seq)
    finally:
        gw.close()
        ref.close()


#: every reply the executor returns in a shape Redis gives otherwise (gateway/shapes.go), in both protocols
SHAPES: list[Command] = [c.split() for c in (
    b"ZADD z 1.5 m", b"ZADD z 2 n", b"ZSCORE z m", b"ZSCORE z nope", b"ZINCRBY z 1 m", b"ZADD z INCR 1 n",
    b"ZMSCORE z m nope n", b"ZRANGE z 0 -1 WITHSCORES", b"ZREVRANGE z 0 -1 WITHSCORES",
    b"ZRANGEBYSCORE z -inf +inf WITHSCORES", b"ZREVRANGEBYSCORE z +inf -inf WITHSCORES", b"ZADD one 1 m",
    b"ZRANDMEMBER one -3 WITHSCORES", b"ZPOPMIN z", b"ZPOPMAX z 2", b"ZPOPMIN z", b"SADD s a", b"SMEMBERS s",
    b"SMEMBERS nope", b"SPOP s 1", b"HSET h f v", b"HGETALL h", b"HGETALL nope", b"HRANDFIELD h -2 WITHVALUES",
    b"LPOP nope 2", b"RPOP nope 2", b"RPUSH l a b c", b"LPOP l 2", b"RPOP l 0", b"LPOP l",
)]  # fmt: skip


@pytest.mark.parametrize("proto", [2, 3])
def test_reply_shapes_as_redis(bed: GatewayBed, reference: Path, proto: int) -> None:
    """The executor's replies reshaped as Redis shapes them (maps, sets, doubles, pairs, missing arrays)."""
    prefix = f"shape{proto}:".encode()
    keyed = [[c[0], prefix + c[1], *c[2:]] for c in SHAPES]
    gw, ref = connect(bed, reference)
    try:
        if proto == 3:
            gw.send([[b"HELLO", b"3"]])
            ref.send([[b"HELLO", b"3"]])
        for cmd in keyed:
            assert gw.send([cmd]) == ref.send([cmd]), (proto, cmd)
    finally:
        gw.close()
        ref.close()


_examples = itertools.count()
FAMILIES = list(families([b"k"]))
