"""Storage-server shim throughput and write latency, next to redis-benchmark: ``make bench-shim``.

Why: every cache miss and every write of a DistCache deployment goes through
the shim (``shim/``), a single asyncio process that speaks DistCache over UDP
in front of redis-server.  This harness measures what that costs against the
ceiling the same Redis reaches without the shim, on one machine and loopback
only, so a change to the shim can be judged by a ratio rather than by
absolute figures that depend on the machine.

What it runs, all of it its own and all of it stopped at the end (also on
Ctrl-C): a redis-server on a Unix socket in a temp dir (no TCP port, no
persistence); the shim as ``python -m shim`` on 127.0.0.1:8888 with its control
API on a Unix socket and ``--coherence-peer`` pointing at a UDP peer that
plays the switches (it reflects INVALIDATE/UPDATE as INVALIDATE_ACK/UPDATE_ACK,
like the tests' SwitchPeer); several load-generator processes running
``client_lib.AsyncClient``; a trivial asyncio UDP echo server.

What it measures:

* the load generators' own ceiling: GETs at the same concurrency against the
  echo server, which decodes each request and answers a valid reply, so a
  reader can see whether the generators, not the shim, limit the figures;
* shim GET throughput (keys preloaded, 32-byte values) and PUT throughput to
  keys no switch caches (no coherence traffic), each for ``--seconds``, with
  the latency under load and each process's CPU use over the window;
* ``redis-benchmark -t get,set -d 32`` on the same Redis at the same concurrency;
* write latency from one sequential client: PUT of an uncached key versus
  PUT of a key cached by switch 1 (made so with the shim's control API
  ``Populate``), which runs the two-phase coherence protocol with the peer.

Then, as root with Mininet (``--no-switch`` skips it): client-observed read
latency through the fabric for cache hits versus misses.  A small deployment
(dcnet.deploy: softswitch, agents, controller, shims, Redis; 2 spines, 2
storage racks, 16 cache slots) warms its caches with a Zipf-0.99 workload,
then one client reads sequentially, so the latencies are round trips, not
queueing: a hit is answered by a switch, a miss goes on to the shim and Redis.

``--profile DIR`` samples the shim with py-spy during the GET phase and
summarizes where a GET's time goes (``--profile-phase put``: a PUT's).  The last stdout line is
``shim_get_vs_redis=R shim_put_vs_redis=R hit_p50_us=N miss_p50_us=N uncached_put_p50_us=N cached_put_p50_us=N``
(``hit_p50_us=na miss_p50_us=na`` when the switch phase did not run;
``--json``: one JSON object with those keys and every figure instead).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing as mp
import os
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table

from bench.procstat import cpu_seconds, cpu_ticks
from client_lib import AsyncClient, Client, DistCacheError
from distcache.cluster import Cluster
from distcache.hashing import wire_key
from distcache.wire import COHERENCE_OPS, DC_PORT, HEADER_FIELDS, Message, Op, Status, WireError, decode, encode
from harness.processes import die_with_parent
from harness.profile import summarize_profile
from harness.redis import redis_argv, wait_for_redis

HOST = "127.0.0.1"
VALUE = b"v" * 32  # the value size redis-benchmark is run with (-d 32)
GET_KEYS = 1000  # keys preloaded for the GET phase
WARMUP = 0.5  # seconds of load before each measured window (Redis connection pool, caches), not counted
REPLY_TIMEOUT = 1.0  # a generator's request timeout; a lost request is counted and its task moves on
LATENCY_OPS = 500  # sequential PUTs per latency figure
PROFILE_RATE = 200  # py-spy samples per second
CTX = mp.get_context("spawn")  # fresh interpreters: no inherited event loop, gRPC channel or rich thread
err = Console(stderr=True, log_path=False)


# -- helper processes (spawned) --------------------------------------------------------------------------------


def _quiet_child() -> None:
    """Children leave Ctrl-C to the harness, which stops them in order (no tracebacks from every process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def coherence_peer(conn: Connection) -> None:
    """Play the switches' end of coherence: reflect INVALIDATE/UPDATE as acks, keeping seq, key and target.

    A separate process, so an ack never waits for the harness's own work (one GIL); it exits when the
    harness goes away (its parent changes), so a killed harness leaves no peer behind.
    """
    _quiet_child()
    parent = os.getppid()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((HOST, 0))
    sock.settimeout(0.5)
    conn.send(sock.getsockname()[1])
    while os.getppid() == parent:
        try:
            data, addr = sock.recvfrom(4096)
            msg = decode(data)
        except (TimeoutError, WireError):
            continue
        if msg.op in COHERENCE_OPS:
            msg.op = msg.op.reply()
            sock.sendto(encode(msg), addr)


class _Echo(asyncio.DatagramProtocol):
    """Answers every request with a valid reply (decode + encode, as the cheapest possible server does)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.DatagramTransport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            msg = decode(data)
        except WireError:
            return
        self.transport.sendto(encode(msg.reply(Status.OK, b"x")), addr)


async def _echo_main(conn: Connection) -> None:
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(_Echo, local_addr=(HOST, 0))
    conn.send(transport.get_extra_info("sockname")[1])
    parent = os.getppid()
    while os.getppid() == parent:
        await asyncio.sleep(0.5)


def echo_server(conn: Connection) -> None:
    """The reference server of the generator-ceiling phase (its own process, like the shim)."""
    _quiet_child()
    asyncio.run(_echo_main(conn))


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
    _quiet_child()
    with contextlib.suppress(EOFError, BrokenPipeError):
        while (spec := conn.recv()) is not None:
            conn.send(asyncio.run(_load(index, spec)))


# -- process bookkeeping -------------------------------------------------------------------------------------


class Processes:
    """Every process the harness starts, stopped in reverse order by :meth:`close` (also after Ctrl-C)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, subprocess.Popen | BaseProcess]] = []

    def popen(self, name: str, argv: Sequence[str], **kw: object) -> subprocess.Popen:
        proc = subprocess.Popen(list(argv), start_new_session=True, preexec_fn=die_with_parent, **kw)
        self.items.append((name, proc))
        return proc

    def spawn(self, name: str, target: Callable[..., None], *args: object) -> tuple[BaseProcess, Connection]:
        here, there = CTX.Pipe()
        proc = CTX.Process(target=target, args=(there, *args), name=name, daemon=True)
        proc.start()
        there.close()
        self.items.append((name, proc))
        return proc, here

    def stop(self, proc: subprocess.Popen | BaseProcess, grace: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; the shim exits cleanly on SIGTERM (py-spy/cProfile)."""
        if isinstance(proc, subprocess.Popen):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(grace)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        elif proc.is_alive():
            proc.terminate()
            proc.join(grace)
            if proc.is_alive():
                proc.kill()
                proc.join()

    def close(self) -> None:
        while self.items:
            _, proc = self.items.pop()
            with contextlib.suppress(Exception):
                self.stop(proc)


def machine_busy() -> float:
    """CPU seconds all cores spent busy since boot (/proc/stat): the machine may be shared, and what other
    processes took during a phase is what a reader needs to trust or discount its figures."""
    ticks = cpu_ticks()
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # minus idle and iowait


def percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


# -- the environment -----------------------------------------------------------------------------------------


@dataclass
class Env:
    """Handles on the redis-server, shim, coherence peer and generators of one run."""

    tmp: Path
    redis_sock: Path
    redis: subprocess.Popen
    shim: subprocess.Popen
    shim_log: Path
    control: str
    peer_port: int
    generators: list[tuple[BaseProcess, Connection]]


def start_redis(procs: Processes, tmp: Path) -> tuple[subprocess.Popen, Path]:
    sock = tmp / "redis.sock"
    proc = procs.popen("redis-server", redis_argv(sock, tmp), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_redis(sock, proc, 10.0)
    return proc, sock


def shim_command(cluster_file: Path, redis_sock: Path, control: str, peer_port: int, log_file: Path) -> list[str]:
    """How the shim is started: exactly as a deployment starts it, but on loopback with a coherence peer."""
    return [
        sys.executable,
        "-m",
        "shim",
        "--cluster",
        str(cluster_file),
        "--server",
        "r0s0",
        "--listen",
        HOST,
        "--redis-url",
        f"unix://{redis_sock}",
        "--control",
        control,
        "--coherence-peer",
        f"{HOST}:{peer_port}",
        "--fresh",
        "--log-file",
        str(log_file),
    ]


def start_shim(procs: Processes, argv: list[str], log_file: Path) -> subprocess.Popen:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # a clear message beats the shim's OSError
        try:
            probe.bind((HOST, DC_PORT))
        except OSError as e:
            raise RuntimeError(f"UDP {HOST}:{DC_PORT} is taken ({e.strerror}); another bench-shim?") from None
    proc = procs.popen(
        "shim",
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            if line.startswith("shim ready"):
                return proc
            if not line and proc.poll() is not None:
                break
    tail = log_file.read_text()[-2000:] if log_file.exists() else ""
    raise RuntimeError(f"the shim did not come up (exit code {proc.poll()}); its log ends:\n{tail}")


def start(procs: Processes, tmp: Path, n_generators: int) -> Env:
    """Bring everything up; the generators are spawned first as they take longest to import."""
    generators = [procs.spawn(f"gen{i}", load_generator, i) for i in range(n_generators)]
    _, peer_conn = procs.spawn("coherence-peer", coherence_peer)
    redis_proc, redis_sock = start_redis(procs, tmp)
    if not peer_conn.poll(30):
        raise RuntimeError("the coherence peer did not start")
    peer_port = peer_conn.recv()
    cluster_file = tmp / "cluster.json"
    Cluster().save(cluster_file)
    control, log_file = f"unix:{tmp / 'shim.sock'}", tmp / "shim.log"
    shim = start_shim(procs, shim_command(cluster_file, redis_sock, control, peer_port, log_file), log_file)
    return Env(tmp, redis_sock, redis_proc, shim, log_file, control, peer_port, generators)


def preload(env: Env) -> tuple[str, ...]:
    """Store the GET phase's keys straight into Redis under their wire keys, where the shim looks them up."""
    import redis

    keys = tuple(f"bench:get:{i}" for i in range(GET_KEYS))
    r = redis.Redis(unix_socket_path=str(env.redis_sock))
    with r.pipeline(transaction=False) as p:
        for k in keys:
            p.set(wire_key(k), VALUE)
        p.execute()
    r.close()
    return keys


# -- phases --------------------------------------------------------------------------------------------------


@dataclass
class LoadResult:
    """One timed phase: throughput over the measured window, latency under load, CPU use of each process."""

    ops_per_s: float
    p50_us: float
    p99_us: float
    errors: dict[str, int] = field(default_factory=dict)
    cpu_percent: dict[str, float] = field(default_factory=dict)  # 100 = one core busy for the whole window
    cpu_us_per_op: dict[str, float] = field(default_factory=dict)  # CPU a request costs each process: comparable
    # across machines where throughput is not (the generators share the same cores)


def measure_window(
    watch: dict[str, int],
    progress: Progress,
    bar: TaskID,
    t0: float,
    seconds: float,
    during: Callable[[], subprocess.Popen] | None = None,
) -> tuple[dict[str, float], float, subprocess.Popen | None]:
    """CPU % of each watched pid, and of everything else, from now until ``t0 + WARMUP + seconds``.

    ``during`` starts a helper as the window opens (py-spy); its CPU is watched too and it is returned.
    """
    cpu0 = {name: cpu_seconds(pid) for name, pid in watch.items()}
    busy0, w0 = machine_busy(), time.monotonic()
    helper = during() if during is not None else None
    if helper is not None:
        watch["py-spy"], cpu0["py-spy"] = helper.pid, 0.0
    while (elapsed := time.monotonic() - t0) < WARMUP + seconds:
        progress.update(bar, completed=elapsed)
        time.sleep(0.05)
    window = time.monotonic() - w0
    cpu = {name: 100 * (cpu_seconds(pid) - cpu0[name]) / window for name, pid in watch.items()}
    return cpu, 100 * (machine_busy() - busy0) / window - sum(cpu.values()), helper


def run_load(
    env: Env,
    progress: Progress,
    label: str,
    port: int,
    op: str,
    concurrency: int,
    seconds: float,
    watch: dict[str, int],
    keys: tuple[str, ...] = (),
    during: Callable[[], subprocess.Popen] | None = None,
) -> LoadResult:
    """Run one phase on every generator at once and gather it; ``watch`` names the pids whose CPU to report.

    ``during`` is called when the measured window opens and returns a helper it started (py-spy), whose CPU
    is reported too (it shares the cores) and which gets SIGINT when the window closes (py-spy then writes
    what it sampled, so the profile covers the window exactly).
    """
    n = len(env.generators)
    split = [concurrency // n + (i < concurrency % n) for i in range(n)]
    start_at = time.time() + 0.3
    for (_, conn), tasks in zip(env.generators, split, strict=True):
        conn.send(LoadSpec(port, op, max(1, tasks), seconds, start_at, keys))
    watch = {**watch, **{f"gen{i}": p.pid for i, (p, _) in enumerate(env.generators) if p.pid}}
    bar = progress.add_task(label, total=seconds + WARMUP)
    time.sleep(max(0.0, start_at - time.time()))
    t0 = time.monotonic()
    while (elapsed := time.monotonic() - t0) < WARMUP:
        progress.update(bar, completed=elapsed)
        time.sleep(0.05)
    cpu, others, helper = measure_window(watch, progress, bar, t0, seconds, during)
    if helper is not None:
        helper.send_signal(signal.SIGINT)
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    for proc, conn in env.generators:
        if not conn.poll(REPLY_TIMEOUT + 10):
            raise RuntimeError(f"load generator {proc.name} did not report (exit code {proc.exitcode})")
        res = conn.recv()
        latencies += res["latencies"]
        errors.update(res["errors"])
    progress.update(bar, completed=seconds + WARMUP)
    latencies.sort()
    gens = [k for k in cpu if k.startswith("gen")]
    cpu = {k: v for k, v in cpu.items() if k not in gens} | {
        "generators": sum(cpu[k] for k in gens),
        "others": max(0.0, others),
    }
    rate = len(latencies) / seconds
    per_op = {k: round(v * 1e4 / rate, 1) for k, v in cpu.items() if k not in ("others", "py-spy") and rate}
    return LoadResult(
        rate,
        1e6 * percentile(latencies, 0.5),
        1e6 * percentile(latencies, 0.99),
        dict(errors),
        {k: round(v, 1) for k, v in cpu.items()},
        per_op,
    )


@dataclass
class RedisBench:
    get_rps: float
    set_rps: float
    requests: int  # per test (GET, SET)
    cpu_percent: dict[str, float]
    cpu_us_per_op: dict[str, float]


def _rps(output: str) -> dict[str, float]:
    """GET/SET requests per second from ``redis-benchmark -q`` (progress lines end in \\r, results in \\n)."""
    found = {}
    for m in re.finditer(r"(?:^|[\r\n])\s*([A-Z]+): ([\d.]+) requests per second", output):
        found[m.group(1)] = float(m.group(2))
    return found


def redis_benchmark(env: Env, concurrency: int, seconds: float, progress: Progress) -> RedisBench:
    """Redis's own ceiling at the same concurrency and value size, sized by a short probe to last ~seconds."""
    base = ["redis-benchmark", "-s", str(env.redis_sock), "-c", str(concurrency), "-q", "-d", "32"]
    bar = progress.add_task("redis-benchmark", total=None)
    probe = _rps(
        subprocess.run(
            [*base, "-t", "get", "-n", "20000"], capture_output=True, text=True, timeout=60, check=True
        ).stdout
    )
    n = max(20000, int(probe.get("GET", 20000) * seconds))
    ru0, cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_seconds(env.redis.pid)
    busy0, t0 = machine_busy(), time.monotonic()
    out = subprocess.run(
        [*base, "-t", "get,set", "-n", str(n)],
        capture_output=True,
        text=True,
        timeout=max(60.0, 20 * seconds),
        check=True,
    ).stdout
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    bench_cpu = (ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime) / wall * 100
    redis_cpu_s = cpu_seconds(env.redis.pid) - cpu0
    redis_cpu = redis_cpu_s / wall * 100
    others = 100 * (machine_busy() - busy0) / wall - bench_cpu - redis_cpu
    progress.update(bar, total=1, completed=1)
    rps = _rps(out)
    if "GET" not in rps or "SET" not in rps:
        raise RuntimeError(f"cannot read redis-benchmark's output:\n{out[-1000:]}")
    return RedisBench(
        rps["GET"],
        rps["SET"],
        n,
        {"redis": round(redis_cpu, 1), "redis-benchmark": round(bench_cpu, 1), "others": round(max(0.0, others), 1)},
        {
            "redis": round(1e6 * redis_cpu_s / (2 * n), 1),
            "redis-benchmark": round(bench_cpu / 100 * wall * 1e6 / (2 * n), 1),
        },
    )


@dataclass
class Latency:
    p50_us: float
    p99_us: float
    ops: int


def sequential(call: Callable[[], object], ops: int) -> Latency:
    for _ in range(20):  # warm-up: first requests pay for connections and code paths never run before
        call()
    lat = []
    for _ in range(ops):
        t0 = time.perf_counter()
        call()
        lat.append(time.perf_counter() - t0)
    lat.sort()
    return Latency(1e6 * percentile(lat, 0.5), 1e6 * percentile(lat, 0.99), ops)


def write_latency(env: Env, ops: int) -> tuple[dict[str, Latency], dict]:
    """PUT latency of an uncached key vs a key cached by switch 1 (two-phase coherence), one client, sequential.

    GET latency is measured too, as the round-trip floor both PUT figures sit on.
    """
    from distcache.rpc.shim import ShimLink  # gRPC: imported here, after every process is spawned

    cluster = Cluster()
    spine = cluster.spine(0).switch_id
    link = ShimLink(env.control)
    out: dict[str, Latency] = {}
    with Client(cluster, resolve=lambda _host: (HOST, DC_PORT), timeout=REPLY_TIMEOUT, retries=2) as c:
        c.put("bench:lat:hot", VALUE)
        state = link.populate(wire_key("bench:lat:hot"), spine, 0, 1)  # the tag a fresh agent gives slot 0
        if state != "valid":
            raise RuntimeError(f"Populate(bench:lat:hot, switch={spine}) answered {state!r}, expected 'valid'")
        out["get"] = sequential(lambda: c.get("bench:get:0"), ops)
        out["uncached_put"] = sequential(lambda: c.put("bench:lat:plain", VALUE), ops)
        before = link.stats()["coherence"]
        out["cached_put"] = sequential(lambda: c.put("bench:lat:hot", VALUE), ops)
        stats = link.stats()
    done = stats["coherence"]["invalidates"] - before["invalidates"]
    if done < ops:
        raise RuntimeError(f"only {done} invalidations for {ops} writes of a cached key: coherence did not run")
    return out, stats


# -- profile -------------------------------------------------------------------------------------------------


def py_spy() -> str | None:
    return shutil.which("py-spy") or next(
        (str(p) for p in [Path(sys.executable).parent / "py-spy"] if p.exists()), None
    )


CATEGORIES: tuple[tuple[str, Callable[[str, str], bool]], ...] = (
    # (label, predicate on a frame's function name and file as py-spy prints them, e.g. "asyncio/events.py").
    # A sample goes to the first category that any frame of its stack matches: a Redis read that ends in
    # asyncio's stream code is Redis time, an encode called from the read batch is encode time.
    ("wire decode (distcache.wire.decode)", lambda f, p: f == "decode" and p.endswith("distcache/wire.py")),
    (
        "wire encode (distcache.wire.encode + Message.reply)",
        lambda f, p: f in ("encode", "Message.reply") and p.endswith("distcache/wire.py"),
    ),
    ("Redis round trip (redis-py + hiredis, client side)", lambda _f, p: p.startswith("redis/") or "/redis/" in p),
    ("UDP sendto (syscall; loopback delivery included)", lambda f, _p: f.endswith("DatagramTransport.sendto")),
    ("UDP receive + dispatch (recvfrom, on_datagram)", lambda f, _p: f.endswith("DatagramTransport._read_ready")),
    ("epoll wait (idle: nothing ready)", lambda f, _p: f.endswith("Selector.select")),
    ("shim request logic (shim/*)", lambda _f, p: p.startswith("shim/")),
    ("event loop (asyncio scheduling, tasks)", lambda _f, p: p.startswith("asyncio/")),
)


def profiler(procs: Processes, spy: str, pid: int, seconds: float, out: Path) -> Callable[[], subprocess.Popen]:
    """A callable that starts py-spy on the shim for the measured window.

    py-spy pauses the shim for each sample (without that, stacks of a running asyncio loop come out torn),
    which costs the shim a few percent at PROFILE_RATE; ``--threads`` tells the main thread from gRPC's.
    run_load stops it with SIGINT when the window closes; ``-d`` is only a backstop.
    """

    def start() -> subprocess.Popen:
        return procs.popen(
            "py-spy",
            [
                spy,
                "record",
                "--threads",
                "-r",
                str(PROFILE_RATE),
                "-f",
                "raw",
                "-d",
                str(math.ceil(seconds) + 10),
                "-o",
                str(out),
                "-p",
                str(pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    return start


# -- report --------------------------------------------------------------------------------------------------


DCLOAD = Path(__file__).resolve().parents[1] / "build" / "dcload"  # tools/dcload, built by make deps
SEQ_OFFSET = sum(w for name, w in HEADER_FIELDS[: [n for n, _ in HEADER_FIELDS].index("seq")]) // 8


def compiled_load(
    progress: Progress,
    label: str,
    requests: list[bytes],
    concurrency: int,
    seconds: float,
    watch: dict[str, int],
    tmp: Path,
) -> LoadResult:
    """One phase driven by dcload (Go): the same requests, encoded here, at a fraction of the CPU per request."""
    reqs = tmp / f"dcload-{len(requests)}-{requests[0][1]}.hex"
    reqs.write_text("".join(r.hex() + "\n" for r in requests))
    bar = progress.add_task(label, total=seconds + WARMUP)
    proc = subprocess.Popen(
        [
            str(DCLOAD),
            "-target",
            f"{HOST}:{DC_PORT}",
            "-requests",
            str(reqs),
            "-seq-offset",
            str(SEQ_OFFSET),
            "-concurrency",
            str(concurrency),
            "-duration",
            f"{seconds}s",
            "-warmup",
            f"{WARMUP}s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    t0 = time.monotonic()
    time.sleep(WARMUP)
    cpu, others, _ = measure_window({**watch, "generators": proc.pid}, progress, bar, t0, seconds)
    out, errs = proc.communicate(timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"dcload failed: {errs.strip()}")
    res = json.loads(out)
    progress.update(bar, completed=seconds + WARMUP)
    rate = res["ops"] / seconds
    per_op = {k: round(v * 1e4 / rate, 1) for k, v in cpu.items() if rate}
    return LoadResult(
        rate,
        res["p50_us"],
        res["p99_us"],
        {"timeout": res["timeouts"]} if res["timeouts"] else {},
        {**{k: round(v, 1) for k, v in cpu.items()}, "others": round(max(0.0, others), 1)},
        per_op,
    )


# The switch phase's deployment: small enough for 2 cores, big enough that hits and misses both happen.
SWITCH_CLUSTER = Cluster(
    spines=2, storage_racks=2, client_racks=1, cache_slots=16, hh_threshold=4, insert_rate=20.0, insert_burst=20
)
SWITCH_KEYS = 2000


def switch_latency(seconds: float, progress: Progress) -> dict[str, Latency]:
    """Read latency of cache hits and misses as a client in a Mininet host sees them (module docstring)."""
    from dcnet.deploy import Deployment  # Mininet: imported only when this phase runs

    base = {"keys": SWITCH_KEYS, "zipf": 0.99, "read_ratio": 1.0, "value_size": 32, "load_keys": SWITCH_KEYS}
    bar = progress.add_task("switch path: hits vs misses", total=2)
    with (
        tempfile.TemporaryDirectory(prefix="bench-shim-net-") as run_dir,
        Deployment(SWITCH_CLUSTER, run_dir=Path(run_dir)) as dep,
    ):
        client = SWITCH_CLUSTER.client(0, 0)
        for _ in dep.bench(client, {**base, "concurrency": 8, "duration": 6}):  # fills the caches
            pass
        progress.update(bar, completed=1)
        report = None
        for msg in dep.bench(client, {**base, "concurrency": 1, "duration": seconds, "load": False}):
            report = msg if msg["type"] == "report" else report
        progress.update(bar, completed=2)
    if report is None or report["error_count"]:
        raise RuntimeError(f"the switch-path workload failed: {report and report['errors']}")
    lat = report["latency_us"]
    if not lat["hit"]["count"] or not lat["miss"]["count"]:
        raise RuntimeError(f"the switch-path workload saw no {'hit' if not lat['hit']['count'] else 'miss'}")
    return {kind: Latency(lat[kind]["p50"], lat[kind]["p99"], lat[kind]["count"]) for kind in ("hit", "miss")}


def summary_line(fig: dict) -> str:
    hit, miss = fig.get("hit_p50_us"), fig.get("miss_p50_us")
    return (
        f"shim_get_vs_redis={fig['shim_get_vs_redis']:.2f} shim_put_vs_redis={fig['shim_put_vs_redis']:.2f} "
        f"hit_p50_us={'na' if hit is None else f'{hit:.0f}'} miss_p50_us={'na' if miss is None else f'{miss:.0f}'} "
        f"uncached_put_p50_us={fig['uncached_put_p50_us']:.0f} cached_put_p50_us={fig['cached_put_p50_us']:.0f}"
    )


def render(fig: dict, out: Console) -> None:
    t = Table(
        title=f"shim vs redis-benchmark (concurrency {fig['config']['concurrency']}, "
        f"{fig['config']['procs']} generator process(es), {fig['config']['seconds']} s per phase)"
    )
    left = ("measurement", "CPU % (100 = 1 core)", "CPU µs per request")
    for col in ("measurement", "ops/s", "p50 µs", "p99 µs", "errors", *left[1:]):
        t.add_column(col, justify="left" if col in left else "right")
    fmt_cpu = lambda c: ", ".join(f"{k} {v:.0f}" for k, v in c.items())  # noqa: E731
    names = {
        "echo": "UDP echo server GET (generator ceiling)",
        "get": "shim GET (preloaded keys)",
        "put": "shim PUT (uncached keys)",
        "get_compiled": "shim GET, compiled generator",
        "put_compiled": "shim PUT, compiled generator",
    }
    for key, name in names.items():
        if key not in fig["load"]:
            continue
        r = fig["load"][key]
        errs = ", ".join(f"{k} {v}" for k, v in r["errors"].items()) or "0"
        t.add_row(
            name,
            f"{r['ops_per_s']:,.0f}",
            f"{r['p50_us']:.0f}",
            f"{r['p99_us']:.0f}",
            errs,
            fmt_cpu(r["cpu_percent"]),
            fmt_cpu(r["cpu_us_per_op"]),
        )
    rb = fig["redis_benchmark"]
    t.add_row(
        "redis-benchmark GET",
        f"{rb['get_rps']:,.0f}",
        "",
        "",
        "",
        fmt_cpu(rb["cpu_percent"]),
        fmt_cpu(rb["cpu_us_per_op"]) + " (GET+SET)",
    )
    t.add_row("redis-benchmark SET", f"{rb['set_rps']:,.0f}", "", "", "", "", "")
    out.print(t)
    lt = Table(title=f"sequential latency, one client ({fig['config']['latency_ops']} ops each)")
    for col in ("operation", "p50 µs", "p99 µs"):
        lt.add_column(col, justify="left" if col == "operation" else "right")
    for key, name in (
        ("echo_get", "GET, UDP echo server (round-trip floor)"),
        ("get", "shim GET (preloaded key)"),
        ("uncached_put", "shim PUT, key cached nowhere"),
        ("cached_put", "shim PUT, key cached by spine 1 (two-phase coherence)"),
    ):
        lat = fig["latency"][key]
        lt.add_row(name, f"{lat['p50_us']:.0f}", f"{lat['p99_us']:.0f}")
    for key, name in (
        ("hit", "GET through the fabric, cache hit (answered by a switch)"),
        ("miss", "GET through the fabric, cache miss (shim + Redis)"),
    ):
        if fig["switch_latency"]:
            lat = fig["switch_latency"][key]
            lt.add_row(name, f"{lat['p50_us']:.0f}", f"{lat['p99_us']:.0f}")
    out.print(lt)
    out.print(
        f"CPU 'others': processes not started by this harness (the machine may be shared); "
        f"load average before the run: {' '.join(map(str, fig['config']['loadavg_before']))}"
    )
    out.print(f"the summary's ratios use the {fig['generator']} generator's figures")
    out.print(
        f"shim GET / generator ceiling = {fig['shim_get_vs_ceiling']:.2f}"
        + (
            "  (close to 1: the generators may be what limits the shim figures)"
            if fig["shim_get_vs_ceiling"] > 0.8
            else "  (the generators have headroom: the shim is the limit)"
        )
    )
    if "profile" in fig:
        prof = fig["profile"]
        phase = fig["config"]["profile_phase"].upper()
        pt = Table(
            title=f"shim main thread during the {phase} phase: py-spy, {prof['samples']} samples (% of wall time)"
        )
        pt.add_column(f"where a {phase}'s time goes")
        pt.add_column("%", justify="right")
        for k, v in prof["category_percent"].items():
            pt.add_row(k, f"{v:.1f}")
        out.print(pt)
        for title, key in (("own time", "own_percent"), ("inclusive time", "inclusive_percent")):
            ft = Table(title=f"top functions by {title}")
            ft.add_column("function")
            ft.add_column("%", justify="right")
            for k, v in prof[key].items():
                ft.add_row(k, f"{v:.1f}")
            out.print(ft)


# -- main ----------------------------------------------------------------------------------------------------


def _sigterm(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # run the same cleanup as Ctrl-C


def bench(args: argparse.Namespace, procs: Processes, tmp: Path) -> dict:
    """Every phase, in an order that keeps phases from competing for the 2 cores: one thing loaded at a time."""
    load_before = os.getloadavg()
    with Progress(
        TextColumn("{task.description:<34}"), BarColumn(), TimeRemainingColumn(), console=err, transient=False
    ) as progress:
        err.log(f"starting redis-server, shim, coherence peer and {args.procs} load generator(s) in {tmp}")
        env = start(procs, tmp, args.procs)
        err.log(f"shim pid {env.shim.pid} on {HOST}:{DC_PORT}, coherence peer on {HOST}:{env.peer_port}")
        keys = preload(env)
        echo_proc, echo_conn = procs.spawn("echo", echo_server)
        if not echo_conn.poll(30):
            raise RuntimeError("the echo server did not start")
        echo_port = echo_conn.recv()
        load: dict[str, LoadResult] = {}
        load["echo"] = run_load(
            env,
            progress,
            "generator ceiling (UDP echo)",
            echo_port,
            "get",
            args.concurrency,
            args.seconds,
            {"echo server": echo_proc.pid or 0},
            keys,
        )
        with Client(Cluster(), resolve=lambda _host: (HOST, echo_port), timeout=REPLY_TIMEOUT, retries=2) as c:
            echo_latency = sequential(lambda: c.get("bench:get:0"), args.latency_ops)
        procs.stop(echo_proc)

        profile_raw, during = None, None
        spy = py_spy() if args.profile else None
        if args.profile and spy is None:
            err.log("[yellow]--profile needs py-spy: .venv/bin/pip install py-spy; running without[/]")
        if spy:
            args.profile.mkdir(parents=True, exist_ok=True)
            profile_raw = args.profile / f"shim-{args.profile_phase}.txt"
            during = profiler(procs, spy, env.shim.pid, args.seconds, profile_raw)
        watch = {"shim": env.shim.pid, "redis": env.redis.pid}
        load["get"] = run_load(
            env,
            progress,
            "shim GET",
            DC_PORT,
            "get",
            args.concurrency,
            args.seconds,
            watch,
            keys,
            during if args.profile_phase == "get" else None,
        )
        load["put"] = run_load(
            env,
            progress,
            "shim PUT (uncached)",
            DC_PORT,
            "put",
            args.concurrency,
            args.seconds,
            watch,
            (),
            during if args.profile_phase == "put" else None,
        )
        if DCLOAD.exists():  # a compiled generator leaves the CPU to the shim: the fairer figures
            gets = [encode(Message(op=Op.GET, key=wire_key(k))) for k in keys]
            puts = [encode(Message(op=Op.PUT, key=wire_key(f"bench:cput:{i}"), value=VALUE)) for i in range(4096)]
            load["get_compiled"] = compiled_load(
                progress, "shim GET (compiled generator)", gets, args.concurrency, args.seconds, watch, tmp
            )
            load["put_compiled"] = compiled_load(
                progress, "shim PUT (compiled generator)", puts, args.concurrency, args.seconds, watch, tmp
            )
        bar = progress.add_task("write latency (sequential)", total=None)
        latency, shim_stats = write_latency(env, args.latency_ops)
        latency = {"echo_get": echo_latency, **latency}
        progress.update(bar, total=1, completed=1)
        rb = redis_benchmark(env, args.concurrency, args.redis_seconds or min(3.0, args.seconds), progress)
        procs.close()  # the loopback phases are over: leave the cores to the deployment
        via_switch = switch_latency(max(args.seconds, 3.0), progress) if args.switch else None

    best_get = load.get("get_compiled", load["get"])
    best_put = load.get("put_compiled", load["put"])
    fig: dict = {
        "shim_get_vs_redis": round(best_get.ops_per_s / rb.get_rps, 2),
        "shim_put_vs_redis": round(best_put.ops_per_s / rb.set_rps, 2),
        "generator": "compiled (tools/dcload)" if "get_compiled" in load else "python",
        "uncached_put_p50_us": round(latency["uncached_put"].p50_us),
        "cached_put_p50_us": round(latency["cached_put"].p50_us),
        "hit_p50_us": round(via_switch["hit"].p50_us) if via_switch else None,
        "miss_p50_us": round(via_switch["miss"].p50_us) if via_switch else None,
        "switch_latency": {k: asdict(v) for k, v in via_switch.items()} if via_switch else None,
        "shim_get_vs_ceiling": round(load["get"].ops_per_s / load["echo"].ops_per_s, 2),
        "echo_get_ops_per_s": round(load["echo"].ops_per_s),
        "shim_get_ops_per_s": round(load["get"].ops_per_s),
        "shim_put_ops_per_s": round(load["put"].ops_per_s),
        "redis_get_rps": rb.get_rps,
        "redis_set_rps": rb.set_rps,
        "load": {k: asdict(v) for k, v in load.items()},
        "redis_benchmark": asdict(rb),
        "latency": {k: asdict(v) for k, v in latency.items()},
        "shim_stats": shim_stats,
        "config": {
            "concurrency": args.concurrency,
            "procs": args.procs,
            "seconds": args.seconds,
            "latency_ops": args.latency_ops,
            "value_bytes": len(VALUE),
            "cpus": os.cpu_count(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "profile_phase": args.profile_phase,
        },
    }
    if profile_raw is not None:
        for name, proc in procs.items:  # py-spy stops itself after the window; wait for its file
            if name == "py-spy" and isinstance(proc, subprocess.Popen):
                proc.wait(30)
        if profile_raw.exists():
            fig["profile"] = summarize_profile(profile_raw, categories=CATEGORIES) | {"raw": str(profile_raw)}
        else:
            err.log("[yellow]py-spy wrote no profile (ptrace not permitted?)[/]")
    return fig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.shim", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="measured seconds per load phase (default 5)")
    ap.add_argument("--procs", type=int, default=2, help="load-generator processes (default 2)")
    ap.add_argument(
        "--concurrency",
        type=int,
        default=16,
        help="requests in flight in total, split across the generators (default 16)",
    )
    ap.add_argument(
        "--redis-seconds",
        type=float,
        default=None,
        help="how long each redis-benchmark test should take (default: min(3, --seconds))",
    )
    ap.add_argument("--latency-ops", type=int, default=LATENCY_OPS, help="sequential PUTs per latency figure")
    ap.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="sample the shim with py-spy during the GET phase; raw stacks and summary go to DIR",
    )
    ap.add_argument(
        "--profile-phase",
        choices=["get", "put"],
        default="get",
        help="which load phase --profile samples (default get)",
    )
    ap.add_argument(
        "--no-switch",
        dest="switch",
        action="store_false",
        help="skip the hit/miss latency through a Mininet deployment (it needs root)",
    )
    ap.add_argument("--json", action="store_true", help="print every figure as one JSON object instead of tables")
    args = ap.parse_args(argv)
    if args.switch and os.geteuid() != 0:
        err.log(
            "[yellow]not root: skipping the hit/miss latency through the switches (hit_p50_us=na); "
            "run as root for it, or pass --no-switch[/]"
        )
        args.switch = False
    if args.procs < 1 or args.concurrency < args.procs or args.seconds <= 0 or args.latency_ops < 1:
        ap.error("need --procs >= 1, --concurrency >= --procs, --seconds > 0, --latency-ops >= 1")
    for tool in ("redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            ap.error(f"{tool} not found on PATH (Debian: apt-get install redis-server redis-tools)")
    signal.signal(signal.SIGTERM, _sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started in the background (SIG_IGN)
    procs = Processes()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-shim-") as tmp:
            try:
                fig = bench(args, procs, Path(tmp))
            finally:
                procs.close()
    except KeyboardInterrupt:
        err.print("[red]interrupted: every process stopped[/]")
        return 130
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        err.print(f"[red]bench-shim failed:[/] {e}")
        return 1
    if args.profile and "profile" in fig:
        (args.profile / "summary.json").write_text(json.dumps(fig["profile"], indent=2) + "\n")
    if args.json:
        print(json.dumps(fig | {"summary": summary_line(fig)}))
    else:
        render(fig, Console(width=max(170, Console().width)))
        print(summary_line(fig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
