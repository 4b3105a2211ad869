"""Fixtures several test modules share."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.redis import redis_argv, wait_for_redis


@pytest.fixture(scope="module")
def redis_sock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real redis-server on a Unix socket (no TCP port, no persistence), for one test module."""
    d = tmp_path_factory.mktemp("redis")
    sock = d / "redis.sock"
    proc = subprocess.Popen(redis_argv(sock, d), stdout=subprocess.DEVNULL)
    wait_for_redis(sock, proc)
    yield sock
    proc.terminate()
    proc.wait(5)
