"""The Python load generators: spawned processes, each running ``client_lib.AsyncClient`` tasks for the phase
it is sent (GETs of preloaded keys or PUTs of uncached keys) and sending back latencies and errors."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass
from multiprocessing.connection import Connection

from bench.shim.children import quiet_child
from bench.shim.config import HOST, REPLY_TIMEOUT, VALUE, WARMUP
from client_lib import AsyncClient, DistCacheError
from distcache.cluster import Cluster


@dataclass(frozen=True)
class LoadSpec:
    """One timed phase as a load generator runs it (sent over a pipe, so plain data only)."""

    port: int
    op: str  # "get" or "put"
    tasks: int
    seconds: float
    start_at: float  # wall clock (time.time) at which the warm-up starts, the same for every generator
    keys: tuple[str, ...] = ()


async def _load(index: int, spec: LoadSpec) -> dict:
    client = await AsyncClient(
        Cluster(), resolve=lambda _host: (HOST, spec.port), timeout=REPLY_TIMEOUT, retries=0
    ).start()
    await asyncio.sleep(max(0.0, spec.start_at - time.time()))
    begin = time.perf_counter() + WARMUP
    end = begin + spec.seconds
    latencies: list[float] = []
    errors: Counter[str] = Counter()

    async def task(t: int) -> None:
        if spec.op == "get":
            keys = spec.keys[(index * 7919 + t * 104729) % len(spec.keys) :] + spec.keys  # spread tasks over keys
        else:
            keys = tuple(f"bench:put:{index}:{t}:{i}" for i in range(32))  # no two tasks write one key
        n = 0
        while (t0 := time.perf_counter()) < end:
            key = keys[n % len(keys)]
            n += 1
            try:
                if spec.op == "get":
                    await client.get(key)
                else:
                    await client.put(key, VALUE)
            except DistCacheError as e:
                if t0 >= begin:
                    errors[type(e).__name__] += 1
                continue
            t1 = time.perf_counter()
            if t0 >= begin and t1 <= end:
                latencies.append(t1 - t0)

    try:
        await asyncio.gather(*(task(t) for t in range(spec.tasks)))
    finally:
        client.close()
    return {"latencies": latencies, "errors": dict(errors)}


def load_generator(conn: Connection, index: int) -> None:
    """A load-generator process: runs each LoadSpec it is sent and sends back latencies and errors."""
    quiet_child()
    with contextlib.suppress(EOFError, BrokenPipeError):
        while (spec := conn.recv()) is not None:
            conn.send(asyncio.run(_load(index, spec)))
