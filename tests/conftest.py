"""Fixtures several test modules share."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.redis import redis_argv, wait_for_redis
from tests.ptf import suites

PTF, UNIT = "tests/ptf/", "tests/unit/"


@pytest.hookimpl(trylast=True)  # after the folders' hooks marked their items and -m/-k deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The PTF suites' checks go last; their runs start in the background when the unit tests begin (or with
    the first check) and mostly wait, side by side, while the unit tests run (tests/ptf/suites.py)."""
    items[:] = [i for i in items if not i.nodeid.startswith(PTF)] + [i for i in items if i.nodeid.startswith(PTF)]
    config.stash[PTF_TARGETS] = suites.selected_targets(items)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """With the first unit test (or PTF check): start the PTF suites, then lower this process to nice 19, so
    the unit tests (CPU-bound, timing-free) take only what the suites leave: a PTF test's timing (a spine
    silent past its dead time) failed on two cores shared with them at equal priority."""
    targets = item.config.stash.get(PTF_TARGETS, [])
    if targets and item.nodeid.startswith((UNIT, PTF)) and not suites.RUNS:
        suites.start(targets)
        if item.nodeid.startswith(UNIT):
            os.nice(19 - os.nice(0))


def pytest_sessionfinish() -> None:
    suites.stop_all()


PTF_TARGETS = pytest.StashKey[list[str]]()


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
