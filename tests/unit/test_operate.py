"""Deployment.operate: the operator's fail/recover sent from the measuring process (docs/protocol.md,
"Measuring an operator's `fail`"); the demo's end-to-end test runs both against a live controller."""

from __future__ import annotations

from pathlib import Path

import pytest
from dcnet.deploy import Deployment, DeploymentError

from distcache.cluster import Cluster
from distcache.rpc.controller import change_summary
from distcache.rpc.protos import controller_pb2


def test_the_line_is_the_one_distcache_ctl_prints() -> None:
    reply = controller_pb2.ChangeReply(message="sp0: process stopped; 532 buckets moved", seconds=0.1951, epoch=3)
    assert change_summary(reply) == "sp0: process stopped; 532 buckets moved (0.20 s, epoch 3)"


@pytest.mark.parametrize("command", ["mechanism", "status", ""])
def test_only_fail_and_recover_are_sent(tmp_path: Path, command: str) -> None:
    dep = Deployment(Cluster(), run_dir=tmp_path)
    with pytest.raises(DeploymentError, match="expected fail or recover"):
        dep.operate(command, "sp0")


def test_nothing_is_sent_without_a_running_deployment(tmp_path: Path) -> None:
    with pytest.raises(DeploymentError, match="not running"):
        Deployment(Cluster(), run_dir=tmp_path).operate("fail", "sp0")
