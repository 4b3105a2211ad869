"""Stock Redis clients against the gateway, unmodified: redis-cli, redis-benchmark, redis-py (its own parser and
hiredis; sync, asyncio, pipelines).  Two storage servers behind one gateway, on loopback (no switches: the gateway's
fabric requests reach the shims directly); what the clients stored is read back from the storage servers'
own redis-servers."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aredis
from redis._parsers import _HiredisParser, _RESP2Parser, _RESP3Parser

from tests.common.gateway_bed import GatewayBed, gateway_on_loopback


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayBed]:
    with gateway_on_loopback(tmp_path_factory.mktemp("gateway")) as b:
        yield b


def cli(bed: GatewayBed, *args: str, stdin: bytes | None = None) -> str:
    out = subprocess.run(
        ["redis-cli", "-h", bed.host, "-p", str(bed.port), *args], input=stdin, capture_output=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.decode()


def test_redis_cli_reads_and_writes_through_it(bed: GatewayBed) -> None:
    assert cli(bed, "SET", "user:42", "ada").strip() == "OK"
    assert cli(bed, "GET", "user:42").strip() == "ada"
    assert cli(bed, "--no-raw", "GET", "no-such-key").strip() == "(nil)"
    assert cli(bed, "--no-raw", "-3", "GET", "no-such-key").strip() == "(nil)"
    assert cli(bed, "INCRBY", "visits", "7").strip() == "7"
    assert cli(bed, "--no-raw", "LPUSH", "user:42", "x").startswith("(error) WRONGTYPE")
    assert "redis_version:7.0.15" in cli(bed, "INFO", "server")
    hello = cli(bed, "--no-raw", "-3", "HELLO", "3").splitlines()
    assert hello[0:2] == ['1# "server" => "redis"', '2# "version" => "7.0.15"']
    big = os.urandom(1 << 20)
    assert cli(bed, "-x", "SET", "big", stdin=big).strip() == "OK"  # redis-cli -x: the last argument from stdin
    assert bed.stores[bed.server_of("big")].get("big") == big
    long_key = "k" * 5000
    assert cli(bed, "SET", long_key, "long").strip() == "OK"
    assert bed.stores[bed.server_of(long_key)].get(long_key) == b"long"


def test_redis_benchmark_with_and_without_pipelining(bed: GatewayBed) -> None:
    for pipeline in ("1", "16"):
        out = subprocess.run(
            ["redis-benchmark", "-h", bed.host, "-p", str(bed.port), "-t", "set,get", "-n", "3000", "-r", "500",
             "-P", pipeline, "-q"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr  # redis-benchmark exits at an error reply
        rates = dict(re.findall(r"^(SET|GET): ([\d.]+) requests per second", out.stdout.replace("\r", "\n"), re.M))
        assert set(rates) == {"SET", "GET"} and all(float(r) > 0 for r in rates.values()), out.stdout
    written = sum(store.dbsize() for store in bed.stores.values())
    assert written > 100  # keys key:000000000000.. spread over both servers
    assert all(store.dbsize() > 0 for store in bed.stores.values())


@pytest.mark.parametrize("parser", [_RESP2Parser, _HiredisParser, _RESP3Parser], ids=["python", "hiredis", "resp3"])
def test_redis_py_sync_and_pipelines(bed: GatewayBed, parser: type) -> None:
    proto = 3 if parser is _RESP3Parser else 2
    pool = redis.ConnectionPool(host=bed.host, port=bed.port, parser_class=parser, protocol=proto)
    r = redis.Redis(connection_pool=pool)
    assert type(r.connection_pool.get_connection()._parser) is parser
    name = parser.__name__
    r.set(f"{name}:a", "1")
    assert r.get(f"{name}:a") == b"1"
    assert r.incr(f"{name}:a") == 2
    assert r.get(f"{name}:nothing") is None
    r.mset({f"{name}:k{i}": i for i in range(20)})
    assert r.mget([f"{name}:k{i}" for i in range(20)] + ["none"]) == [str(i).encode() for i in range(20)] + [None]
    assert r.delete(*[f"{name}:k{i}" for i in range(20)], "none") == 20
    p = r.pipeline(transaction=False)
    p.set(f"{name}:p", "x")
    p.append(f"{name}:p", "y")
    p.get(f"{name}:p")
    p.getdel(f"{name}:p")
    p.exists(f"{name}:p")
    assert p.execute() == [True, 2, b"xy", b"xy", 0]
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        r.rpush(f"{name}:a", "x")
    with pytest.raises(redis.ResponseError, match="MULTI is not available: the DistCache gateway runs no transactions"):
        r.pipeline(transaction=True).set("t", 1).execute()
    assert r.exists("t") == 0  # nothing of a transaction is applied
    assert r.ping() and r.client_id() > 0
    r.close()


def test_redis_py_asyncio(bed: GatewayBed) -> None:
    async def main() -> list:
        r = aredis.Redis(host=bed.host, port=bed.port)
        await r.set("async:x", b"\x00\xff")
        got = await asyncio.gather(*(r.incr(f"async:n{i % 3}") for i in range(30)))
        async with r.pipeline(transaction=False) as p:
            p.get("async:x")
            p.get("async:n0")
            out = await p.execute()
        await r.aclose()
        return [sorted(got)[-1], *out]

    assert asyncio.run(main()) == [10, b"\x00\xff", b"10"]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_ten_thousand_connections_with_half_sent_commands_cost_bounded_memory(bed: GatewayBed) -> None:
    """10 000 connections, each with half a command sent and garbage on some: the gateway holds them in bounded
    memory, answers a new client, refuses the 10 001st as Redis does (maxclients), and is fine after."""
    socks: list[socket.socket] = []
    base = _rss_mb(bed.proc.pid)
    try:
        for i in range(10000 - 2):  # the gateway's max-clients is 10 000: room for the probe and one more
            s = socket.create_connection((bed.host, bed.port))
            s.sendall(b"*3\r\n$3\r\nSET\r\n$5\r\nhalf:\r\n$100\r\nnot yet" if i % 10 else b"\x00\xff garbage")
            socks.append(s)
        probe = redis.Redis(host=bed.host, port=bed.port)
        deadline = time.monotonic() + 30
        while int(probe.info("clients")["connected_clients"]) < 9999 and time.monotonic() < deadline:
            time.sleep(0.1)
        held = _rss_mb(bed.proc.pid)
        assert held - base < 300, f"{held - base:.0f} MB for 10 000 connections"
        last = redis.Redis(host=bed.host, port=bed.port)
        assert last.ping() and probe.set("flood:probe", "x") and probe.get("flood:probe") == b"x"
        with pytest.raises(redis.ConnectionError, match="max number of clients reached"):
            redis.Redis(host=bed.host, port=bed.port).ping()
        last.close()
        probe.close()
    finally:
        for s in socks:
            s.close()
    r = redis.Redis(host=bed.host, port=bed.port)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            assert r.set("after", "flood") and r.get("after") == b"flood"
            break
        except redis.ConnectionError:  # the closed connections are still going away
            time.sleep(0.2)
    assert bed.proc.poll() is None
