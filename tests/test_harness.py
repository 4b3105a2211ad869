"""The harness library the tests, the benchmarks and dcnet share: redis-server, profiles, processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from harness.profile import summarize_profile
from harness.redis import redis_argv, wait_for_redis

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")


def test_a_durable_redis_keeps_what_it_acknowledged_across_a_kill(tmp_path: Path) -> None:
    sock = tmp_path / "r.sock"
    argv = redis_argv(sock, tmp_path, durable=True, appendfsync="always", name="r", logfile=tmp_path / "r.log")
    proc = subprocess.Popen(argv)
    try:
        wait_for_redis(sock, proc)
        redis.Redis(unix_socket_path=str(sock)).set("k", "v")
        proc.kill()
        proc.wait(5)
        proc = subprocess.Popen(argv)
        wait_for_redis(sock, proc)
        assert redis.Redis(unix_socket_path=str(sock)).get("k") == b"v"
        assert (tmp_path / "r.aof").is_dir()
    finally:
        proc.kill()
        proc.wait(5)


def test_a_redis_that_cannot_start_is_one_clear_error(tmp_path: Path) -> None:
    sock = tmp_path / "r.sock"
    proc = subprocess.Popen(redis_argv(sock, tmp_path / "missing"), stdout=subprocess.DEVNULL)
    with pytest.raises(RuntimeError, match="exited with code"):
        wait_for_redis(sock, proc, timeout=5)


def test_a_child_dies_with_its_parent(tmp_path: Path) -> None:
    """die_with_parent: killing the parent (SIGKILL: no cleanup of its own) takes the child with it."""
    pidfile = tmp_path / "child.pid"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "from harness.processes import die_with_parent\n"
            "p = subprocess.Popen(['sleep', '60'], preexec_fn=die_with_parent)\n"
            f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
            "time.sleep(60)\n",
        ],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    deadline = time.monotonic() + 10
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pidfile.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait(5)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        state = Path(f"/proc/{child}/stat").read_text().split()[2] if Path(f"/proc/{child}/stat").exists() else "X"
        if state == "Z":
            break
        time.sleep(0.05)
    alive = Path(f"/proc/{child}/stat").exists() and Path(f"/proc/{child}/stat").read_text().split()[2] != "Z"
    assert not alive, "the child outlived its parent"


def test_a_profile_counts_the_main_thread_and_leaves_torn_stacks_out(tmp_path: Path) -> None:
    raw = tmp_path / "p.txt"
    raw.write_text(
        "thread (0x1): MainThread;<module> (a.py:1);loop (a.py:5);parse (b.py:9) 6\n"
        "thread (0x1): MainThread;<module> (a.py:1);loop (a.py:5);send (c.py:3) 3\n"
        "thread (0x1): MainThread;parse (b.py:9) 1\n"  # torn: not the usual outermost frame
        "thread (0x2): grpc-worker;<module> (a.py:1);serve (g.py:1) 50\n"  # another thread
    )
    p = summarize_profile(raw, categories=[("parsing", lambda f, _file: f == "parse")])
    assert p["samples"] == 9 and p["torn_samples"] == 1
    assert p["own_percent"] == {"parse (b.py)": 66.7, "send (c.py)": 33.3}
    assert p["own_percent_by_file"] == {"b.py": 66.7, "c.py": 33.3}
    assert "loop (a.py)" not in p["inclusive_percent"]  # on every stack: says nothing
    assert p["category_percent"] == {"parsing": 66.7, "other": 33.3}
