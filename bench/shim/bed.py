"""The processes of ``make bench-shim``: a redis-server (Unix socket for its shim, TCP for direct clients),
the shim in front of it, the coherence peer and the load generator, and what each spent.

All on loopback: the redis-server on a socket in a temp dir and a free 127.0.0.1 port, the shim on
127.0.0.1:8888 (refused at once if that is taken), the peer on a free port.  Every process is stopped at the
end, also on Ctrl-C (bench.shim.children).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from bench.shim.children import Processes
from bench.shim.config import DEDUP_MEMORY, HOST, STORAGEBENCH
from distcache.cluster import Cluster
from distcache.hashing import N_SPINE_BUCKETS
from distcache.rpc.shim import ShimLink
from distcache.wire import DC_PORT
from harness.processes import SHIM_BINARY
from harness.redis import redis_argv, wait_for_redis

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has spent (/proc/PID/stat, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@dataclass
class Storage:
    """One storage server: its redis-server and, in front of it, its shim with the peer playing the switches."""

    redis: subprocess.Popen
    sock: Path
    port: int  # the redis-server's TCP port: what a client on another host would reach
    shim: subprocess.Popen
    link: ShimLink
    cluster_file: Path

    def counters(self) -> dict[str, int]:
        """Calls per command from Redis' INFO commandstats (``get``, ``set``, ``evalsha``...), and its own count of
        key lookups (``lookups``: keyspace hits and misses, one per key a read looks up, whatever the command)
        and of writes (``writes``: changes since the last save, one per key a write changes)."""
        r = redis.Redis(unix_socket_path=str(self.sock))
        try:
            info = r.info("commandstats")
            stats, persistence = r.info("stats"), r.info("persistence")
        finally:
            r.close()
        out = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}
        out["lookups"] = int(stats["keyspace_hits"]) + int(stats["keyspace_misses"])
        out["writes"] = int(persistence["rdb_changes_since_last_save"])
        return out


def start_storage(procs: Processes, tmp: Path, durable: bool, peer_port: int, shim: Path = SHIM_BINARY) -> Storage:
    """A redis-server (appendfsync always if ``durable``, else no persistence) and its shim (the program ``shim``:
    fresh, its whole partition on spine 1, coherence to the peer)."""
    name = "durable" if durable else "volatile"
    folder = tmp / name
    folder.mkdir()
    sock, port = folder / "redis.sock", free_port()
    # the storage host's redis-server (harness.redis), reachable on a loopback port too for the direct rows
    argv = [*redis_argv(sock, folder, durable=durable, appendfsync="always"), "--port", str(port), "--bind", HOST]
    rproc = procs.popen(f"redis-{name}", argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_redis(sock, rproc, 10.0)
    cluster_file = folder / "cluster.json"
    Cluster(spines=1).save(cluster_file)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # one clear line beats the shim's error
        try:
            probe.bind((HOST, DC_PORT))
        except OSError as e:
            raise RuntimeError(f"UDP {HOST}:{DC_PORT} is taken ({e.strerror}); another bench-shim?") from None
    if not shim.exists():
        raise RuntimeError(f"{shim} is not built: run make build")
    control = folder / "shim.sock"
    sproc = procs.popen(
        f"shim-{name}",
        [str(shim), "--cluster", str(cluster_file), "--server", "r0s0", "--listen", HOST,
         "--redis-url", f"unix://{sock}", "--control", f"unix:{control}", "--fresh",
         "--coherence-peer", f"{HOST}:{peer_port}", "--log-file", str(folder / "shim.log"),
         "--dedup-memory", DEDUP_MEMORY],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    line = sproc.stdout.readline() if sproc.stdout else ""
    if not line.startswith("shim ready"):
        raise RuntimeError(f"the shim did not start: {line.strip() or (folder / 'shim.log').read_text()[-500:]}")
    link = ShimLink(f"unix:{control}")
    link.partition([1] * N_SPINE_BUCKETS)
    return Storage(rproc, sock, port, sproc, link, cluster_file)


def start_peer(procs: Processes) -> tuple[subprocess.Popen, int]:
    """The coherence peer (storagebench -side peer): it reflects INVALIDATE and UPDATE as their acks."""
    proc = procs.popen(
        "peer", [str(STORAGEBENCH), "-side", "peer", "-addr", f"{HOST}:0"], stdout=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("peer ready"):
        raise RuntimeError(f"the coherence peer did not start: {line!r}")
    return proc, int(line.rsplit(":", 1)[1])


def generate(argv: list[str], timeout: float) -> tuple[dict, float]:
    """Run the load generator; its JSON result and the wall time it took."""
    began = time.monotonic()
    out = subprocess.run([str(STORAGEBENCH), *argv], capture_output=True, text=True, timeout=timeout, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"storagebench {' '.join(argv)}: {out.stderr.strip() or out.stdout.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1]), time.monotonic() - began
