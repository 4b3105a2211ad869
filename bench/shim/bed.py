"""The loopback bed: redis-server on a Unix socket (harness.redis), the shim started as a deployment starts it
but on loopback with a coherence peer, the generators; and the GET phase's keys preloaded into Redis."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

from bench.shim.children import Processes
from bench.shim.config import GET_KEYS, HOST, VALUE
from bench.shim.generators import load_generator
from bench.shim.servers import coherence_peer
from distcache.cluster import Cluster
from distcache.wire import DC_PORT
from harness.redis import redis_argv, wait_for_redis


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
        cwd=Path(__file__).resolve().parents[2],
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
    """Store the GET phase's keys straight into Redis, where the shim looks them up."""
    import redis

    keys = tuple(f"bench:get:{i}" for i in range(GET_KEYS))
    r = redis.Redis(unix_socket_path=str(env.redis_sock))
    with r.pipeline(transaction=False) as p:
        for k in keys:
            p.set(k, VALUE)
        p.execute()
    r.close()
    return keys
