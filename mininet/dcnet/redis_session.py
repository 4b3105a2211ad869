"""A short redis-cli session against a client host's gateway: what ``make run`` ends with.

Stock redis-cli, on the client host, talks to the host's gateway (``distcache-gateway``, port 6379 of the host's
own address) as to any redis-server: the hottest key of the workload is answered by a switch (the gateway's INFO
counts the hit), a 1 MB value is stored and read back whole (the stream path), and a long key is then read by
redis-cli on its storage host, from that host's own redis-server (as the read-only user), under the same name.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass

from dcnet.deploy import Deployment
from loadgen.values import key_of


@dataclass
class Step:
    """One command of the session: where it ran, what it was, what it printed."""

    host: str
    command: str
    output: str


def _cache_hits(out: str) -> int:
    for line in out.splitlines():
        if line.startswith("cache_hits:"):
            return int(line.split(":", 1)[1])
    raise ValueError("the gateway's INFO has no cache_hits")


def session(dep: Deployment) -> tuple[list[Step], bool]:
    """Run the session on the first client host; its steps, and whether the hot key was answered by a switch."""
    client = dep.cluster.clients()[0]
    host = dep.client_host(client.name)
    ip, port = host.gateway_address.split(":")
    steps: list[Step] = []

    def cli(*args: str, stdin: str = "", show: str = "") -> str:
        line = f"redis-cli -h {ip} -p {port} {shlex.join(args)}{stdin}"
        out = host.cmd(line).strip()  # type: ignore[attr-defined]
        steps.append(Step(client.name, show or line, out))
        return out

    hot = key_of(0)
    before = _cache_hits(host.cmd(f"redis-cli -h {ip} -p {port} INFO distcache"))  # type: ignore[attr-defined]
    cli("GET", hot)
    by_switch = _cache_hits(host.cmd(f"redis-cli -h {ip} -p {port} INFO distcache")) - before == 1  # type: ignore[attr-defined]
    big = dep.run_dir / "session-1mb.bin"
    big.write_bytes(os.urandom(1 << 20))
    cli("-x", "SET", "session:1mb", stdin=f" < {big}")
    length = host.cmd(f"redis-cli -h {ip} -p {port} --raw GET session:1mb | head -c -1 | wc -c").strip()  # type: ignore[attr-defined]
    steps.append(Step(client.name, f"redis-cli -h {ip} -p {port} --raw GET session:1mb | head -c -1 | wc -c", length))
    long_key = "session:" + "long-key-" * 24  # 224 bytes
    cli("SET", long_key, "stored under its own name")
    server = dep.cluster.server_for_key(dep.cluster.digest(long_key))
    storage = dep.host(server.name)
    secret = f"REDISCLI_AUTH=$(cat {dep.redis_users.reader_password_file})"
    read = f"redis-cli --no-auth-warning -s {dep.redis_socket(server)} --user reader GET {shlex.quote(long_key)}"
    steps.append(Step(server.name, read, storage.cmd(f"{secret} {read}").strip()))  # type: ignore[attr-defined]
    return steps, by_switch
