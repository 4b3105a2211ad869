"""A real shim on loopback for tests: its coherence peer and the shim (build/distcache-shim) as a process.

The switches' part in coherence is played by a UDP peer on 127.0.0.1 that reflects INVALIDATE/UPDATE
as acknowledgements (and can drop some), records what it saw, and checks Redis at the moment phase 1
arrives.  It is the shim's network peer, not a stand-in for any code under test.
"""

from __future__ import annotations

import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from client_lib import Client
from distcache.cluster import Cluster
from distcache.hashing import N_SPINE_BUCKETS
from distcache.rpc.shim import ShimLink
from distcache.wire import Message, Op, decode, encode
from harness.processes import SHIM_BINARY, SHIM_BREAKS_BINARY

CLUSTER = Cluster(spines=2)


class SwitchPeer:
    """Plays the coherence path's far end: acknowledges, records, optionally drops."""

    def __init__(self, redis_sock: Path, **login: str) -> None:
        """``login``: ``username`` and ``password`` of a Redis with ACL users (it reads what a packet's key holds)."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.seen: list[tuple[Message, bytes | None]] = []  # message, Redis value when it arrived
        self.drop = 0  # drop this many upcoming packets
        self.mute = False  # never answer
        self.answer_only: set[int] | None = None  # answer only packets addressed to these spines
        self.redis = redis.Redis(unix_socket_path=str(redis_sock), **login)  # type: ignore[arg-type]
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data, addr = self.sock.recvfrom(2048)
            except TimeoutError:
                continue
            m = decode(data)
            try:
                at_redis = self.redis.get(m.key)
            except redis.ResponseError:  # the key holds a hash, a list...
                at_redis = None
            self.seen.append((decode(data), at_redis))
            if self.mute or (self.answer_only is not None and m.target not in self.answer_only):
                continue
            if self.drop:
                self.drop -= 1
                continue
            m.op = m.op.reply()
            self.sock.sendto(encode(m), addr)

    def ops(self) -> list[tuple[Op, int]]:
        return [(m.op, m.seq) for m, _ in self.seen]

    def close(self) -> None:
        self._stop.set()
        self.thread.join(2)
        self.sock.close()
        self.redis.close()


class ShimThread:
    """A real shim (build/distcache-shim) on loopback with its control channel, as a process of its own."""

    def __init__(
        self,
        redis_sock: Path,
        peer: SwitchPeer,
        control: Path,
        state_file: Path | None = None,
        cluster: Cluster = CLUSTER,
        fresh: bool = True,
        server: str = "r0s0",
        breaks: tuple[str, ...] = (),
        **shim_options: object,
    ) -> None:
        """``shim_options``: more of its options by their Python names (``dedup_memory``, ``dedup_span`` in
        seconds, ``stream_budget``, ``max_value``, ``redis_username`` and ``redis_password``); ``breaks``:
        tests/breaks.py names armed in the breaks build."""
        folder = control.parent
        cluster_file = folder / f"{control.stem}.cluster.json"
        cluster.save(cluster_file)
        argv = [
            str(SHIM_BREAKS_BINARY if breaks else SHIM_BINARY),
            "--cluster", str(cluster_file), "--server", server,
            "--listen", "127.0.0.1", "--port", "0", "--redis-url", f"unix://{redis_sock}",
            "--control", f"unix:{control}", "--coherence-peer", f"127.0.0.1:{peer.port}",
            "--log-file", str(folder / f"{control.stem}.shim.log"), "--log-level", "debug",
        ]  # fmt: skip
        if state_file is not None:
            argv += ["--state-file", str(state_file)]
        if fresh:
            argv.append("--fresh")
        options = dict(shim_options)
        password = options.pop("redis_password", None)
        if (user := options.pop("redis_username", None)) is not None:
            pw_file = folder / f"{control.stem}.redis-password"
            pw_file.write_text(str(password))
            argv += ["--redis-user", str(user), "--redis-password-file", str(pw_file)]
        if (span := options.pop("dedup_span", None)) is not None:
            argv += ["--dedup-span", f"{float(span)}s"]  # type: ignore[arg-type]
        for name, value in options.items():
            argv += [f"--{name.replace('_', '-')}", str(value)]
        if breaks:
            argv += ["--breaks", ",".join(breaks)]
        errors = folder / f"{control.stem}.shim.err"
        with open(errors, "w") as err:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        m = re.search(r"listen=[\d.]+:(\d+)", line)
        if m is None:
            self.proc.kill()
            self.proc.wait(5)
            raise RuntimeError(f"the shim did not start: {line!r} {errors.read_text().strip()}")
        self.port = int(m.group(1))
        self.control_addr = f"unix:{control}"
        self.link = ShimLink(self.control_addr)
        self.closed = False

    def stats(self) -> dict:
        """Its Stats (the control API's)."""
        return self.link.stats()

    def kill(self) -> None:
        """A crash: SIGKILL, nothing flushed or saved on the way out."""
        self.closed = True
        self.proc.kill()
        self.proc.wait(5)

    def close(self) -> None:
        """Stop the shim (SIGTERM; again: nothing)."""
        if self.closed:
            return
        self.closed = True
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


@dataclass
class LoopbackShim:
    """A running shim on loopback with its coherence peer, its control link and a client of it."""

    client: Client
    shim: ShimThread
    peer: SwitchPeer
    link: ShimLink


@contextmanager
def shim_on_loopback(redis_sock: Path, control: Path, cluster: Cluster = CLUSTER) -> Iterator[LoopbackShim]:
    """Redis emptied, a shim of ``cluster``'s server r0s0 whose partition gives every bucket to the first
    spine, and a client that sends every request to it (no retries); all stopped on exit."""
    redis.Redis(unix_socket_path=str(redis_sock)).flushall()
    peer = SwitchPeer(redis_sock)
    shim = ShimThread(redis_sock, peer, control, cluster=cluster)
    link = ShimLink(shim.control_addr)
    link.partition([cluster.spine(0).switch_id] * N_SPINE_BUCKETS)
    client = Client(cluster, resolve=lambda _host: ("127.0.0.1", shim.port), timeout=3.0, retries=0)
    try:
        yield LoopbackShim(client, shim, peer, link)
    finally:
        client.close()
        shim.close()
        peer.close()
