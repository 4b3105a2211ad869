"""The ``distcache`` CLI and the bench engine against a real shim in front of a real redis-server.

The shim listens on an ephemeral loopback port (the CLI reaches it with
``--server``); no switch is involved, so every read is a miss served by the
shim and no coherence traffic happens (no key is cached).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import redis
from typer.testing import CliRunner

from client_lib import Client
from distcache.cluster import Cluster
from loadgen.cli import app
from loadgen.merge import merge_reports
from loadgen.values import make_value, parse_value
from loadgen.workload import BenchConfig, Report, run_bench
from tests.common.keys import digest
from tests.common.shim_bed import ShimThread, SwitchPeer

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]
CLUSTER = Cluster(storage_racks=2, servers_per_rack=2)  # four servers: the CLI's --server sends all to one shim


class LoopbackShim:
    """A real shim of CLUSTER's r0s0 on 127.0.0.1:<ephemeral> with its coherence peer (tests/common/shim_bed.py)."""

    def __init__(self, redis_sock: Path, folder: Path) -> None:
        self.peer = SwitchPeer(redis_sock)
        self.shim = ShimThread(redis_sock, self.peer, folder / "shim.sock", cluster=CLUSTER)
        self.port = self.shim.port

    def close(self) -> None:
        self.shim.close()
        self.peer.close()


@pytest.fixture
def env(redis_sock: Path, tmp_path: Path):  # noqa: ANN201
    r = redis.Redis(unix_socket_path=str(redis_sock))
    r.flushall()
    shim = LoopbackShim(redis_sock, tmp_path)
    cluster_json = tmp_path / "cluster.json"
    CLUSTER.save(cluster_json)
    yield shim, cluster_json, r
    shim.close()
    r.close()


def cli(cluster_json: Path, port: int, *args: str, input: bytes | None = None):  # noqa: ANN201
    res = CliRunner().invoke(
        app,
        ["--cluster", str(cluster_json), "--server", f"127.0.0.1:{port}", "--timeout", "2", "--retries", "1", *args],
        input=input,
    )
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res


def bench(shim: LoopbackShim, **kw: object) -> Report:
    return run_bench(CLUSTER, BenchConfig(**kw), resolve=lambda _h: ("127.0.0.1", shim.port), timeout=2.0, retries=1)


# -- CLI ------------------------------------------------------------------------------------


def test_cli_put_get_del_round_trip(env, tmp_path: Path) -> None:  # noqa: ANN001
    shim, cj, r = env
    res = cli(cj, shim.port, "put", "user:42", "hello wörld")
    assert res.exit_code == 0 and res.stdout.strip() == "ok"
    assert r.get("user:42") == "hello wörld".encode()  # stored by the shim under the key itself

    res = cli(cj, shim.port, "get", "user:42")
    assert res.exit_code == 0 and res.stdout == "hello wörld\n"

    res = cli(cj, shim.port, "get", "--json", "user:42")
    assert res.exit_code == 0
    d = json.loads(res.stdout)
    assert set(d) == {"key", "key_encoding", "found", "value", "encoding", "cached", "served_by", "latency_us",
                      "attempts"}  # fmt: skip
    assert d["key"] == "user:42"
    assert d["found"] is True
    assert d["value"] == "hello wörld" and d["encoding"] == "utf-8"
    assert d["cached"] is False and d["served_by"] == 0  # no switch on loopback: the shim answered
    assert isinstance(d["latency_us"], int) and 0 < d["latency_us"] < 2_000_000
    assert d["attempts"] == 1

    import base64

    blob = bytes(range(256)) * 2
    (tmp_path / "blob").write_bytes(blob)
    assert cli(cj, shim.port, "put", "bin", "--value-file", str(tmp_path / "blob")).exit_code == 0
    d = json.loads(cli(cj, shim.port, "get", "--json", "bin").stdout)
    assert d["encoding"] == "base64"
    assert base64.b64decode(d["value"]) == blob
    assert cli(cj, shim.port, "put", "stdin", "--value-file", "-", input=b"from stdin").exit_code == 0
    assert r.get("stdin") == b"from stdin"
    big = bytes(range(256)) * 8192  # 2 MB: the stream path, both ways
    (tmp_path / "big").write_bytes(big)
    assert cli(cj, shim.port, "put", "big", "--value-file", str(tmp_path / "big")).exit_code == 0
    d = json.loads(cli(cj, shim.port, "get", "--json", "big").stdout)
    assert base64.b64decode(d["value"]) == big == r.get("big")

    res = cli(cj, shim.port, "del", "user:42")
    assert res.exit_code == 0 and res.stdout.strip() == "deleted"
    assert r.get("user:42") is None
    res = cli(cj, shim.port, "del", "user:42")
    assert res.exit_code == 0 and res.stdout.strip() == "absent"
    res = cli(cj, shim.port, "get", "user:42")
    assert res.exit_code == 1 and res.stdout == "" and "not found" in res.stderr
    d = json.loads(cli(cj, shim.port, "get", "--json", "user:42").stdout)
    assert d["found"] is False and d["value"] is None


def test_cli_exec_runs_any_single_key_command_and_prints_as_redis_cli(env) -> None:  # noqa: ANN001
    shim, cj, r = env
    assert cli(cj, shim.port, "exec", "INCRBY", "n", "5").stdout == "(integer) 5\n"
    assert cli(cj, shim.port, "exec", "RPUSH", "l", "a", "b\x1b[2J").stdout == "(integer) 2\n"
    assert cli(cj, shim.port, "exec", "LRANGE", "l", "0", "-1").stdout == '1) "a"\n2) "b\\x1b[2J"\n'  # data, escaped
    assert cli(cj, shim.port, "exec", "GET", "absent").stdout == "(nil)\n"
    assert cli(cj, shim.port, "exec", "--key", "n", "OBJECT", "ENCODING", "n").stdout == '"int"\n'
    res = cli(cj, shim.port, "exec", "INCR", "l")
    assert res.exit_code == 1 and "WRONGTYPE" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = cli(cj, shim.port, "exec", "MGET", "n", "l")
    assert res.exit_code == 1 and "other keys" in res.stderr
    assert r.get("n") == b"5"


def _cli_process(cj: Path, port: int, *args: bytes, tty: bool = False) -> tuple[int, bytes, bytes]:
    """``python -m loadgen`` with byte arguments (as a shell passes them), its stdout a pipe or, with
    ``tty``, a pseudo-terminal: (exit code, stdout, stderr)."""
    import pty

    env = {k: v for k, v in os.environ.items() if k not in ("DISTCACHE_CLUSTER", "DISTCACHE_SERVER")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    argv = [sys.executable.encode(), b"-m", b"loadgen", b"--cluster", bytes(cj), b"--server",
            f"127.0.0.1:{port}".encode(), *args]  # fmt: skip
    if not tty:
        p = subprocess.run(argv, capture_output=True, env=env, timeout=30)
        return p.returncode, p.stdout, p.stderr
    main, sub = pty.openpty()
    try:
        p = subprocess.run(argv, stdout=sub, stderr=subprocess.PIPE, env=env, timeout=30)
        os.close(sub)
        sub = -1
        out = b""
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # EIO: the other end is closed and drained
                break
            if not chunk:
                break
            out += chunk
        return p.returncode, out.replace(b"\r\n", b"\n"), p.stderr
    finally:
        os.close(main)
        if sub != -1:
            os.close(sub)


def test_cli_keys_are_the_bytes_given_and_values_reach_a_terminal_escaped(env) -> None:  # noqa: ANN001
    """A key that is not UTF-8 (before: a traceback) is stored under its bytes; a value holding an escape
    sequence is shown escaped on a terminal (before: written raw, the terminal obeyed it), written as it is
    when piped or with --raw."""
    shim, cj, r = env
    key, value = b"k\xff\xfe", b"\x1b]0;owned\x07red\x1b[31m\\ caf\xc3\xa9\n"
    code, out, errout = _cli_process(cj, shim.port, b"put", key, value)
    assert (code, out) == (0, b"ok\n"), errout
    assert r.get(key) == value
    code, out, _ = _cli_process(cj, shim.port, b"get", key, tty=True)
    assert code == 0 and out == rb"\x1b]0;owned\x07red\x1b[31m\\ caf" + "é".encode() + rb"\n" + b"\n"
    assert b"\x1b" not in out
    code, out, _ = _cli_process(cj, shim.port, b"get", b"--raw", key, tty=True)
    assert code == 0 and out == value + b"\n"
    code, out, _ = _cli_process(cj, shim.port, b"get", key)
    assert code == 0 and out == value + b"\n"
    code, out, errout = _cli_process(cj, shim.port, b"get", b"absent\x1b[2J")
    assert code == 1 and out == b"" and errout.strip() == rb"not found: absent\x1b[2J"
    code, out, _ = _cli_process(cj, shim.port, b"del", key)
    assert (code, out) == (0, b"deleted\n") and r.get(key) is None


def test_a_key_that_is_no_unicode_text_is_one_clear_error() -> None:
    from distcache.errors import InvalidKeyError

    with pytest.raises(InvalidKeyError, match=r"not valid Unicode text.*pass its bytes"):
        digest(b"k\xff".decode(errors="surrogateescape"))


def test_cli_errors_are_one_clear_line(tmp_path: Path) -> None:
    cj = tmp_path / "cluster.json"
    CLUSTER.save(cj)
    env = {k: v for k, v in os.environ.items() if k not in ("DISTCACHE_CLUSTER", "DISTCACHE_SERVER")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "mininet"), env.get("PYTHONPATH", "")])

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "loadgen", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            cwd=tmp_path,
        )

    p = run("get", "k")
    assert p.returncode != 0 and p.stderr.strip().splitlines() == [
        "error: no cluster description: pass --cluster PATH (a run's cluster.json) or set DISTCACHE_CLUSTER"
    ]
    # a loopback port with nobody listening: the request times out
    import socket

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    try:
        p = run(
            "--cluster", str(cj), "--server", f"127.0.0.1:{port}", "--timeout", "0.05", "--retries", "2", "get", "k"
        )
    finally:
        s.close()
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1, p.stderr
    host = CLUSTER.server_for_key(digest("k")).name
    assert lines[0] == (
        f"error: no reply from {host} (127.0.0.1:{port}) after 3 tries of 0.05s; is the deployment running?"
    )
    p = run("--cluster", str(tmp_path / "missing.json"), "get", "k")
    assert p.returncode == 1 and "does not exist" in p.stderr


# -- bench ----------------------------------------------------------------------------------


def test_bench_counts_add_up_without_errors(env) -> None:  # noqa: ANN001
    shim, _, r = env
    rep = bench(
        shim,
        keys=3000,
        zipf=0.99,
        read_ratio=0.8,
        value_size=100,
        concurrency=16,
        ops=4000,
        load=True,
        load_keys=2000,
        seed=7,
        run_tag="t1",
        duration=None,
    )
    assert rep.errors == {} and rep.error_count == 0
    assert rep.ops == 4000
    assert rep.reads + rep.writes == rep.ops
    assert rep.hits + rep.misses + rep.failed_reads == rep.reads
    assert rep.failed_reads == rep.failed_writes == 0
    assert rep.hits == 0 and rep.misses == rep.reads  # nothing caches on loopback
    assert 0.75 < rep.reads / rep.ops < 0.85
    assert rep.loaded_keys == 2000
    assert rep.absent > 0  # ranks 2000..2999 were never loaded: absent is correct, not an error
    lat = rep.latency_us
    assert lat["all"]["count"] == rep.ops
    assert lat["miss"]["count"] + lat["hit"]["count"] + lat["write"]["count"] == rep.ops
    assert 0 < lat["all"]["p50"] <= lat["all"]["p99"] <= lat["all"]["p999"]
    assert sum(s["ops"] for s in rep.per_second) == rep.ops
    assert sum(s["hits"] for s in rep.per_second) == rep.hits
    # the values really are in Redis, self-describing, padded to the value size
    v = r.get("key1999")
    assert v is not None and len(v) == 100 and parse_value(v)[:2] == ("key1999", "t1")
    assert r.get("key2999") is None or parse_value(r.get("key2999"))[2] >= 1
    # a second run over the same data reads the first run's values: other run, not an error
    rep2 = bench(shim, keys=3000, read_ratio=1.0, ops=1000, load=False, seed=8, run_tag="t2", duration=None)
    assert rep2.errors == {} and rep2.other_run_values > 0


def test_bench_zipf_skew_matches_theory(env) -> None:  # noqa: ANN001
    shim, _, _ = env
    n, theta, ops = 10_000, 0.99, 12_000
    rep = bench(shim, keys=n, zipf=theta, read_ratio=1.0, ops=ops, load=False, seed=3, duration=None)
    assert rep.ops == ops and rep.errors == {}
    h = float(np.sum(np.arange(1, n + 1, dtype=float) ** -theta))
    for rank in range(3):
        top = rep.top_keys[rank]
        expected = (rank + 1) ** -theta / h
        sigma = (expected * (1 - expected) / ops) ** 0.5
        assert top["rank"] == rank and top["key"] == f"key{rank}"
        assert top["expected_share"] == pytest.approx(expected, abs=1e-5)
        assert abs(top["share"] - expected) < 5 * sigma, (rank, top, expected)
    assert rep.top_keys[0]["share"] > 0.08  # ~10 % of all requests go to key0 at θ = 0.99 over 10^4 keys
    uni = bench(shim, keys=n, zipf=0.0, read_ratio=1.0, ops=3000, load=False, seed=3, duration=None)
    assert uni.top_keys[0]["share"] < 0.005  # uniform: 1/10^4 each


def test_bench_detects_wrong_values(env) -> None:  # noqa: ANN001
    shim, _, _r = env
    with Client(CLUSTER, resolve=lambda _h: ("127.0.0.1", shim.port), timeout=2.0, retries=1) as c:
        c.put("key0", b"not a workload value")  # foreign value
        c.put("key1", make_value("key2", "run9", 0, 64))  # another key's value
        c.put("key2", make_value("key2", "run9", 5, 64))  # a counter this run never issued
        c.put("key3", make_value("key3", "old", 0, 64)[:-1] + b"!")  # corrupt padding
        c.put("key4", make_value("key4", "old", 3, 64))  # an earlier run's value: fine
        c.put("key5", make_value("key5", "run9", 0, 64))  # counter 0, but this run loaded nothing
    rep = bench(shim, keys=50, zipf=0.99, read_ratio=1.0, ops=2000, load=False, seed=1, run_tag="run9", duration=None)
    wrong = sum(t["requests"] for t in rep.top_keys if t["rank"] in (0, 1, 2, 3, 5))
    assert rep.errors == {"wrong": wrong} and wrong > 0  # every read of those keys, nothing else
    assert rep.wrong == wrong and rep.stale == 0 and "no write of this run wrote" in rep.findings[0]
    assert rep.other_run_values == rep.top_keys[4]["requests"] > 0
    assert rep.absent == rep.reads - wrong - rep.other_run_values  # the rest were never written


def test_bench_detects_missing_and_corrupt_loaded_keys(env) -> None:  # noqa: ANN001
    shim, _, r = env

    def on_load(done: int, n: int) -> None:
        if done == n:  # the load was acknowledged; now values change behind the workload's back
            r.delete("key0")
            r.set("key1", make_value("key1", "run7", 0, 64)[:-1] + b"!")  # corrupt padding
            r.set("key2", make_value("key2", "run7", 0, 32))  # this run's value, wrong length
            r.set("key3", make_value("key3", "run6", 0, 64))  # an earlier run's: stale

    rep = run_bench(
        CLUSTER,
        BenchConfig(keys=100, read_ratio=1.0, ops=1000, load=True, duration=None, run_tag="run7"),
        resolve=lambda _h: ("127.0.0.1", shim.port),
        on_load=on_load,
    )
    top = [t["requests"] for t in rep.top_keys]
    # absent after its acknowledged load, or an earlier run's value after it: stale; never written: wrong
    assert rep.errors == {"stale": top[0] + top[3], "wrong": top[1] + top[2]}
    assert (rep.stale, rep.wrong) == (top[0] + top[3], top[1] + top[2])
    assert min(top[:4]) > 0


def test_bench_cli_json_schema_and_exit_status(env) -> None:  # noqa: ANN001
    shim, cj, _ = env
    res = cli(
        cj,
        shim.port,
        "bench",
        "--keys",
        "100000",
        "--zipf",
        "0.9",
        "--read-ratio",
        "0.9",
        "--value-size",
        "32",
        "--concurrency",
        "8",
        "--duration",
        "1.5",
        "--load-keys",
        "500",
        "--json",
    )
    assert res.exit_code == 0, res.stderr
    d = json.loads(res.stdout)
    expect = {
        "config": dict,
        "run_tag": str,
        "loaded_keys": int,
        "load_seconds": float,
        "seconds": float,
        "ops": int,
        "reads": int,
        "writes": int,
        "hits": int,
        "misses": int,
        "absent": int,
        "failed_reads": int,
        "failed_writes": int,
        "other_run_values": int,
        "stale": int,
        "wrong": int,
        "throughput": float,
        "hit_ratio": float,
        "latency_us": dict,
        "per_second": list,
        "errors": dict,
        "top_keys": list,
        "findings": list,
        "error_count": int,
        "target": str,
    }
    assert set(d) == set(expect)
    for k, t in expect.items():
        assert isinstance(d[k], t), (k, d[k])
    assert d["target"] == "deployment" and d["error_count"] == 0 and d["loaded_keys"] == 500
    assert d["stale"] == d["wrong"] == 0 and d["findings"] == []
    assert d["config"]["keys"] == 100000 and d["config"]["zipf"] == 0.9 and d["config"]["value_size"] == 32
    assert 1.4 < d["seconds"] < 3 and d["ops"] > 0 and d["throughput"] > 0
    assert set(d["latency_us"]) == {"all", "hit", "miss", "write"}
    for v in d["latency_us"].values():
        assert set(v) == {"count", "mean", "p50", "p99", "p999"}
    assert len(d["per_second"]) == 2 and d["per_second"][1]["span"] < 1
    for s in d["per_second"]:
        assert set(s) == {
            "t",
            "ops",
            "reads",
            "hits",
            "writes",
            "errors",
            "span",
            "hit_ratio",
            "read_p99_us",
            "write_p99_us",
        }

    # a foreign value under the hottest key: the CLI reports it and exits 2
    with Client(CLUSTER, resolve=lambda _h: ("127.0.0.1", shim.port)) as c:
        c.put("key0", b"garbage")
    res = cli(cj, shim.port, "bench", "--keys", "100", "--read-ratio", "1", "--ops", "300", "--no-load", "--json")
    assert res.exit_code == 2 and json.loads(res.stdout)["errors"]["wrong"] > 0
    res = cli(cj, shim.port, "bench", "--keys", "100", "--read-ratio", "1", "--ops", "300", "--no-load")
    assert res.exit_code == 2 and "wrong=" in res.stdout and "stale=0" in res.stdout


def test_bench_echo_measures_the_generator_alone(tmp_path: Path) -> None:
    cj = tmp_path / "cluster.json"
    CLUSTER.save(cj)
    res = CliRunner().invoke(
        app, ["--cluster", str(cj), "bench", "--echo", "--keys", "1000000", "--ops", "3000", "--json"]
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["target"] == "echo" and d["ops"] == 3000 and d["errors"] == {} and d["loaded_keys"] == 0


def test_progress_callback_sees_each_second(env) -> None:  # noqa: ANN001
    shim, _, _ = env
    got = []
    rep = run_bench(
        CLUSTER,
        BenchConfig(keys=1000, duration=2.5, load=False),
        resolve=lambda _h: ("127.0.0.1", shim.port),
        on_second=got.append,
    )
    assert [s.t for s in got] == [0, 1, 2]
    assert sum(s.ops for s in got) == rep.ops
    assert got[0].span == 1.0 and 0 < got[2].span < 1
    # each second's read p99 comes from that second's reads alone: between the run's p50 and its worst read
    worst = max(rep.latency_us["hit"]["p99"] or 0, rep.latency_us["miss"]["p999"] or 0) * 10
    for s in got:
        assert s.reads and rep.latency_us["all"]["p50"] * 0.5 <= s.read_p99_us <= worst, (s, rep.latency_us)


# -- open loop (the saturation search of make emulate) --------------------------------------


def test_open_loop_issues_ops_at_the_rate_whatever_the_replies(env) -> None:  # noqa: ANN001
    shim, _, _ = env
    rep = bench(
        shim,
        keys=200,
        zipf=0.99,
        read_ratio=0.9,
        value_size=16,
        concurrency=600,  # every op due may be in flight: a shim starved beside the PTF suites is no backlog here
        rate=300.0,
        duration=2.0,
        load_keys=200,
    )
    assert rep.error_count == 0, rep.errors
    assert 500 <= rep.ops <= 620, rep.ops  # 600 due in 2 s (the last ones may still be in flight at the end)


def test_open_loop_counts_backlog_when_the_system_does_not_keep_up() -> None:
    """Nothing answers: the first `concurrency` ops time out, every op due meanwhile is a backlog error."""
    import socket

    dead = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dead.bind(("127.0.0.1", 0))  # bound, never read: requests vanish
    try:
        rep = run_bench(
            CLUSTER,
            BenchConfig(keys=100, concurrency=4, rate=100.0, duration=1.0, load=False),
            resolve=lambda _h: dead.getsockname(),
            timeout=2.0,
            retries=0,
        )
    finally:
        dead.close()
    assert rep.errors.get("backlog", 0) >= 80, rep.errors  # ~96 of the 100 due found 4 in flight
    assert rep.errors.get("timeout", 0) == 4


def test_several_hosts_histories_are_judged_as_one(env, tmp_path: Path) -> None:  # noqa: ANN001
    """Two generators (as on two client hosts) write the same keys under their own run tags; only the
    merged history can tell that a read of one's value after the other's acknowledged overwrite is stale."""
    shim, _, _ = env
    common = {"keys": 20, "read_ratio": 0.5, "ops": 300, "duration": None, "load": False, "verify": False}
    reports, paths = [], []
    for i in range(2):
        paths.append(tmp_path / f"h{i}.jsonl")
        rep = bench(shim, **common, seed=i, run_tag=f"t{i}", record=str(paths[-1]))
        assert (rep.stale, rep.wrong) == (-1, -1)  # not judged alone
        reports.append(rep.to_dict())
    merged = merge_reports(reports, paths, ["t0", "t1"])
    assert (merged["stale"], merged["wrong"], merged["error_count"]) == (0, 0, 0), merged["findings"]
    assert merged["reads"] == sum(r["reads"] for r in reports) and merged["hosts"] == 2
    assert merged["latency_us"]["all"]["count"] == sum(r["ops"] for r in reports)
    # a read of t0's first write of a key, sent after t1's last acknowledged write of it: stale
    lines = [json.loads(x) for p in paths for x in p.read_text().splitlines()]
    puts = [x for x in lines if x["op"] == "put" and x["return"] is not None]
    key = next(
        k for k in {x["key"] for x in puts} if {x["value"].split("#")[1] for x in puts if x["key"] == k} == {"t0", "t1"}
    )
    old = min((x for x in puts if x["key"] == key and "#t0#" in x["value"]), key=lambda x: x["call"])
    last = max(x["return"] for x in puts if x["key"] == key)
    late = {"client": 0, "key": key, "op": "get", "value": old["value"], "call": last + 1, "return": last + 2}
    with paths[0].open("a") as f:
        f.write(json.dumps(late) + "\n")
    merged = merge_reports(reports, paths, ["t0", "t1"])
    assert (merged["stale"], merged["wrong"]) == (1, 0) and merged["errors"]["stale"] == 1
