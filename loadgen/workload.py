"""YCSB-style workload engine behind ``distcache bench``, usable as a library.

``run_bench(cluster, BenchConfig(...)) -> Report`` drives one
:class:`~client_lib.client.AsyncClient` with ``concurrency`` coroutines, each
issuing one request at a time, and returns counts, latencies and per-second
hit ratios.  ``on_second`` (if given) is called once per elapsed second with
that second's :class:`Second`, so a demo can print the hit ratio climbing as
the switch caches warm up.

Keys and popularity.  The key of Zipf rank ``i`` (0 = hottest) is
``f"{prefix}{i}"`` (default ``key0`` … ``key99999999``).  Placement hashes the key (h1, h0), so hot
ranks land on unrelated servers and spines.  Ranks are drawn by the
simulator's Zipf sampler (:class:`simulator.workload.Zipf`: exact over the
2^17 hottest keys, continuous approximation beyond), fine for 10^8 keys.

Values are self-describing: ``<key>#<run>#<n>#`` padded with ``.`` to
``value_size`` bytes (longer if the header alone is longer), where ``run``
is a random tag of this run (one per client host when several write: every
write's value is unique) and ``n`` the write counter of that key in this
run (0 for the load phase).

Checking reads.  Every operation is recorded with its start and end on
``CLOCK_MONOTONIC`` and judged by the staleness oracle (:mod:`loadgen.oracle`,
docs/protocol.md "Checking reads"): a read that returns a value superseded
by a write acknowledged before it was sent is ``stale``; one that returns a
value no write of the run wrote (malformed, another key's, a counter never
issued, bad padding, a refused write's) is ``wrong``.  What a key held
before the run — absent, or an earlier run's value (same shape, another run
tag: counted as ``other_run_values``) — is a candidate until this run's
first acknowledged write of the key.  Both count as errors.  With
``record`` set the history is also written there (loadgen.history's
JSON Lines), so a launcher can judge the merged histories of every client
host in one timeline (``verify`` off in each: one host's history alone
would take another host's writes for values nobody wrote).

Load phase.  ``load`` writes the ``load_keys`` hottest keys (all of them if
the key space is smaller) once, with counter 0, before the timed run: a
100 M-key space cannot be loaded in a demo, and a read of a key that was
never written correctly returns absent.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from client_lib.client import AsyncClient, Resolver
from distcache.cluster import Cluster
from distcache.errors import DistCacheError, RequestTimeoutError, ServerError
from distcache.wire import HEADER_LEN, MAX_DATAGRAM
from loadgen.history import get_line, put_line
from loadgen.oracle import Oracle, Verdict, feed
from loadgen.values import earlier_runs, history_value, key_of, make_value
from simulator.workload import DEFAULT_HEAD, Zipf

MAX_LOAD_VALUE = 1024  # with a load generator's key, a value this long still fits one datagram

MAX_KEYS = 100_000_000
_BATCH = 4096
_TOP = 16  # ranks whose request counts the report keeps (skew check)


@dataclass
class BenchConfig:
    keys: int = 100_000
    zipf: float = 0.99  # 0 = uniform
    read_ratio: float = 0.95
    value_size: int = 64
    concurrency: int = 32  # requests in flight (with rate: at most)
    rate: float | None = None  # open loop: issue ops at this many per second (None: closed loop, concurrency)
    duration: float | None = 10.0  # seconds; ignored when ops is set
    ops: int | None = None
    load: bool = True
    load_keys: int = 10_000
    seed: int = 1
    prefix: str = "key"
    verify: bool = True  # judge the reads here (off against a plain echo server, or when a launcher merges hosts)
    run_tag: str | None = None  # tag written into values; None = random per run (8 hex digits)
    record: str = ""  # write the run's history here (JSON Lines, loadgen.history's format)
    start_at: int = 0  # CLOCK_MONOTONIC ns at which the timed phase starts (several hosts start together); 0: now

    def validate(self) -> None:
        if not 1 <= self.keys <= MAX_KEYS:
            raise ValueError(f"--keys must be 1..{MAX_KEYS}")
        if not 0 <= self.zipf < 10:
            raise ValueError("--zipf must be >= 0 (0 = uniform, 0.99 = the paper's skew)")
        if not 0 <= self.read_ratio <= 1:
            raise ValueError("--read-ratio must be within 0..1")
        if not 1 <= self.value_size <= MAX_LOAD_VALUE:
            raise ValueError(f"--value-size must be 1..{MAX_LOAD_VALUE} bytes (≤128 can be cached by switches)")
        if self.concurrency < 1:
            raise ValueError("--concurrency must be >= 1")
        if self.rate is not None and not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError("--rate must be > 0 ops/s (omit it for a closed loop)")
        if self.ops is None and (self.duration is None or not (self.duration > 0 and math.isfinite(self.duration))):
            raise ValueError("give --duration SECONDS > 0 or --ops N")
        if self.ops is not None and self.ops < 0:
            raise ValueError("--ops must be >= 0")
        if self.load_keys < 0:
            raise ValueError("--load-keys must be >= 0")
        if self.run_tag is not None and (not self.run_tag or "#" in self.run_tag):
            raise ValueError("run_tag must be non-empty and must not contain '#'")
        if self.start_at < 0:
            raise ValueError("start_at must be a CLOCK_MONOTONIC time in ns, or 0 for now")
        longest = len(f"{self.prefix}{self.keys - 1}".encode())
        if HEADER_LEN + longest + self.value_size > MAX_DATAGRAM:
            raise ValueError(
                f"prefix too long: a {longest}-byte key with a {self.value_size}-byte value does not fit one datagram"
            )


@dataclass
class Second:
    """What completed during one second of the run (``t`` = seconds since start, 0-based)."""

    t: int
    ops: int = 0
    reads: int = 0
    hits: int = 0
    writes: int = 0
    errors: int = 0
    span: float = 1.0  # seconds this covers: 1 except for the run's last, partial second
    read_p99_us: float = 0.0  # of the reads that ended in this second (failed ones: until the client gave up)
    write_p99_us: float = 0.0  # likewise of the writes

    @property
    def rate(self) -> float:
        return self.ops / self.span if self.span > 0 else 0.0

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.reads if self.reads else 0.0


@dataclass
class Report:
    config: dict
    run_tag: str
    loaded_keys: int
    load_seconds: float
    seconds: float
    ops: int  # = reads + writes (every request issued and finished, failed ones included)
    reads: int  # = hits + misses + failed_reads
    writes: int  # = acked_writes + failed_writes
    hits: int  # reads answered by a switch cache
    misses: int  # reads answered by a storage server (absent ones included)
    absent: int  # misses that found no value (keys never written: correct)
    failed_reads: int  # no usable reply (timeout, server error)
    failed_writes: int
    other_run_values: int
    stale: int  # reads of a superseded value (loadgen.oracle); -1: not judged here (verify off)
    wrong: int  # reads of a value no write of the run wrote; -1: not judged here
    throughput: float  # ops/s
    hit_ratio: float
    latency_us: dict  # {"all"|"hit"|"miss"|"write": {"count", "mean", "p50", "p99", "p999"}}
    per_second: list[dict]  # Second as dicts, with hit_ratio
    errors: dict[str, int]  # kind -> count: stale, wrong, timeout, server_error, backlog, ...
    top_keys: list[dict]  # the hottest ranks: {"rank", "key", "requests", "share", "expected_share"}
    findings: list[str]  # the first reads the oracle found stale or wrong, and why

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def to_dict(self) -> dict:
        d = asdict(self)
        d["error_count"] = self.error_count
        return d


def percentiles(lat: list[float]) -> dict:
    if not lat:
        return {"count": 0, "mean": None, "p50": None, "p99": None, "p999": None}
    a = np.asarray(lat) * 1e6
    p50, p99, p999 = np.percentile(a, [50, 99, 99.9])
    return {
        "count": len(lat),
        "mean": round(float(a.mean()), 1),
        "p50": round(float(p50), 1),
        "p99": round(float(p99), 1),
        "p999": round(float(p999), 1),
    }


class Judge:
    """The staleness oracle of the runs of one process: a workload session judges each run against the
    runs before it (their values are its own, not an earlier run's), one run alone against nothing."""

    def __init__(self) -> None:
        self.tags: set[str] = set()  # the run tags of the runs judged here
        self.oracle = Oracle(earlier_runs(self.tags))


class _OpStream:
    """Shared source of (is_read, rank), drawn in numpy batches."""

    def __init__(self, cfg: BenchConfig, zipf: Zipf, rng: np.random.Generator) -> None:
        self.cfg, self.zipf, self.rng = cfg, zipf, rng
        self.ranks: list[int] = []
        self.reads: list[bool] = []
        self.i = 0
        self.issued = 0
        self.top = np.zeros(_TOP, dtype=np.int64)

    def next(self) -> tuple[bool, int]:
        if self.i == len(self.ranks):
            ranks = self.zipf.sample(_BATCH, self.rng)
            self.top += np.bincount(ranks[ranks < _TOP], minlength=_TOP)[:_TOP]
            self.ranks = ranks.tolist()
            self.reads = (self.rng.random(_BATCH) < self.cfg.read_ratio).tolist()
            self.i = 0
        i = self.i
        self.i += 1
        self.issued += 1
        return self.reads[i], self.ranks[i]

    def drawn_top(self) -> np.ndarray:
        """Counts of the hottest ranks among the ops actually issued (unused batch tail removed)."""
        top = self.top.copy()
        for r in self.ranks[self.i :]:
            if r < _TOP:
                top[r] -= 1
        return top


class _Bench:
    def __init__(
        self,
        client: AsyncClient,
        cfg: BenchConfig,
        on_second: Callable[[Second], None] | None,
        on_load: Callable[[int, int], None] | None,
        judge: Judge,
    ) -> None:
        self.client, self.cfg = client, cfg
        self.on_second, self.on_load = on_second, on_load
        self.run = cfg.run_tag or os.urandom(4).hex()
        self.judge = judge
        judge.tags.add(self.run)
        self.history: list[dict] = []  # every operation, loadgen.history's format (the oracle's input)
        self.rng = np.random.default_rng(cfg.seed)
        self.zipf = Zipf(cfg.keys, cfg.zipf, head=min(DEFAULT_HEAD, cfg.keys))
        self.loaded = 0
        self.issued: dict[int, int] = {}  # rank -> highest write counter issued this run
        self.lat: dict[str, list[float]] = {"hit": [], "miss": [], "write": [], "fail": []}
        self.errors: Counter[str] = Counter()
        self.n: Counter[str] = Counter()
        self.seconds: list[Second] = []
        self.t0 = 0.0

    # -- phases ---------------------------------------------------------------------
    async def load(self) -> float:
        cfg = self.cfg
        n = min(cfg.load_keys, cfg.keys) if cfg.load else 0
        start = time.perf_counter()
        nxt = 0
        done = 0

        async def worker() -> None:
            nonlocal nxt, done
            while nxt < n:
                rank = nxt
                nxt += 1
                key = key_of(rank, cfg.prefix)
                value = make_value(key, self.run, 0, cfg.value_size)
                call = time.monotonic_ns()
                try:
                    await self.client.put(key, value)
                except DistCacheError as e:
                    self._record_write(key, value, call, e)
                    raise
                self._record_write(key, value, call)
                done += 1
                if self.on_load and (done % 1000 == 0 or done == n):
                    self.on_load(done, n)

        await asyncio.gather(*(worker() for _ in range(min(cfg.concurrency, max(n, 1)))))
        self.loaded = n
        return time.perf_counter() - start

    async def timed(self) -> float:
        cfg = self.cfg
        stream = self.stream = _OpStream(cfg, self.zipf, self.rng)
        if cfg.start_at:
            await asyncio.sleep(max(0.0, (cfg.start_at - time.monotonic_ns()) / 1e9))
        self.t0 = time.perf_counter()
        deadline = math.inf if cfg.ops is not None else self.t0 + float(cfg.duration or 0)
        limit = cfg.ops if cfg.ops is not None else math.inf
        self.seconds = [Second(0)]
        self._sec_lat: dict[str, list[float]] = {"read": [], "write": []}  # the current second's latencies
        stop = asyncio.Event()
        ticker = asyncio.create_task(self._tick(stop))

        async def one() -> None:
            is_read, rank = stream.next()
            if is_read:
                await self._read(rank)
            else:
                await self._write(rank)

        async def worker() -> None:
            while stream.issued < limit and time.perf_counter() < deadline:
                await one()

        try:
            if cfg.rate is None:
                await asyncio.gather(*(worker() for _ in range(cfg.concurrency)))
            else:
                await self._open_loop(one, cfg.rate, deadline, limit)
        finally:
            stop.set()
            await ticker
        elapsed = time.perf_counter() - self.t0
        return elapsed

    async def _open_loop(
        self, one: Callable[[], Coroutine[object, object, None]], rate: float, deadline: float, limit: float
    ) -> None:
        """Issue ops on a fixed schedule (i / rate seconds after the start), whatever the replies do.

        What a saturation search needs: a closed loop slows down with the system and never
        shows the overload.  An op due while ``concurrency`` are in flight is not sent and
        counts as a ``backlog`` error: the system (or this generator) is not keeping up.
        """
        in_flight: set[asyncio.Task] = set()
        due = 0
        while due < limit:
            now = time.perf_counter()
            if now >= deadline:
                break
            target = int((now - self.t0) * rate) + 1  # ops due by now
            while due < target and due < limit:
                due += 1
                if len(in_flight) >= self.cfg.concurrency:
                    self._error("backlog")
                    continue
                t = asyncio.create_task(one())
                in_flight.add(t)
                t.add_done_callback(in_flight.discard)
            await asyncio.sleep(min(0.002, max(0.0, deadline - time.perf_counter())))
        if in_flight:
            await asyncio.gather(*in_flight)

    async def _tick(self, stop: asyncio.Event) -> None:
        """Close each second: report it and open the next."""
        while True:
            t = len(self.seconds)
            try:
                await asyncio.wait_for(stop.wait(), max(0.0, self.t0 + t - time.perf_counter()))
            except TimeoutError:
                self._close(self.seconds[-1])
                self.seconds.append(Second(t))
                if self.on_second:
                    self.on_second(self.seconds[t - 1])
                continue
            last = self.seconds[-1]
            last.span = round(min(1.0, time.perf_counter() - self.t0 - last.t), 3)
            self._close(last)
            if self.on_second and last.ops:
                self.on_second(last)
            return

    def _sec(self) -> Second:
        return self.seconds[-1]

    def _close(self, sec: Second) -> None:
        """The second's tail latencies, from what ended in it (then the next second starts afresh)."""
        for what, lat in self._sec_lat.items():
            if lat:
                setattr(sec, f"{what}_p99_us", round(float(np.percentile(np.asarray(lat) * 1e6, 99)), 1))
            lat.clear()

    # -- operations -----------------------------------------------------------------
    async def _read(self, rank: int) -> None:
        key = key_of(rank, self.cfg.prefix)
        start, call = time.perf_counter(), time.monotonic_ns()
        try:
            r = await self.client.get_reply(key)
        except DistCacheError as e:
            self._fail("read", e, time.perf_counter() - start)
            return
        lat = time.perf_counter() - start
        self.history.append(get_line(key, history_value(r.value), call, time.monotonic_ns(), r.served_by, r.target))
        sec = self._sec()
        sec.ops += 1
        sec.reads += 1
        self._sec_lat["read"].append(lat)
        self.n["reads"] += 1
        if r.cached:
            sec.hits += 1
            self.n["hits"] += 1
            self.lat["hit"].append(lat)
        else:
            self.n["misses"] += 1
            self.lat["miss"].append(lat)
        if r.value is None:
            self.n["absent"] += 1
        elif self.judge.oracle.initial(key, r.value):  # a well-formed value of an earlier run
            self.n["other_run"] += 1

    def _record_write(self, key: str, value: bytes, call: int, failed: DistCacheError | None = None) -> None:
        """A write in the history: acknowledged, refused (ERROR: nothing written) or of unknown outcome (no
        reply after the client's whole retry span, which ends now)."""
        outcome = "ok" if failed is None else "unknown" if isinstance(failed, RequestTimeoutError) else "error"
        self.history.append(put_line(key, history_value(value) or "", call, time.monotonic_ns(), outcome))

    async def _write(self, rank: int) -> None:
        key = key_of(rank, self.cfg.prefix)
        n = self.issued[rank] = self.issued.get(rank, 0) + 1
        value = make_value(key, self.run, n, self.cfg.value_size)
        start, call = time.perf_counter(), time.monotonic_ns()
        try:
            await self.client.put(key, value)
        except DistCacheError as e:
            self._record_write(key, value, call, e)
            self._fail("write", e, time.perf_counter() - start)
            return
        self._record_write(key, value, call)
        self.lat["write"].append(time.perf_counter() - start)
        self._sec_lat["write"].append(self.lat["write"][-1])
        sec = self._sec()
        sec.ops += 1
        sec.writes += 1
        self.n["writes"] += 1

    def _fail(self, what: str, e: DistCacheError, lat: float) -> None:
        kind = (
            "timeout"
            if isinstance(e, RequestTimeoutError)
            else "server_error"
            if isinstance(e, ServerError)
            else type(e).__name__
        )
        self.n[f"failed_{what}s"] += 1
        self.n[f"{what}s"] += 1
        sec = self._sec()
        sec.ops += 1
        if what == "read":
            sec.reads += 1
        else:
            sec.writes += 1
        self._sec_lat[what].append(lat)
        self.lat["fail"].append(lat)
        self._error(kind)

    def _error(self, kind: str) -> None:
        self.errors[kind] += 1
        self._sec().errors += 1

    # -- report ---------------------------------------------------------------------
    def judged(self) -> Verdict | None:
        """The oracle's verdict on this run's reads (None with ``verify`` off); the history goes to ``record``."""
        if self.cfg.record:
            Path(self.cfg.record).write_text("".join(json.dumps(line) + "\n" for line in self.history))
        if not self.cfg.verify:
            return None
        feed(self.judge.oracle, self.history)
        verdict = self.judge.oracle.verdict()
        for kind in ("stale", "wrong"):
            if getattr(verdict, kind):
                self.errors[kind] += getattr(verdict, kind)
        return verdict

    def report(self, load_seconds: float, elapsed: float) -> Report:
        verdict = self.judged()
        n = self.n
        ops = n["reads"] + n["writes"]
        all_lat = self.lat["hit"] + self.lat["miss"] + self.lat["write"]
        issued = max(self.stream.issued, 1)
        top = self.stream.drawn_top()
        top_keys = [
            {
                "rank": r,
                "key": key_of(r, self.cfg.prefix),
                "requests": int(top[r]),
                "share": round(int(top[r]) / issued, 5),
                "expected_share": round(float(self.zipf.p[r]), 5),
            }
            for r in range(min(_TOP, self.cfg.keys, 8))
        ]
        seconds = [s for s in self.seconds if s.ops or s.t < int(elapsed)]
        return Report(
            config=asdict(self.cfg),
            run_tag=self.run,
            loaded_keys=self.loaded,
            load_seconds=round(load_seconds, 3),
            seconds=round(elapsed, 3),
            ops=ops,
            reads=n["reads"],
            writes=n["writes"],
            hits=n["hits"],
            misses=n["misses"],
            absent=n["absent"],
            failed_reads=n["failed_reads"],
            failed_writes=n["failed_writes"],
            other_run_values=n["other_run"],
            stale=verdict.stale if verdict else -1,
            wrong=verdict.wrong if verdict else -1,
            throughput=round(ops / elapsed, 1) if elapsed > 0 else 0.0,
            hit_ratio=round(n["hits"] / n["reads"], 4) if n["reads"] else 0.0,
            latency_us={
                "all": percentiles(all_lat),
                "hit": percentiles(self.lat["hit"]),
                "miss": percentiles(self.lat["miss"]),
                "write": percentiles(self.lat["write"]),
            },
            per_second=[{**asdict(s), "hit_ratio": round(s.hit_ratio, 4)} for s in seconds],
            errors=dict(self.errors),
            top_keys=top_keys,
            findings=[str(f) for f in verdict.findings] if verdict else [],
        )


async def run_bench_async(
    cluster: Cluster | str | Path,
    cfg: BenchConfig,
    *,
    resolve: Resolver | None = None,
    timeout: float = 0.5,
    retries: int = 3,
    on_second: Callable[[Second], None] | None = None,
    on_load: Callable[[int, int], None] | None = None,
    judge: Judge | None = None,
) -> Report:
    """Load (if asked), run the timed phase, and report; see the module docstring.  ``judge``: the oracle of
    earlier runs to judge this one against (a session's), else one of this run alone."""
    cfg.validate()
    async with AsyncClient(cluster, timeout=timeout, retries=retries, resolve=resolve) as client:
        b = _Bench(client, cfg, on_second, on_load, judge or Judge())
        load_seconds = await b.load()
        elapsed = await b.timed()
        return b.report(load_seconds, elapsed)


def run_bench(cluster: Cluster | str | Path, cfg: BenchConfig, **kw: object) -> Report:
    """Blocking wrapper of :func:`run_bench_async` (its own event loop)."""
    return asyncio.run(run_bench_async(cluster, cfg, **kw))  # type: ignore[arg-type]
