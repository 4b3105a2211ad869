"""Record a history of concurrent operations for a linearizability check (Jepsen style).

Several logical clients (asyncio tasks sharing one :class:`AsyncClient`, so
every request has its own sequence number) read, write and delete a few hot
keys at random, each write with a value no other write uses.  What each client
asks for (key, operation, value) is drawn from its own generator seeded by
``(seed, client id)`` and never from an outcome, so a seed replays the same
requests in the same order (:func:`plan`); with ``ops`` set, the same number
of them.  Every operation is
recorded with the time it was invoked and the time its reply arrived, on the
machine's monotonic clock (``CLOCK_MONOTONIC`` is one clock for every process
and network namespace of the machine, so histories of several hosts can be
merged).  The outcome rules follow the protocol:

* a reply is a completed operation (a read's value, or NOT_FOUND; a delete's
  status, OK or NOT_FOUND, recorded as ``"found": true|false``, since a delete
  of an absent key must answer NOT_FOUND and of a present one OK);
* a write answered ERROR wrote nothing (docs/protocol.md): it is recorded with
  ``"error": true`` (the staleness oracle, loadgen.oracle, holds that no read
  returns its value; tools/lincheck skips it); a read answered ERROR returned
  nothing and is left out;
* a request that timed out on every attempt has an unknown outcome: it is
  recorded with ``"return": null`` (it may take effect at any time after its
  call, or never; a delete's status is then unknown too: ``"found": null``),
  which the checker (tools/lincheck) understands, and ``"end"``, when the client
  gave up (the oracle's end of its retry span);
* a retried request is one operation, from its first call to the reply
  accepted: the client retries with the same sequence number and the shim
  answers every copy of a write with its first reply (shim/dedup.py).

The mix can take every path a register's operations have (``exec_ratio``, ``ttl_ratio``, ``long_keys``): a read,
write or delete as a command (``execute("GET"|"SET"|"DEL", ...)``: never answered by a cache, a write command
through the two-phase protocol with phase 2 from what it left), a write that gives its value a time to live
longer than the run (``SET ... PX``: never cached, and never expired while the history runs, so the register's
rules hold), keys long enough that a v1 wire could not carry them, and values too long for a datagram
(``stream_ratio``: the stream path, never cached; the line names the write by its short value, and a read by the
write whose value it returned, :func:`read_value`), counters (``counter_keys``: their writes are INCRs, the line's
value the number it answered) and hashes (``hash_ratio``: an HSET makes the key a hash, and a read of it answers
WRONGTYPE, ``"wrongtype": true``; an HSET over a string answers WRONGTYPE and writes nothing).  Command lines
carry ``"via": "exec"``, stream-path puts ``"stream": true``.

The JSON Lines it writes are tools/lincheck's input format.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from client_lib.client import AsyncClient, Resolver
from distcache.cluster import Cluster
from distcache.errors import RequestTimeoutError, ServerError, WrongTypeError
from distcache.wire import Status


@dataclass
class HistoryConfig:
    keys: int = 8  # hot keys h0..h<keys-1>
    clients: int = 8  # concurrent logical clients
    duration: float = 10.0  # seconds; each client stops at the first of duration and ops
    read_ratio: float = 0.7
    delete_ratio: float = 0.15  # share of the writes (1 - read_ratio) that are DELETEs; the rest are PUTs
    prefix: str = "lin"  # keys are <prefix><i>
    seed: int = 1  # with client ids, fixes every client's requests (plan)
    client_id_base: int = 0  # client ids start here (several hosts recording into one history)
    timeout: float = 0.5
    retries: int = 3
    ops: int = 0  # requests per client; 0: as many as fit in duration
    stop_file: str = ""  # if set, the clients also stop once this file exists (a fault schedule finished early)
    rate: float = 0.0  # requests per second per client at most (0: as fast as replies come); bounds the
    #                    operations per key, which is what the checker's time and memory grow with
    exec_ratio: float = 0.0  # share of the requests made as commands (execute GET, SET, DEL)
    ttl_ratio: float = 0.0  # share of the puts made as SET ... PX TTL_MS (commands: never cached)
    long_keys: int = 0  # this many of the keys have a LONG_KEY-byte name
    stream_ratio: float = 0.0  # share of the puts whose value is STREAM_VALUE bytes long (the stream path)
    counter_keys: int = 0  # this many of the keys are counters: their writes are INCRs (after them, the long keys)
    hash_ratio: float = 0.0  # share of the other keys' puts made as an HSET (the key becomes a hash)
    gateway: str = ""  # HOST:PORT of a Redis-protocol gateway (distcache-gateway) ...
    gateway_clients: int = 0  # ... which this many of the clients use, speaking RESP (redis-py), instead of client_lib

    def __post_init__(self) -> None:
        """Reject a configuration that would record a meaningless history, with one clear line."""
        for name in ("read_ratio", "delete_ratio", "exec_ratio", "ttl_ratio", "stream_ratio", "hash_ratio"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                raise ValueError(f"HistoryConfig.{name} must be a number in [0, 1], not {v!r}")
        for name in ("keys", "clients"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"HistoryConfig.{name} must be a positive integer, not {v!r}")
        for name in ("ops", "retries", "seed", "client_id_base", "long_keys", "counter_keys", "gateway_clients"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"HistoryConfig.{name} must be an integer >= 0, not {v!r}")
        for name in ("duration", "timeout"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"HistoryConfig.{name} must be a positive number of seconds, not {v!r}")
        if self.gateway_clients and not self.gateway:
            raise ValueError("HistoryConfig.gateway_clients needs HistoryConfig.gateway (HOST:PORT of a gateway)")
        if isinstance(self.rate, bool) or not isinstance(self.rate, (int, float)) or self.rate < 0:
            raise ValueError(f"HistoryConfig.rate must be a number of requests per second >= 0, not {self.rate!r}")


@dataclass
class HistoryStats:
    ops: int = 0  # recorded
    reads: int = 0
    cached_reads: int = 0  # of the reads: answered by a switch cache (known for client_lib's reads only)
    resp_reads: int = 0  # of the reads: through a gateway (RESP), whose replies do not say who answered
    writes: int = 0  # PUTs and DELETEs
    deletes: int = 0  # of the writes
    deletes_not_found: int = 0  # deletes answered NOT_FOUND
    unknown: int = 0  # timed out: recorded with an open end
    errors: int = 0  # answered ERROR: left out


Kind = Literal["get", "put", "delete", "incr", "hset"]
TTL_MS = 3_600_000  # a mix's TTL: longer than any history runs, so no value expires while it is checked
LONG_KEY = 300  # bytes of a long key's name: more than a v1 message carried, a few datagram-sized ones
STREAM_VALUE = 4000  # bytes of a stream-path value: more than a datagram carries, never cached


def stream_value(value: str) -> str:
    """The STREAM_VALUE-byte value a put of ``value`` writes when it takes the stream path: ``value`` repeated,
    each copy ended by ``|``, so a read names the write it returned (:func:`read_value`)."""
    return ((value + "|") * (STREAM_VALUE // (len(value) + 1) + 1))[:STREAM_VALUE]


def read_value(data: bytes) -> str:
    """The value a read returned, as the history names it: a stream-path value by the write it came from; one
    that is not exactly what that write wrote (cut, mixed) as the bytes it is, which no write wrote."""
    text = data.decode("utf-8", "replace")
    if "|" in text and stream_value(head := text.split("|", 1)[0]) == text:
        return head
    return text


def put_line(key: str, value: str, call: int, now: int, outcome: str = "ok", client: int = 0) -> dict:
    """A put's history line, ended ``now``: ``outcome`` "ok" (acknowledged), "error" (answered ERROR:
    nothing written) or "unknown" (no reply in the client's whole retry span, which ends now)."""
    line: dict[str, object] = {"client": client, "key": key, "op": "put", "value": value, "call": call}
    if outcome == "unknown":
        line["return"], line["end"] = None, now
    else:
        line["return"] = now
        if outcome == "error":
            line["error"] = True
    return line


def get_line(
    key: str, value: str | None, call: int, ret: int, served_by: int = 0, target: int = 0, client: int = 0
) -> dict:
    """A get's history line: the value read (None: absent), who answered it and where it was routed."""
    return {"client": client, "key": key, "op": "get", "value": value, "call": call, "return": ret,
            "served_by": served_by, "target": target}  # fmt: skip


@dataclass(frozen=True)
class Request:
    """One request a client will make: ``value`` is the value a put writes (None otherwise)."""

    key: str
    op: Kind
    value: str | None
    via_exec: bool = False  # made as a command (execute)
    ttl: bool = False  # a put that gives its value a TTL (as a command)
    big: bool = False  # a put whose value takes the stream path (stream_value)


def plan(cfg: HistoryConfig, cid: int) -> Iterator[Request]:
    """Client ``cid``'s requests, in order: a function of ``cfg.seed`` and ``cid`` alone.

    Every request draws the same three numbers whatever it turns out to be, so changing a ratio changes
    which requests are reads, puts or deletes but not which keys they go to.  Keys follow an exponential
    law: a few keys much hotter than the rest, so writes and reads of one key overlap often.
    """
    rng = random.Random(f"history:{cfg.seed}:{cid}")  # a str seed hashes the same in every process
    mix = random.Random(f"history-mix:{cfg.seed}:{cid}")  # apart: the mix's draws change no key or op
    keys = history_keys(cfg)
    counters = set(counter_keys(cfg))
    n = 0
    while cfg.ops == 0 or n < cfg.ops:
        key = keys[min(int(rng.expovariate(0.5)), len(keys) - 1)]
        read, delete = rng.random() < cfg.read_ratio, rng.random() < cfg.delete_ratio
        via_exec, ttl = mix.random() < cfg.exec_ratio, mix.random() < cfg.ttl_ratio
        # the newer draws only where asked for: a mix without them draws what it drew before
        big = cfg.stream_ratio > 0 and mix.random() < cfg.stream_ratio
        as_hash = cfg.hash_ratio > 0 and mix.random() < cfg.hash_ratio
        if read:
            yield Request(key, "get", None, via_exec)
        elif delete:
            yield Request(key, "delete", None, via_exec)
        elif key in counters:
            yield Request(key, "incr", None, True)
        elif as_hash:
            yield Request(key, "hset", f"c{cid}-{n}", True)
        else:
            yield Request(key, "put", f"c{cid}-{n}", via_exec or ttl, ttl, big)
        n += 1


def counter_keys(cfg: HistoryConfig) -> list[str]:
    """The keys whose writes are INCRs: the ``counter_keys`` right before the long keys."""
    keys = history_keys(cfg)
    end = max(0, cfg.keys - cfg.long_keys)
    return keys[max(0, end - cfg.counter_keys) : end]


def history_keys(cfg: HistoryConfig) -> list[str]:
    """The keys a history uses: ``<prefix><i>``, the last ``long_keys`` of them padded to LONG_KEY bytes."""
    keys = [f"{cfg.prefix}{i}" for i in range(cfg.keys)]
    for i in range(max(0, cfg.keys - cfg.long_keys), cfg.keys):
        keys[i] = keys[i].ljust(LONG_KEY, "~")
    return keys


async def _run(client: AsyncClient, req: Request, line: dict[str, object], stats: HistoryStats) -> None:
    """Make ``req``, as a command where the mix says so, and write what it returned into ``line`` (Redis'
    WRONGTYPE as ``"wrongtype": true``: a read of a hash, an INCR or HSET of a key of the other type)."""
    try:
        await _make(client, req, line, stats)
    except WrongTypeError:
        line["wrongtype"] = True
        if req.op == "get":
            line["value"] = None


async def _make(client: AsyncClient, req: Request, line: dict[str, object], stats: HistoryStats) -> None:
    if req.op == "incr":
        line["value"] = str(await client.execute("INCR", req.key))
    elif req.op == "hset":
        await client.execute("HSET", req.key, "f", str(req.value))
    elif req.op == "get":
        if req.via_exec:
            value = await client.execute("GET", req.key)
            line["value"] = read_value(value) if isinstance(value, bytes) else None
            line["served_by"] = line["target"] = 0
        else:
            reply = await client.get_reply(req.key)
            line["value"] = None if reply.value is None else read_value(reply.value)
            line["served_by"] = reply.served_by  # which switch answered (0: the server)
            line["target"] = reply.target  # where the client rack routed it (the fault matrix's at-risk pairs)
            stats.cached_reads += reply.cached
    elif req.op == "put":
        value = stream_value(str(req.value)) if req.big else str(req.value)
        if req.ttl:
            await client.execute("SET", req.key, value, "PX", TTL_MS)
        elif req.via_exec:
            await client.execute("SET", req.key, value)
        else:
            await client.put(req.key, value)
    else:
        found = await client.execute("DEL", req.key) == 1 if req.via_exec else await client.delete(req.key)
        line["found"] = found  # True: OK, False: NOT_FOUND
        stats.deletes_not_found += not found


class NotSentError(Exception):
    """A request that never left the client (no connection to its gateway): no operation, nothing recorded."""


class RespClient:
    """A client that speaks RESP to a gateway (redis-py, asyncio, one connection), making a history's requests as
    any Redis application would; its outcomes are read as client_lib's are (:func:`_run`): the gateway's "outcome
    is unknown" error and a broken connection (the gateway killed mid-request) as a timeout, a connection refused
    (the gateway restarting: nothing was sent) as no request at all, TRYAGAIN (a storage
    server's BUSY) and its other errors as a refusal that wrote nothing, WRONGTYPE as ``"wrongtype": true``."""

    #: how long after a broken connection a write the gateway had sent may still take effect: its datagrams in
    #: flight in the fabric (the gateway's own retries died with it)
    IN_FLIGHT_NS = 1_000_000_000

    def __init__(self, address: str, timeout: float) -> None:
        import redis.asyncio as aredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        host, _, port = address.rpartition(":")
        # no retries of redis-py's own: a command sent again after a broken connection could be applied twice
        self.redis = aredis.Redis(host=host, port=int(port), socket_timeout=timeout, retry=Retry(NoBackoff(), 0),
                                  max_connections=1)  # fmt: skip

    async def run(self, req: Request, line: dict[str, object], stats: HistoryStats) -> None:
        import redis

        try:
            await self._make(req, line, stats)
        except redis.ResponseError as e:
            text = str(e)
            if text.startswith("WRONGTYPE"):  # as _run records it
                line["wrongtype"] = True
                if req.op == "get":
                    line["value"] = None
                    stats.resp_reads += 1
                return
            if "outcome is unknown" in text:
                raise RequestTimeoutError(text) from None
            busy = text.startswith("TRYAGAIN")  # a storage server's BUSY: not applied
            raise ServerError(text, Status.BUSY if busy else Status.ERROR) from None
        except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
            if "connecting to" in str(e):  # no connection (the gateway restarting): the command was never sent
                await asyncio.sleep(0.05)
                raise NotSentError(str(e)) from None
            line["_end_after"] = self.IN_FLIGHT_NS
            raise RequestTimeoutError(f"the gateway's connection broke: {e}") from None

    async def _make(self, req: Request, line: dict[str, object], stats: HistoryStats) -> None:
        r = self.redis
        line["via"] = "resp"
        if req.op == "incr":
            line["value"] = str(await r.incr(req.key))
        elif req.op == "hset":
            await r.hset(req.key, "f", str(req.value))
        elif req.op == "get":
            value = await r.get(req.key)
            line["value"] = None if value is None else read_value(value if isinstance(value, bytes) else value.encode())
            line["served_by"] = line["target"] = 0  # (the gateway counts its hits; a reply does not say)
            stats.resp_reads += 1
        elif req.op == "put":
            value = stream_value(str(req.value)) if req.big else str(req.value)
            await r.set(req.key, value, px=TTL_MS if req.ttl else None)
        else:
            found = await r.delete(req.key) == 1
            line["found"] = found
            stats.deletes_not_found += not found

    async def close(self) -> None:
        await self.redis.aclose()


async def record(
    cluster: Cluster | str | Path,
    cfg: HistoryConfig,
    out: Path,
    resolve: Resolver | None = None,
    on_progress: Callable[[HistoryStats], None] | None = None,
) -> HistoryStats:
    """Run the clients until ``cfg.duration`` seconds pass (or each made ``cfg.ops`` requests) and write the
    history to ``out`` (JSON Lines, tools/lincheck's input)."""
    stats = HistoryStats()
    lines: list[str] = []
    stop_at = time.monotonic() + cfg.duration
    stop_file = Path(cfg.stop_file) if cfg.stop_file else None

    async def one_client(cid: int, client: AsyncClient, resp: RespClient | None) -> None:
        next_at = time.monotonic()
        for req in plan(cfg, cid):
            if cfg.rate:
                next_at += 1.0 / cfg.rate
                if next_at > time.monotonic():
                    await asyncio.sleep(next_at - time.monotonic())
            if time.monotonic() >= stop_at:
                break
            line: dict[str, object] = {"client": cid, "key": req.key, "op": req.op}
            if req.via_exec:
                line["via"] = "exec"
            if req.ttl:
                line["ttl_ms"] = TTL_MS
            if req.big:
                line["stream"] = True  # its value is stream_value(value), STREAM_VALUE bytes
            if req.op in ("put", "hset"):
                line["value"] = req.value
            elif req.op == "incr":
                line["value"] = None  # the number it answers, when it answers
            elif req.op == "delete":
                line["found"] = None  # no status until a reply comes
            call = time.monotonic_ns()
            try:
                await (resp.run(req, line, stats) if resp is not None else _run(client, req, line, stats))
                ret: int | None = time.monotonic_ns()
            except NotSentError:
                continue
            except RequestTimeoutError:
                after = int(line.pop("_end_after", 0))  # type: ignore[call-overload]
                if req.op == "get":
                    continue  # a read that returned nothing constrains nothing
                ret = None
                line["end"] = time.monotonic_ns() + after  # the client's whole retry span is over
                stats.unknown += 1
            except ServerError:
                stats.errors += 1
                if req.op == "get":
                    continue  # nothing read
                ret, line["error"] = time.monotonic_ns(), True  # nothing written: no read may return it
            line["call"], line["return"] = call, ret
            lines.append(json.dumps(line))
            if "error" in line:
                continue  # not an operation of the register's history (tools/lincheck skips it)
            stats.ops += 1
            stats.reads += req.op == "get"
            stats.writes += req.op != "get"
            stats.deletes += req.op == "delete"

    async def progress() -> None:
        nonlocal stop_at
        ticks = 0
        while True:
            await asyncio.sleep(0.2)
            ticks += 1
            if stop_file is not None and stop_file.exists():
                stop_at = min(stop_at, time.monotonic())
            if on_progress is not None and ticks % 5 == 0:
                on_progress(stats)

    # a gateway's clients wait as long as its own retries may take (the caller starts it with the same timeout
    # and retries), and a little more
    resp_wait = (cfg.retries + 1) * cfg.timeout + 5.0
    resps = [RespClient(cfg.gateway, resp_wait) for _ in range(min(cfg.gateway_clients, cfg.clients))]
    async with AsyncClient(cluster, timeout=cfg.timeout, retries=cfg.retries, resolve=resolve) as client:
        reporter = asyncio.create_task(progress())
        try:
            await asyncio.gather(*(
                one_client(cfg.client_id_base + i, client, resps[i] if i < len(resps) else None)
                for i in range(cfg.clients)
            ))  # fmt: skip
        finally:
            reporter.cancel()  # the clients are done (duration or ops): no more progress to report
            for rc in resps:
                await rc.close()
    out.write_text("".join(line + "\n" for line in lines))
    return stats
