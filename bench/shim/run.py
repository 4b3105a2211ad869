"""``make bench-shim``: the phases, the table and the summary line (``python -m bench.shim --help``)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.shim.bed import Storage, generate, start_peer, start_storage
from bench.shim.children import Processes
from bench.shim.config import CACHED_KEYS, HOST, STORAGEBENCH
from distcache.cluster import Cluster
from harness.processes import SHIM_BINARY

err = Console(stderr=True, log_path=False)

#: what the counters say of each request, by op: a read's key lookups, a write's key changes (a shim's PUT changes
#: its key and its dedup marker: 2)
REACHED = {"get": "lookups", "put": "writes", "put-cached": "writes"}
NOT_COMMANDS = ("lookups", "writes", "info", "ping", "hello", "client", "select", "command")


#: each op's rows: a put of cached keys has no direct counterpart (Redis alone caches nothing)
ROWS = (("get", ("redis", "shim")), ("put", ("redis", "shim")), ("put-cached", ("shim",)))


@dataclass
class Row:
    persistence: str  # volatile (no persistence) or durable (appendfsync always)
    dist: str
    op: str  # get, put (keys no switch caches), put-cached (both coherence phases)
    side: str  # redis (driven directly over TCP) or shim (over UDP, its Redis on a Unix socket)
    ops_per_s: float
    p50_us: float
    p99_us: float
    shim_us: float  # CPU per request of the shim (0 for a direct row)
    redis_us: float  # of the redis-server (behind the shim, or driven directly)
    generator_us: float
    reached_redis: float  # Redis' key lookups (a read) or key changes (a write) per request answered, warm-up included
    commands: str  # INFO commandstats over the row: each command's calls per request answered
    errors: int
    timeouts: int

    @property
    def storage_us(self) -> float:
        return self.shim_us + self.redis_us


def measure(st: Storage, shim_pid: int, persistence: str, dist: str, op: str, side: str, a: argparse.Namespace) -> Row:
    """One window of one row: the generator's figures, and the CPU every process on the path spent over it."""
    argv = ["-side", side, "-op", "put" if op.startswith("put") else "get", "-dist", dist,
            "-concurrency", str(a.concurrency), "-duration", f"{a.seconds}s", "-keys", str(a.keys)]  # fmt: skip
    if side == "redis":
        argv += ["-addr", f"{HOST}:{st.port}", "-watch", str(st.redis.pid)]
    else:
        argv += ["-addr", f"{HOST}:8888", "-cluster", str(st.cluster_file), "-watch", f"{shim_pid},{st.redis.pid}"]
    if op == "put-cached":
        argv += ["-key-file", str(st.cluster_file.with_name("cached.hex"))]
    before = st.counters()
    res, _ = generate(argv, a.seconds + 30)
    after = st.counters()
    ops = max(res["ops"], 1)
    answered = max(res["answered"], 1)  # the warm-up's requests reached Redis too
    calls = {c: (n - before.get(c, 0)) / answered for c, n in after.items() if c not in NOT_COMMANDS}
    commands = " ".join(f"{c}:{v:.2f}" for c, v in sorted(calls.items(), key=lambda kv: -kv[1]) if v >= 0.005)
    watched = res["watched"]
    return Row(
        persistence, dist, op, side, res["ops"] / res["seconds"], res["p50_us"], res["p99_us"],
        watched.get(str(shim_pid), 0.0) / ops if side == "shim" else 0.0, watched.get(str(st.redis.pid), 0.0) / ops,
        res["cpu_us"] / ops, (after[REACHED[op]] - before[REACHED[op]]) / answered, commands,
        res["errors"], res["timeouts"],
    )  # fmt: skip


def cache_keys(st: Storage) -> None:
    """CACHED_KEYS keys written and populated on spine 1: the put-cached rows write them (phase 1 and 2)."""
    cluster = Cluster.load(st.cluster_file)
    keys = [f"hot:{i:05d}".encode() for i in range(CACHED_KEYS)]
    generate(["-side", "load", "-addr", f"{HOST}:{st.port}", "-key-file", str(_key_file(st, keys))], 60)
    for version, k in enumerate(keys, 1):
        state = st.link.populate(cluster.digest(k), 1, 0, version, k)
        if state != "valid":
            raise RuntimeError(f"populating {k!r} on spine 1 answered {state}")


def _key_file(st: Storage, keys: list[bytes]) -> Path:
    path = st.cluster_file.with_name("cached.hex")
    path.write_text("".join(k.hex() + "\n" for k in keys))
    return path


def ratio(num: float, den: float) -> float:
    return round(num / den, 2) if den else float("nan")


def summary(rows: list[Row], persistence: str, dist: str) -> dict[str, float]:
    """The goals' ratios from one persistence's rows of one distribution."""

    def row(op: str, side: str) -> Row:
        return next(r for r in rows if (r.persistence, r.dist, r.op, r.side) == (persistence, dist, op, side))

    g_shim, g_redis, p_shim, p_redis = row("get", "shim"), row("get", "redis"), row("put", "shim"), row("put", "redis")
    return {
        "storage_cpu_vs_redis_get": ratio(g_shim.storage_us, g_redis.redis_us),
        "storage_cpu_vs_redis_put": ratio(p_shim.storage_us, p_redis.redis_us),
        "shim_get_vs_redis": ratio(g_shim.ops_per_s, g_redis.ops_per_s),
        "shim_put_vs_redis": ratio(p_shim.ops_per_s, p_redis.ops_per_s),
        "shim_get_p50_vs_redis": ratio(g_shim.p50_us, g_redis.p50_us),
    }


def line(figures: dict[str, float]) -> str:
    return " ".join(f"{k}={v}" for k, v in figures.items())


def table(rows: list[Row], persistence: str) -> Table:
    what = "appendfsync always" if persistence == "durable" else "no persistence"
    t = Table(title=f"redis-server with {what}: direct over TCP, and through the shim over UDP (CPU µs per request)")
    for col in ("op", "keys", "side", "ops/s", "p50 µs", "p99 µs", "shim", "redis", "shim+redis", "generator",
                "reached", "redis commands/req", "errors"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("op", "keys", "side") else "right")
    for r in rows:
        if r.persistence != persistence:
            continue
        shim = f"{r.shim_us:.1f}" if r.side == "shim" else "-"
        t.add_row(r.op, r.dist, r.side, f"{r.ops_per_s:,.0f}", f"{r.p50_us:.0f}", f"{r.p99_us:.0f}", shim,
                  f"{r.redis_us:.1f}", f"{r.storage_us:.1f}", f"{r.generator_us:.1f}", f"{r.reached_redis:.2f}",
                  r.commands, str(r.errors + r.timeouts))  # fmt: skip
    return t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.shim", description=__doc__)
    ap.add_argument("--seconds", type=float, default=3.0, help="the measured window of each row (default 3)")
    ap.add_argument("--concurrency", type=int, default=32, help="requests in flight, both sides (default 32)")
    ap.add_argument("--keys", type=int, default=100_000, help="the keyspace (default 100000)")
    ap.add_argument("--dists", default="uniform,zipf", help="key distributions (default uniform,zipf)")
    ap.add_argument("--persistence", default="volatile,durable", help="rows' Redis (default volatile,durable)")
    ap.add_argument("--json", action="store_true", help="print every row and the summaries as one JSON object")
    ap.add_argument("--shim", type=Path, default=SHIM_BINARY, metavar="PROGRAM",
                    help="the shim to measure (default build/distcache-shim; another build, to compare)")  # fmt: skip
    a = ap.parse_args(argv)
    if a.seconds <= 0 or a.concurrency < 1 or a.keys < 1:
        ap.error("--seconds, --concurrency and --keys must be positive")
    dists, kinds = a.dists.split(","), a.persistence.split(",")
    if not set(dists) <= {"uniform", "zipf"} or not set(kinds) <= {"volatile", "durable"}:
        ap.error("--dists: uniform and/or zipf; --persistence: volatile and/or durable")
    if not STORAGEBENCH.exists():
        ap.error(f"{STORAGEBENCH} is not built: run make build")
    procs = Processes()
    rows: list[Row] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-shim-") as tmp:
            _, peer_port = start_peer(procs)
            for persistence in kinds:
                st = start_storage(procs, Path(tmp), persistence == "durable", peer_port, a.shim)
                generate(["-side", "load", "-addr", f"{HOST}:{st.port}", "-keys", str(a.keys)], 120)
                cache_keys(st)
                for dist in dists:
                    for op, sides in ROWS:
                        for side in sides:
                            err.print(f"[dim]{persistence} {dist} {op} {side}...[/]")
                            rows.append(measure(st, st.shim.pid, persistence, dist, op, side, a))
                procs.stop(st.shim)
                procs.stop(st.redis)
    except RuntimeError as e:
        err.print(f"[red]bench-shim: {e}[/]")
        return 1
    finally:
        procs.close()
    dist = "zipf" if "zipf" in dists else dists[0]
    figures = {p: summary(rows, p, dist) for p in kinds}
    if a.json:
        print(json.dumps({"rows": [asdict(r) for r in rows], "summary": figures}))
        return 0
    out = Console(width=max(Console().width, 150))  # the tables' columns, whole
    for p in kinds:
        out.print(table(rows, p))
    out.print(
        "CPU per request: user + system time from /proc over each window. reached: Redis' own count of the keys each "
        "request looked up (a read) or changed (a write: its key and its dedup marker through the shim). The ratios "
        f"below are of the {dist} rows, the durable ones last (what deployments run)"
    )
    if "volatile" in figures and "durable" in figures:
        print(f"volatile: {line(figures['volatile'])}")
    print(line(figures[kinds[-1]]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
