"""Record a history of concurrent operations for a linearizability check (Jepsen style).

Several logical clients (asyncio tasks sharing one :class:`AsyncClient`, so
every request has its own sequence number) read and write a few hot keys at
random, each write with a value no other write uses.  Every operation is
recorded with the time it was invoked and the time its reply arrived, on the
machine's monotonic clock (``CLOCK_MONOTONIC`` is one clock for every process
and network namespace of the machine, so histories of several hosts can be
merged).  The outcome rules follow the protocol:

* a reply is a completed operation (a read's value, or NOT_FOUND);
* a write answered ERROR wrote nothing (docs/protocol.md), so it is left out;
  a read answered ERROR returned nothing and is left out too;
* a request that timed out on every attempt has an unknown outcome: it is
  recorded with ``"return": null`` (it may take effect at any time after its
  call, or never), which the checker (tools/lincheck) understands.

The JSON Lines it writes are tools/lincheck's input format.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from client_lib.client import AsyncClient, Resolver
from distcache.cluster import Cluster
from distcache.errors import RequestTimeout, ServerError


@dataclass
class HistoryConfig:
    keys: int = 8  # hot keys h0..h<keys-1>
    clients: int = 8  # concurrent logical clients
    duration: float = 10.0  # seconds
    read_ratio: float = 0.7
    prefix: str = "lin"  # keys are <prefix><i>
    seed: int = 1
    client_id_base: int = 0  # client ids start here (several hosts recording into one history)
    timeout: float = 0.5
    retries: int = 3


@dataclass
class HistoryStats:
    ops: int = 0  # recorded
    reads: int = 0
    writes: int = 0
    unknown: int = 0  # timed out: recorded with an open end
    errors: int = 0  # answered ERROR: left out


async def record(cluster: Cluster | str | Path, cfg: HistoryConfig, out: Path, resolve: Resolver | None = None,
                 on_progress: Callable[[HistoryStats], None] | None = None) -> HistoryStats:
    """Run the clients for ``cfg.duration`` seconds and write the history to ``out`` (JSON Lines)."""
    stats = HistoryStats()
    lines: list[str] = []
    keys = [f"{cfg.prefix}{i}" for i in range(cfg.keys)]
    stop_at = time.monotonic() + cfg.duration

    async def one_client(cid: int, client: AsyncClient) -> None:
        rng = random.Random(cfg.seed * 1000 + cid)
        n = 0
        while time.monotonic() < stop_at:
            key = keys[min(int(rng.expovariate(0.5)), len(keys) - 1)]  # a few keys much hotter than the rest
            read = rng.random() < cfg.read_ratio
            value = None if read else f"c{cid}-{n}"
            n += 1
            call = time.monotonic_ns()
            try:
                if read:
                    got = await client.get(key)
                    value = None if got is None else got.decode()
                else:
                    await client.put(key, value)
                ret: int | None = time.monotonic_ns()
            except RequestTimeout:
                ret = None
                if read:
                    continue  # a read that returned nothing constrains nothing
                stats.unknown += 1
            except ServerError:
                stats.errors += 1
                continue  # ERROR: nothing written, nothing read
            lines.append(json.dumps({"client": cid, "key": key, "op": "get" if read else "put", "value": value,
                                     "call": call, "return": ret}))
            stats.ops += 1
            stats.reads += read
            stats.writes += not read

    async def progress() -> None:
        while time.monotonic() < stop_at:
            await asyncio.sleep(1.0)
            if on_progress is not None:
                on_progress(stats)

    async with AsyncClient(cluster, timeout=cfg.timeout, retries=cfg.retries, resolve=resolve) as client:
        await asyncio.gather(progress(), *(one_client(cfg.client_id_base + i, client) for i in range(cfg.clients)))
    out.write_text("".join(line + "\n" for line in lines))
    return stats
