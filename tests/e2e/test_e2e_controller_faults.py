"""Issue 15, defect 4 end to end in Mininet: a spine whose agent restarted (without its state file)
while the spine was failed comes back through ``distcache-ctl recover`` within seconds, and serves
again without ever answering a read with the copy that went stale while it was out of service.

tests/p4runtime/test_controller_faults.py holds the controller's side of this (and defect 5) on loopback;
here the reads travel through the switches.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from dcnet.deploy import Deployment

from distcache.cluster import Cluster
from distcache.hashing import h0
from distcache.partition import spine_buckets
from distcache.rpc.agent import AgentClient

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

# ports of its own, so a process another run left behind on the default ones cannot answer in its place
CLUSTER = Cluster(
    spines=2,
    storage_racks=1,
    client_racks=1,
    cache_slots=16,
    hh_threshold=1000,
    grpc_base_port=47051,
    agent_base_port=48051,
    controller_address="127.0.0.1:47050",
)
SP1 = CLUSTER.spine(1)
ORIGINAL = spine_buckets([CLUSTER.spine(0).switch_id, SP1.switch_id])


def ctl(dep: Deployment, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "controller.ctl", "--cluster", str(dep.cluster_path), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _served_by(c, key: str, value: str | None = None) -> set[int]:  # noqa: ANN001
    """Who answered reads of ``key`` until sp1 did (or 6 s passed): the loads earlier traffic left may steer its
    reads to its leaf for two load windows, and which key it is depends on the deployment's key secret."""
    served: set[int] = set()
    deadline = time.monotonic() + 6
    while SP1.switch_id not in served and time.monotonic() < deadline:
        for _ in range(10):
            r = c.call("get", key)
            assert value is None or r["value"] == value, r
            served.add(r["served_by"])
    return served


def test_spine_whose_agent_restarted_while_failed_recovers_and_serves_no_stale_copy(tmp_path) -> None:  # noqa: ANN001
    with Deployment(CLUSTER, run_dir=tmp_path / "run") as dep:
        digest = dep.cluster.digest
        key = next(f"key{i}" for i in range(100) if ORIGINAL[h0(digest(f"key{i}"))] == SP1.switch_id)
        c = dep.client()
        c.call("put", key, "old")
        assert dep.controller.agents["sp1"].cache(digest(key)).state == "valid"
        assert SP1.switch_id in _served_by(c, key)  # sp1 answers it

        assert ctl(dep, "fail", "sp1", "--keep-running").returncode == 0  # drained: sp1 keeps its copy
        c.call("put", key, "new")  # sp1's copy is stale from here on
        dep.kill_agent("sp1")
        (dep.run_dir / "agent-sp1.state.json").unlink()
        dep.start_agent(SP1)
        agent = AgentClient(CLUSTER.agent_address(SP1), timeout=2)
        deadline = time.monotonic() + 30
        while True:
            try:
                assert not agent.status().configured  # nobody configures the agent of a failed switch
                break
            except Exception:  # noqa: BLE001 - not up yet
                assert time.monotonic() < deadline, "the restarted agent never answered"
                time.sleep(0.2)

        t0 = time.monotonic()
        res = ctl(dep, "recover", "sp1")
        assert res.returncode == 0, res.stderr
        assert time.monotonic() - t0 < 10, f"recover took {time.monotonic() - t0:.1f}s"
        st = agent.status()
        assert st.configured and st.occupied == 0  # configured by the recovery, then flushed
        replies = [c.call("get", key) for _ in range(30)]
        assert [r["value"] for r in replies] == ["new"] * 30  # never the stale copy

        assert dep.controller.agents["sp1"].cache(digest(key)).state == "valid"  # it caches again ...
        replies = [c.call("get", key) for _ in range(30)]
        assert [r["value"] for r in replies] == ["new"] * 30
        assert SP1.switch_id in _served_by(c, key, "new")  # ... and serves again
