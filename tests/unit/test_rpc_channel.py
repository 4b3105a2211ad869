"""Waiting for a gRPC server: ready when one answers, not ready (within the deadline) when none does."""

from __future__ import annotations

import socket
import time
from concurrent import futures

import grpc

from distcache.rpc.channel import channel_ready


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_running_server_is_ready() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            assert channel_ready(ch, 5.0)
    finally:
        server.stop(0)


def test_nobody_listening_is_not_ready_within_the_deadline() -> None:
    with grpc.insecure_channel(f"127.0.0.1:{_unused_port()}") as ch:
        t0 = time.monotonic()
        assert not channel_ready(ch, 0.3)
        assert 0.3 <= time.monotonic() - t0 < 3.0
