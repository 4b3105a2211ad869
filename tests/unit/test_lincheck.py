"""tools/lincheck: the Go linearizability checker, run as a binary on small JSON Lines histories,
and on histories loadgen.history records from the real client against a real shim on loopback.

The binary is built with `go build` into a temporary directory; without `go` on PATH the one
`make deps` left in build/lincheck is used, and the module is skipped when neither exists.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from distcache.errors import RequestTimeoutError
from distcache.hashing import N_SPINE_BUCKETS
from distcache.rpc.shim import ShimLink
from distcache.wire import Op
from loadgen.history import HistoryConfig, HistoryStats, Request, plan, record
from tests.common.gateway_bed import gateway_of, start_gateway
from tests.common.keys import digest
from tests.unit.test_shim_client import CLUSTER, SPINE, ShimThread, SwitchPeer

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "tools" / "lincheck"
PREBUILT = REPO / "build" / "lincheck"


@pytest.fixture(scope="module")
def lincheck(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None:
        if PREBUILT.is_file():
            return PREBUILT
        pytest.skip("no `go` on PATH and no build/lincheck: install golang-go (make deps) to test tools/lincheck")
    out = tmp_path_factory.mktemp("lincheck") / "lincheck"
    proc = subprocess.run(
        [go, "build", "-buildvcs=false", "-o", str(out), "."], cwd=SRC, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, f"go build failed:\n{proc.stderr}"
    return out


def op(client: int, key: str, kind: str, value: str | None, call: int, ret: int | None) -> dict[str, object]:
    return {"client": client, "key": key, "op": kind, "value": value, "call": call, "return": ret}


def delete(client: int, key: str, found: bool | None, call: int, ret: int | None) -> dict[str, object]:
    """A delete line: ``found`` is its status (True: OK, False: NOT_FOUND, None: no reply)."""
    return {"client": client, "key": key, "op": "delete", "found": found, "call": call, "return": ret}


def check(lincheck: Path, tmp_path: Path, lines: list[dict[str, object] | str]) -> subprocess.CompletedProcess[str]:
    """Write `lines` (dicts as JSON, strings verbatim) as a history and run lincheck on it."""
    history = tmp_path / "history.jsonl"
    history.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return subprocess.run(
        [str(lincheck), "--history", str(history), "--timeout", "60s"], capture_output=True, text=True, timeout=90
    )


def test_linearizable_history(lincheck: Path, tmp_path: Path) -> None:
    proc = check(
        lincheck,
        tmp_path,
        [
            op(0, "k", "put", "a", 0, 100),
            op(1, "k", "get", None, 10, 20),  # overlaps the put: may still see the key absent
            op(2, "k", "get", "a", 50, 60),  # overlaps the put: may already see it
            op(1, "k", "get", "a", 150, 160),
            op(0, "k", "put", "b", 200, None),  # timed out: may take effect later, or never
            op(2, "k", "get", "a", 300, 310),
            op(1, "k", "get", "b", 400, 410),
        ],
    )
    assert (proc.returncode, proc.stdout) == (0, "ops=7 violations=0\n"), proc.stderr
    assert proc.stderr == ""


def test_stale_read_after_acknowledged_write(lincheck: Path, tmp_path: Path) -> None:
    proc = check(
        lincheck,
        tmp_path,
        [
            op(0, "k", "put", "a", 0, 10),
            op(0, "k", "put", "b", 20, 30),  # acknowledged before the read below began
            op(1, "k", "get", "a", 40, 50),
        ],
    )
    assert (proc.returncode, proc.stdout) == (1, "ops=3 violations=1\n"), proc.stderr
    assert proc.stderr == "violation key=k ops=3\n"


def test_two_keys_one_bad(lincheck: Path, tmp_path: Path) -> None:
    proc = check(
        lincheck,
        tmp_path,
        [
            op(0, "good", "put", "1", 0, 10),
            op(1, "good", "get", "1", 20, 30),
            op(0, "bad", "put", "1", 0, 10),
            delete(0, "bad", True, 20, 30),
            op(1, "bad", "get", "1", 40, 50),  # deleted before the read began
            op(2, "good", "get", None, 5, None),  # unknown outcome get: skipped, not counted
        ],
    )
    assert (proc.returncode, proc.stdout) == (1, "ops=5 violations=1\n"), proc.stderr
    assert proc.stderr == "violation key=bad ops=3\n"


def test_malformed_line(lincheck: Path, tmp_path: Path) -> None:
    proc = check(lincheck, tmp_path, [op(0, "k", "put", "a", 0, 10), "", '{"client": 1, "key": "k", "op": "get"'])
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "line 3" in proc.stderr


def test_delete_statuses_that_fit(lincheck: Path, tmp_path: Path) -> None:
    proc = check(
        lincheck,
        tmp_path,
        [
            delete(0, "k", False, 0, 10),  # never written: NOT_FOUND
            op(1, "k", "put", "a", 20, 30),
            delete(0, "k", True, 40, 50),  # present: OK
            delete(1, "k", False, 60, 70),  # gone again: NOT_FOUND
            op(1, "k", "put", "b", 80, 90),
            delete(0, "k", None, 100, None),  # timed out: no status, may take effect later or never
            op(2, "k", "get", "b", 200, 210),
            delete(2, "k", True, 300, 310),  # the timed-out delete had not taken effect yet...
            delete(0, "k", False, 400, 410),  # ...and whenever it does, the key stays absent
        ],
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "ops=9 violations=0\n", "")


@pytest.mark.parametrize(
    "lines",
    [
        pytest.param([op(0, "k", "put", "a", 0, 10), delete(1, "k", False, 20, 30)], id="not_found-after-put"),
        pytest.param([delete(1, "k", True, 0, 10)], id="ok-of-a-key-never-written"),
        pytest.param(
            [op(0, "k", "put", "a", 0, 10), delete(1, "k", True, 20, 30), delete(1, "k", True, 40, 50)],
            id="ok-twice-for-one-put",
        ),
    ],
)
def test_wrong_delete_status_is_a_violation(lincheck: Path, tmp_path: Path, lines: list[dict[str, object]]) -> None:
    proc = check(lincheck, tmp_path, lines)
    assert (proc.returncode, proc.stdout) == (1, f"ops={len(lines)} violations=1\n"), proc.stderr
    assert proc.stderr == f"violation key=k ops={len(lines)}\n"


def test_delete_without_a_status_is_bad_input(lincheck: Path, tmp_path: Path) -> None:
    proc = check(lincheck, tmp_path, [op(0, "k", "put", "a", 0, 10), op(0, "k", "delete", None, 20, 30)])
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.count("\n") == 1 and 'line 2: delete needs "found"' in proc.stderr


# -- histories recorded by loadgen.history against a real shim on loopback ---------------------------

HOT = 6  # keys of the recorded histories; the even ones are cached at SPINE, so their writes run coherence


@pytest.fixture
def peer(redis_sock: Path) -> Iterator[SwitchPeer]:
    """The shim's coherence peer: acknowledges every INVALIDATE and UPDATE, and records them."""
    peer = SwitchPeer(redis_sock)
    yield peer
    peer.close()


@pytest.fixture
def shim(redis_sock: Path, tmp_path: Path, peer: SwitchPeer) -> Iterator[ShimThread]:
    """A real Shim over a real redis-server, its coherence peer acknowledging, half the keys cached."""
    redis.Redis(unix_socket_path=str(redis_sock)).flushall()
    shim = ShimThread(redis_sock, peer, tmp_path / "shim.sock")
    link = ShimLink(shim.control_addr)
    link.partition([SPINE] * N_SPINE_BUCKETS)
    for i in range(0, HOT, 2):
        assert (
            link.populate(digest(f"lin{i}"), SPINE, 0, 1, f"lin{i}".encode()) == "absent"
        )  # installed; filled by later writes
    yield shim
    shim.close()


def record_history(shim: ShimThread, path: Path, **fields: object) -> HistoryStats:
    cfg = HistoryConfig(**{"keys": HOT, "duration": 60.0, "timeout": 3.0, "seed": 7, **fields})  # type: ignore[arg-type]
    return asyncio.run(record(CLUSTER, cfg, path, resolve=lambda _host: ("127.0.0.1", shim.port)))


def test_recorded_history_with_deletes_checks_clean(
    lincheck: Path, tmp_path: Path, shim: ShimThread, peer: SwitchPeer
) -> None:
    """Eight clients against one shim: reads, puts and deletes (OK and NOT_FOUND) of six hot keys."""
    peer.seen.clear()
    history = tmp_path / "recorded.jsonl"
    stats = record_history(shim, history, clients=8, ops=150, read_ratio=0.5, delete_ratio=0.4)
    lines = [json.loads(x) for x in history.read_text().splitlines()]
    assert stats.ops == len(lines) == 8 * 150 and stats.errors == stats.unknown == 0
    deletes = [x for x in lines if x["op"] == "delete"]
    assert len(deletes) == stats.deletes > 100
    assert {x["found"] for x in deletes} == {True, False}  # both statuses were exercised
    assert sum(not x["found"] for x in deletes) == stats.deletes_not_found
    assert all(set(x) == {"client", "key", "op", "found", "call", "return"} for x in deletes)
    cached = {digest(f"lin{i}") for i in range(0, HOT, 2)}
    assert {m.digest for m, _ in peer.seen if m.op == Op.INVALIDATE} == cached  # writes of cached keys ran phase 1
    proc = subprocess.run(
        [str(lincheck), "--history", str(history), "--timeout", "60s"], capture_output=True, text=True, timeout=90
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"ops={len(lines)} violations=0\n", "")


def test_a_history_through_every_path_of_the_mix_checks_clean(
    lincheck: Path, tmp_path: Path, shim: ShimThread, peer: SwitchPeer
) -> None:
    """The fault matrix's mix (issue 45): reads, puts and deletes as commands, puts with a TTL (never cached),
    long keys, values on the stream path; the register's rules hold, the checker finds no violation, and a flipped
    read is still caught."""
    history = tmp_path / "mixed.jsonl"
    stats = record_history(
        shim, history, clients=6, ops=120, read_ratio=0.5, delete_ratio=0.2, exec_ratio=0.4, ttl_ratio=0.3,
        long_keys=2, stream_ratio=0.3, counter_keys=1, hash_ratio=0.3,
    )  # fmt: skip
    lines = [json.loads(x) for x in history.read_text().splitlines()]
    assert stats.ops == len(lines) == 6 * 120 and stats.errors == stats.unknown == 0
    via = [x for x in lines if x.get("via") == "exec"]
    assert {x["op"] for x in via} == {"get", "put", "delete", "incr", "hset"} and len(via) > 200
    long = [x for x in lines if len(x["key"]) == 300]
    assert long and any(x["op"] == "put" for x in long) and any(x["op"] == "get" and x["value"] for x in long)
    with_ttl = {x["value"] for x in lines if "ttl_ms" in x}
    updates = {m.value.decode() for m, _ in peer.seen if m.op == Op.UPDATE}
    assert len(with_ttl) > 20 and updates and not updates & with_ttl  # a value with a TTL never reached a cache
    streamed = {x["value"] for x in lines if x.get("stream")}
    assert len(streamed) > 20 and not updates & streamed  # a stream-path value never reached a cache
    assert streamed & {x["value"] for x in lines if x["op"] == "get"}  # and reads returned them, named
    incrs = [int(x["value"]) for x in lines if x["op"] == "incr"]
    assert len(incrs) > 20 and max(incrs) > 2  # counting up from each DEL (the checker holds each to its number)
    hsets = [x for x in lines if x["op"] == "hset"]
    assert any(x.get("wrongtype") for x in hsets) and not all(x.get("wrongtype") for x in hsets)
    assert any(x["op"] == "get" and x.get("wrongtype") for x in lines)  # reads of the hashes they made
    assert check(lincheck, tmp_path, lines).returncode == 0
    i = next(i for i, x in enumerate(lines) if x["op"] == "get" and x.get("via") == "exec" and x["value"])
    bad = [dict(x, value="never written") if j == i else x for j, x in enumerate(lines)]
    assert check(lincheck, tmp_path, bad).returncode == 1
    i = next(i for i, x in enumerate(lines) if x["op"] == "incr")
    bad = [dict(x, value=str(int(x["value"]) + 1)) if j == i else x for j, x in enumerate(lines)]
    assert check(lincheck, tmp_path, bad).returncode == 1  # an INCR that answered a number one too high


def test_clients_through_a_gateway_killed_and_restarted_check_clean(
    lincheck: Path, tmp_path: Path, shim: ShimThread
) -> None:
    """Issue 47: half the clients speak RESP (redis-py) through a gateway, over the whole mix; the gateway is
    killed twice while they run and started again on its port: the writes it had in flight are recorded with an
    unknown outcome, its clients reconnect, and the history checks clean (a flipped read through it is caught)."""
    history = tmp_path / "resp.jsonl"
    with gateway_of(tmp_path, CLUSTER, {"r0s0": shim.port}, timeout="3s") as (proc, port, argv):
        procs = [proc]

        def kill_twice() -> None:
            for _ in range(2):
                time.sleep(0.8)
                procs[-1].kill()
                procs[-1].wait(5)
                time.sleep(0.2)
                again = argv[:]
                again[again.index("--listen") + 1] = f"127.0.0.1:{port}"
                procs.append(start_gateway(again, tmp_path / "gateway-again.err")[0])

        killer = threading.Thread(target=kill_twice)
        killer.start()
        stats = record_history(
            shim, history, clients=6, gateway=f"127.0.0.1:{port}", gateway_clients=3, duration=3.0, rate=150.0,
            read_ratio=0.5, delete_ratio=0.2, exec_ratio=0.2, ttl_ratio=0.2, long_keys=1, stream_ratio=0.2,
            counter_keys=1, hash_ratio=0.1,
        )  # fmt: skip
        killer.join()
        for p in procs[1:]:
            p.terminate()
            p.wait(5)
    lines = [json.loads(x) for x in history.read_text().splitlines()]
    resp = [x for x in lines if x.get("via") == "resp"]
    assert {x["op"] for x in resp} == {"get", "put", "delete", "incr", "hset"} and len(resp) > 300
    assert any(x.get("stream") for x in resp) and any(x.get("ttl_ms") for x in resp)
    assert {x["client"] for x in resp} == {0, 1, 2}  # the first three clients, the others client_lib's
    assert stats.ops == len(lines)  # (a refused connection, the gateway restarting, sent nothing: no line)
    assert check(lincheck, tmp_path, lines).returncode == 0
    i = next(i for i, x in enumerate(lines) if x.get("via") == "resp" and x["op"] == "get" and x["value"])
    bad = [dict(x, value="never written") if j == i else x for j, x in enumerate(lines)]
    assert check(lincheck, tmp_path, bad).returncode == 1


def test_a_resp_write_cut_off_by_a_gateway_kill_has_an_unknown_outcome(
    tmp_path: Path, shim: ShimThread, peer: SwitchPeer
) -> None:
    """A write the gateway had sent when it was killed may still be applied: unknown, open for the datagrams in
    flight; a command to a gateway that is not there (restarting) was never sent: no operation at all."""
    from loadgen.history import NotSentError, RespClient

    async def write(address: str) -> dict:
        rc, line = RespClient(address, 10.0), {}
        try:
            await rc.run(Request("lin0", "put", "cut-off"), line, HistoryStats())  # lin0: cached, phase 1 runs
        finally:
            await rc.close()
        return line

    with gateway_of(tmp_path, CLUSTER, {"r0s0": shim.port}, timeout="3s") as (proc, port, _):
        peer.mute = True  # phase 1 waits for acknowledgements that do not come: the write is held in flight
        threading.Timer(0.3, proc.kill).start()
        with pytest.raises(RequestTimeoutError, match="connection broke"):
            asyncio.run(write(f"127.0.0.1:{port}"))
        peer.mute = False
        with pytest.raises(NotSentError):
            asyncio.run(write(f"127.0.0.1:{port}"))


def test_recorded_history_with_a_flipped_delete_status_is_a_violation(
    lincheck: Path, tmp_path: Path, shim: ShimThread
) -> None:
    """One client, so every key's state is known at each delete: flipping any one status must be caught."""
    history = tmp_path / "recorded.jsonl"
    stats = record_history(shim, history, clients=1, ops=200, read_ratio=0.3, delete_ratio=0.5)
    lines = [json.loads(x) for x in history.read_text().splitlines()]
    assert stats.ops == len(lines) == 200 and stats.unknown == 0  # sequential, every outcome known
    assert check(lincheck, tmp_path, lines).returncode == 0
    for status in (True, False):
        i = next(i for i, x in enumerate(lines) if x["op"] == "delete" and x["found"] is status)
        bad = [dict(x, found=not status) if j == i else x for j, x in enumerate(lines)]
        proc = check(lincheck, tmp_path, bad)
        assert (proc.returncode, proc.stdout) == (1, f"ops={len(lines)} violations=1\n"), proc.stderr
        assert proc.stderr.startswith(f"violation key={lines[i]['key']} ")


def test_recorder_requests_follow_the_seed(tmp_path: Path, shim: ShimThread) -> None:
    """What each client asks is a function of (seed, client id): the recorded requests are the plan's."""
    cfg = HistoryConfig(keys=HOT, clients=3, ops=40, seed=11, client_id_base=5)
    assert list(plan(cfg, 6)) == list(plan(HistoryConfig(keys=HOT, clients=3, ops=40, seed=11), 6))
    assert list(plan(cfg, 6)) != list(plan(HistoryConfig(keys=HOT, ops=40, seed=12), 6))
    assert list(plan(cfg, 6)) != list(plan(cfg, 7))
    long = [r.op for r in plan(HistoryConfig(ops=20000), 0)]
    writes = len(long) - long.count("get")
    assert abs(long.count("get") / len(long) - 0.7) < 0.02 and abs(long.count("delete") / writes - 0.15) < 0.02
    history = tmp_path / "recorded.jsonl"
    record_history(shim, history, clients=3, ops=40, seed=11, client_id_base=5)
    got: dict[int, list[Request]] = {}
    for x in map(json.loads, history.read_text().splitlines()):
        got.setdefault(x["client"], []).append(Request(x["key"], x["op"], x.get("value") if x["op"] == "put" else None))
    assert got == {cid: list(plan(cfg, cid)) for cid in (5, 6, 7)}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("delete_ratio", 1.5, "HistoryConfig.delete_ratio must be a number in [0, 1], not 1.5"),
        ("read_ratio", "0.7", "HistoryConfig.read_ratio must be a number in [0, 1], not '0.7'"),
        ("keys", 0, "HistoryConfig.keys must be a positive integer, not 0"),
        ("ops", -1, "HistoryConfig.ops must be an integer >= 0, not -1"),
        ("duration", 0, "HistoryConfig.duration must be a positive number of seconds, not 0"),
    ],
)
def test_history_config_rejects_bad_fields(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError) as e:
        HistoryConfig(**{field: value})  # type: ignore[arg-type]
    assert str(e.value) == message


def test_a_rate_bounds_the_requests_each_client_makes(tmp_path: Path, shim: ShimThread) -> None:
    """``rate`` keeps each client to that many requests a second (what keeps a long fault-matrix cell's history
    small enough for the checker), and a bad one is refused with one line."""
    t0 = time.monotonic()
    stats = record_history(shim, tmp_path / "paced.jsonl", clients=2, duration=1.0, rate=20.0)
    assert time.monotonic() - t0 < 3.0
    assert 30 <= stats.ops <= 2 * 21  # 20 a second each, over one second
    with pytest.raises(ValueError, match="rate must be"):
        HistoryConfig(rate=-1)
