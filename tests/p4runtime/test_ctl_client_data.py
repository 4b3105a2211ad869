"""``distcache-ctl`` shows what clients chose exactly as they chose it (issue 15, defect 7).

A key is client data: any client can write a key named ``[/]`` or ``[bold]x[/bold]``.  Once a
switch caches it, ``distcache-ctl hot`` printed it as rich markup: ``[/]`` crashed the command
(MarkupError) and ``[bold]x[/bold]`` came out as a bold ``x``; Hybrid's replicated keys in
``status`` likewise.  Here a real controller (``controller.controller.Controller`` behind its gRPC
service) runs over real softswitches and real agents on loopback, the agents cache such keys, the
controller's state holds them as Hybrid's replicated keys, and the real ``distcache-ctl`` must show
every one of them as data: switches and the controller know a key by its digest (protocol v2), which they
show in hex, so no key a client chose reaches the terminal as markup.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import text_format

from controller.controller import Controller
from controller.service import serve
from controller.state import ControllerState
from distcache.cluster import Cluster, Mechanism
from softswitch.dataplane import PROGRAM
from tests.common.control_bed import start_agent, start_switches
from tests.common.keys import digest
from tests.common.softswitch_helpers import ports_free

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
# keys a client may write, as markup; the controller shows each by its digest
KEYS = ["[/]", "[bold]x[/bold]", "[link=f]a[/]", "[red]", "[link=file:///etc]a[/link]"]
SHOWN = [digest(k).hex() for k in KEYS]


def _cluster() -> Cluster:
    for base in range(22000 + os.getpid() % 89 * 200, 60000, 991):
        c = Cluster(
            spines=1,
            storage_racks=1,
            client_racks=1,
            cache_slots=16,
            mechanism=Mechanism.HYBRID,
            grpc_base_port=base,
            agent_base_port=base + 256,
            controller_address=f"127.0.0.1:{base + 255}",
        )
        if ports_free([sw.grpc_port for sw in c.switches()] + [base + 255, base + 256 + 1, base + 256 + 64]):
            return c
    raise RuntimeError("no free loopback ports")


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Cluster]]:
    tmp = tmp_path_factory.mktemp("ctl")
    cluster = _cluster()
    p4info = tmp / "p4info.txt"
    p4info.write_text(text_format.MessageToString(PROGRAM.p4info()))
    state = tmp / "controller.state.json"
    ControllerState(mechanism="hybrid", replicated=sorted(digest(k).hex() for k in KEYS)).save(state)
    closers = []
    try:
        start_switches(cluster, closers)
        agents = {
            sw.name: start_agent(cluster, sw, p4info, tmp, closers, state_file=tmp / f"agent-{sw.name}.json")
            for sw in (cluster.spine(0), cluster.storage_leaf(0))
        }
        ctl = Controller(cluster, p4info, lambda h: f"unix:{tmp / f'shim-{h.name}.sock'}", b"", state)
        ctl.start(timeout=20, monitor=False)
        closers.append(ctl.close)
        server = serve(ctl, cluster.controller_address)
        closers.append(lambda: server.stop(0))
        for agent in agents.values():
            for k in KEYS:  # what an agent does with a key its switch's detector reported hot
                agent.insert(digest(k))
        yield cluster.controller_address, cluster
    finally:
        for close in reversed(closers):
            close()


def ctl(address: str, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "controller.ctl", "--controller", address, "--timeout", "20", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def _cells(out: str) -> set[str]:
    """Every table cell of rich's output, stripped."""
    return {c.strip() for line in out.splitlines() for c in line.split("│")}


def test_hot_shows_every_key_exactly_as_written(controller: tuple[str, Cluster]) -> None:
    address, _ = controller
    for switch in ("sl0", "sp0"):
        res = ctl(address, "hot", "--switch", switch, "--top", "20")
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
        assert set(SHOWN) <= _cells(res.stdout), res.stdout


def test_status_shows_replicated_keys_exactly_as_written(controller: tuple[str, Cluster]) -> None:
    address, _ = controller
    res = ctl(address, "status")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("replicated in every spine"))
    assert line == f"replicated in every spine ({len(KEYS)}): " + ", ".join(sorted(SHOWN)), line


def test_an_error_quoting_what_the_operator_typed_is_one_line(controller: tuple[str, Cluster]) -> None:
    address, _ = controller
    res = ctl(address, "fail", "[/]x")
    assert res.returncode == 1 and res.stdout == "", res.stderr
    assert len(res.stderr.splitlines()) == 1 and "[/]x" in res.stderr, res.stderr


def test_the_client_cli_shows_keys_and_values_as_written(redis_sock: Path, tmp_path: Path) -> None:
    """``distcache`` (the client CLI) against a real shim: keys and values with markup round-trip and
    are printed as written, in results and in messages."""
    from tests.unit.test_cli_bench import CLUSTER, LoopbackShim

    shim = LoopbackShim(redis_sock, tmp_path)
    cluster_json = tmp_path / "cluster.json"
    CLUSTER.save(cluster_json)
    env = {**os.environ, "COLUMNS": "250", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}

    def distcache(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "loadgen",
                "--cluster",
                str(cluster_json),
                "--server",
                f"127.0.0.1:{shim.port}",
                "--timeout",
                "2",
                *argv,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )

    try:
        for key in KEYS[:3]:
            assert distcache("put", key, f"[bold]{key}[/bold]").returncode == 0
            res = distcache("get", key)
            assert (res.returncode, res.stdout) == (0, f"[bold]{key}[/bold]\n"), res.stderr
        res = distcache("get", "[/]absent")
        assert (res.returncode, res.stderr) == (1, "not found: [/]absent\n")
        res = distcache("put", "k", "--value-file", str(tmp_path / "[/]"))
        assert res.returncode == 1 and len(res.stderr.splitlines()) == 1 and f"{tmp_path}/[/]" in res.stderr
    finally:
        shim.close()
