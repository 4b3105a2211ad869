"""Fixtures several test modules share."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def redis_sock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real redis-server on a Unix socket (no TCP port, no persistence), for one test module."""
    d = tmp_path_factory.mktemp("redis")
    sock = d / "redis.sock"
    proc = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", str(sock), "--save", "", "--appendonly", "no", "--dir", str(d)],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(100):
        if sock.exists():
            break
        time.sleep(0.05)
    yield sock
    proc.terminate()
    proc.wait(5)
