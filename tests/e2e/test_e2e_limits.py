"""Rate limits from the topology file take effect in the emulation (Mininet, softswitch)."""

from __future__ import annotations

import re

import pytest
from dcnet.deploy import Deployment

from distcache.cluster import Cluster
from distcache.rpc.shim import ShimLink

pytestmark = [
    pytest.mark.timeout(180),
]

CLUSTER = Cluster(link_mbps=20, server_rate=30, server_burst=2)


def test_links_are_shaped_and_servers_rate_limited(tmp_path) -> None:  # noqa: ANN001
    with Deployment(CLUSTER, run_dir=tmp_path / "run") as dep:
        for node, intf in ((CLUSTER.spine(0).name, "sp0-eth1"), (CLUSTER.server(0, 0).name, None)):
            n = dep.host(node)
            intf = intf or n.defaultIntf().name
            classes = n.cmd(f"tc class show dev {intf}")
            assert re.search(r"htb .* rate 20Mbit", classes), classes
        report = None
        for msg in dep.bench(
            CLUSTER.client(0, 0),
            {
                "keys": 20,
                "zipf": 0,
                "read_ratio": 1.0,
                "value_size": 8,
                "concurrency": 32,
                "duration": 3,
                "load_keys": 20,
            },
        ):
            report = msg if msg["type"] == "report" else report
        assert report is not None
        st = ShimLink(dep.shim_control(CLUSTER.server(0, 0))).stats()
        assert st["errors"].get("rate_limited", 0) > 0  # 32 readers at once: beyond what the server takes
        assert set(report["errors"]) <= {"timeout"}  # dropped requests time out; no read is wrong
        assert report["reads"] > 0
