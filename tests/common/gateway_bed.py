"""Storage servers and a Redis-protocol gateway on loopback, for tests that drive the gateway with stock clients.

Each storage server is a real redis-server and shim (tests/common/shim_bed.py, with its coherence peer); the
gateway (build/distcache-gateway) fronts them all, reached by any Redis client at ``host:port``.  There are no
switches: every request is answered by its key's shim.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

from distcache.cluster import Cluster
from harness.processes import gateway_argv
from harness.redis import redis_argv, wait_for_redis
from tests.common.shim_bed import ShimThread, SwitchPeer


@dataclass
class GatewayBed:
    """A gateway in front of a cluster's storage servers, all on loopback."""

    cluster: Cluster
    host: str
    port: int
    proc: subprocess.Popen
    #: each storage server's own redis-server, by server name (read it to see what the gateway stored)
    stores: dict[str, redis.Redis] = field(default_factory=dict)
    shims: dict[str, ShimThread] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)

    def server_of(self, key: str | bytes) -> str:
        """The storage server that owns ``key``."""
        return self.cluster.server_for_key(self.cluster.digest(key)).name

    def stop(self) -> None:
        """Stop the gateway (SIGTERM)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(5)


def start_gateway(argv: list[str], err: Path) -> tuple[subprocess.Popen, int]:
    """Run a gateway and wait for its ready line; its port, or RuntimeError with what it said."""
    with open(err, "w") as e:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=e, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    m = re.search(r"listen=[\d.]+:(\d+)", line)
    if m is None:
        proc.kill()
        proc.wait(5)
        raise RuntimeError(f"the gateway did not start: {line!r} {err.read_text().strip()}")
    return proc, int(m.group(1))


@contextmanager
def gateway_of(
    folder: Path, cluster: Cluster, shims: dict[str, int], port: int = 0, **options: object
) -> Iterator[tuple[subprocess.Popen, int, list[str]]]:
    """A gateway of ``cluster`` whose storage servers' shims listen on loopback at ``shims`` (name -> port): its
    process, port and command line (to start it again on the same port); stopped on exit."""
    cluster_file = folder / "gateway-cluster.json"
    cluster.save(cluster_file)
    opts: dict[str, object] = {"--cluster": cluster_file, "--listen": f"127.0.0.1:{port}",
                               "--server-address": [f"{n}=127.0.0.1:{p}" for n, p in shims.items()]}  # fmt: skip
    opts.update({f"--{k.replace('_', '-')}": v for k, v in options.items()})
    argv = gateway_argv(opts)
    proc, got = start_gateway(argv, folder / "gateway.err")
    try:
        yield proc, got, argv
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(5)


@contextmanager
def gateway_on_loopback(folder: Path, servers: int = 2, **options: object) -> Iterator[GatewayBed]:
    """``servers`` storage servers (one rack) and a gateway in front of them; ``options``: more of the gateway's
    options by their Python names (``password_file``, ``timeout``...)."""
    cluster = Cluster(spines=2, servers_per_rack=servers)
    cluster_file = folder / "cluster.json"
    cluster.save(cluster_file)
    with ExitStack() as stack:
        stores, shims, addresses = {}, {}, []
        for host in cluster.servers():
            d = folder / host.name
            d.mkdir()
            sock = d / "redis.sock"
            rproc = subprocess.Popen(redis_argv(sock, d), stdout=subprocess.DEVNULL)
            stack.callback(lambda p=rproc: (p.terminate(), p.wait(5)))
            wait_for_redis(sock, rproc)
            peer = SwitchPeer(sock)
            stack.callback(peer.close)
            shim = ShimThread(sock, peer, d / "control.sock", cluster=cluster, server=host.name)
            stack.callback(shim.close)
            stores[host.name] = redis.Redis(unix_socket_path=str(sock))
            stack.callback(stores[host.name].close)
            shims[host.name] = shim
            addresses.append(f"{host.name}=127.0.0.1:{shim.port}")
        opts: dict[str, object] = {"--cluster": cluster_file, "--listen": "127.0.0.1:0", "--server-address": addresses}
        opts.update({f"--{k.replace('_', '-')}": v for k, v in options.items()})
        argv = gateway_argv(opts)
        proc, port = start_gateway(argv, folder / "gateway.err")
        bed = GatewayBed(cluster, "127.0.0.1", port, proc, stores, shims, argv)
        stack.callback(bed.stop)
        yield bed
