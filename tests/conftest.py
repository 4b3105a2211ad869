"""Fixtures several test modules share."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from distcache.cluster import Cluster
from distcache.p4names import MAX_SWITCHES
from harness.ports import ReservedPorts
from harness.processes import stop_group, tied_argv
from harness.redis import redis_argv, wait_for_redis
from tests.ptf import suites

PTF, UNIT, MODEL = "tests/ptf/", "tests/unit/", "tests/unit/test_model.py"


@pytest.hookimpl(trylast=True)  # after the folders' hooks marked their items and -m/-k deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The model's checks, then the PTF suites' go last.  The PTF runs start in the background when the unit
    tests begin (or with the first check) and mostly wait, side by side, while the unit tests run
    (tests/ptf/suites.py); the model's verifiers are compiled in the background from the start, at idle
    priority, in the CPU the Mininet scenarios leave idle (test_model.build_ahead)."""
    ptf = [i for i in items if i.nodeid.startswith(PTF)]
    model = [i for i in items if i.nodeid.startswith(MODEL)]
    items[:] = [i for i in items if not i.nodeid.startswith((PTF, MODEL))] + model + ptf
    config.stash[PTF_TARGETS] = suites.selected_targets(items)
    if model and len(items) > len(model) and shutil.which("rumur") and shutil.which("cc"):
        _BUILDING.append(
            subprocess.Popen(
                tied_argv(["chrt", "--idle", "0", sys.executable, "-c", _BUILD_AHEAD]),
                cwd=Path(__file__).resolve().parent.parent,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )


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
    for proc in _BUILDING:
        stop_group(proc, grace=1)


_BUILD_AHEAD = "from tests.unit.test_model import build_ahead; build_ahead()"
_BUILDING: list[subprocess.Popen] = []


PTF_TARGETS = pytest.StashKey[list[str]]()


@pytest.fixture(scope="session", autouse=True)
def _service_ports_reserved() -> Iterator[None]:
    """The default cluster's service ports (every switch id's), kept from outgoing connections for the whole
    session (as root; harness.ports): a deployment reserves its own only while it runs, and a port a
    connection took between two deployments stays in TIME_WAIT for 60 s (CI: "bmv2 sp2 did not open
    127.0.0.1:50054")."""
    c = Cluster()
    ports = [*range(c.grpc_base_port, c.grpc_base_port + MAX_SWITCHES)]
    ports += [*range(c.agent_base_port, c.agent_base_port + MAX_SWITCHES), *c.listening_ports()]
    with ReservedPorts(ports):
        yield


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
