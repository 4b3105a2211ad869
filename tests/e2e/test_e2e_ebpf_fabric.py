"""The kernel target as a fabric (issue 19), in every make test where p4c-ebpf, clang and root are present:
three kernel switches in Mininet (a client leaf, a spine, a storage leaf), each its own p4c-ebpf build.

What only a chain of kernel switches shows: a frame one switch's TC program redirects reaches the next
switch as the same skb, with whatever XDP metadata it carried.  A probe comes into a leaf by its probe port,
where p4c-ebpf's XDP helper keeps its EtherType in that metadata; the spine's TC program, finding it, put
back an EtherType that was not the frame's and dropped ~60% of the probes as NOT_IPV4 (softswitch/ebpf/
build.py).  So here: every probe of every leaf is answered, no switch drops a frame as not IPv4, and a
write and a read cross the fabric.  The other scenarios run on this target with E2E_TARGETS=ebpf.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from dcnet.deploy import Deployment

from distcache import p4names
from distcache.cluster import Cluster
from p4rt.probes import DP_PROBE_INTERVAL, read_probe_counts
from tests.e2e.targets import ebpf_missing

MISSING = ebpf_missing()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.ebpf,
    pytest.mark.timeout(300),
    pytest.mark.skipif(bool(MISSING), reason=f"ebpf needs {', '.join(MISSING)}"),
]

CLUSTER = Cluster(spines=1, storage_racks=1, client_racks=1, cache_slots=32, hh_threshold=4)


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with Deployment(CLUSTER, target="ebpf", run_dir=tmp_path_factory.mktemp("run")) as d:
        yield d


def test_probes_cross_a_chain_of_kernel_switches_and_every_one_is_answered(dep: Deployment) -> None:
    c = dep.client()
    assert c.call("put", "k1", "v1")["ok"]
    assert c.call("get", "k1")["value"] == "v1"
    leaves = [CLUSTER.client_leaf(0), CLUSTER.storage_leaf(0)]
    spine = CLUSTER.spine(0).switch_id
    before = {leaf.name: read_probe_counts(dep.controller.conns[leaf.name])[spine] for leaf in leaves}
    time.sleep(1.0)
    for leaf in leaves:
        after = read_probe_counts(dep.controller.conns[leaf.name])[spine]
        sent = after.sent - before[leaf.name].sent
        answered = after.answered - before[leaf.name].answered
        assert sent >= 0.2 / DP_PROBE_INTERVAL, (leaf.name, sent)  # its probe source runs
        assert answered >= sent - 2, f"{leaf.name}: {answered} of {sent} probes of the spine answered"
    for sw in CLUSTER.switches():
        drops = dep.controller.conns[sw.name].read_counter(p4names.DC_DROPS)
        assert drops.get(int(p4names.DropReason.NOT_IPV4), (0, 0))[0] == 0, (sw.name, drops)
