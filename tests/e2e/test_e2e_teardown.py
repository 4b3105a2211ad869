"""A deployment leaves no process, interface or namespace behind when it stops, and logs what it is asked to."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

import pytest
from dcnet.deploy import Deployment

from distcache.cluster import Cluster

pytestmark = [
    pytest.mark.timeout(180),
]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _netns_inodes() -> set[str]:
    out = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                out.add(os.readlink(f"/proc/{pid}/ns/net"))
    return out


def _our_links(cluster: Cluster) -> list[str]:
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    names = tuple(f" {sw.name}-eth" for sw in cluster.switches())
    return [ln for ln in links.splitlines() if any(nm in ln for nm in names)]


@pytest.mark.parametrize("interrupt", [False, True])
def test_stop_leaves_nothing_behind(tmp_path, interrupt: bool) -> None:  # noqa: ANN001
    cluster = Cluster()
    namespaces_before = _netns_inodes()
    pids: list[int] = []
    with (
        pytest.raises(KeyboardInterrupt) if interrupt else contextlib.nullcontext(),
        Deployment(cluster, run_dir=tmp_path / "run") as d,
    ):
        pids = [p.pid for _, p in d._procs] + [d.net[sw.name].proc.pid for sw in cluster.switches()]
        pids += [d.net[h.name].pid for h in cluster.hosts()]  # the namespaces' shells
        assert all(_alive(p) for p in pids)
        assert len(_our_links(cluster)) == sum(len(cluster.ports(sw.name)) for sw in cluster.switches())
        if interrupt:
            raise KeyboardInterrupt  # what Ctrl-C does inside a run
    assert [p for p in pids if _alive(p)] == []
    assert _our_links(cluster) == []
    assert _netns_inodes() <= namespaces_before
    assert (tmp_path / "run" / "sp0.log").exists()


@pytest.mark.bmv2
@pytest.mark.skipif(
    not shutil.which("simple_switch_grpc") or not shutil.which("p4c-bm2-ss"), reason="needs BMv2 and p4c"
)
def test_packets_switch_log_traces_every_packet(tmp_path) -> None:  # noqa: ANN001
    """switch_log="packets" gives BMv2's per-packet trace, as the p4lang tutorials' logs do."""
    with Deployment(Cluster(), target="bmv2", run_dir=tmp_path / "run", switch_log="packets") as d:
        c = d.client()
        assert c.call("put", "traced", "v")["ok"]
        assert c.call("get", "traced")["value"] == "v"
        text = "".join(p.read_text(errors="replace") for p in sorted((tmp_path / "run").glob("sl0*.txt")))
        assert "Processing packet received on port" in text
