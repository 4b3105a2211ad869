"""The failover's fence (controller.configure._fence): one write per client leaf takes a failed spine out of
every read path, so the shims may stop waiting for it before the partition's entries move.

A real softswitch client leaf, spoken to by the controller over P4Runtime; what is asserted is read back from
the switch (its liveness_config default, its spine_partition) and from what the shims would be told.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import text_format

from controller.controller import Controller
from controller.state import Failure
from distcache import p4names
from softswitch.dataplane import PROGRAM, DistCachePipeline
from softswitch.switch import SoftSwitch
from tests.common.softswitch_helpers import cluster_on_port, free_tcp_port


class _Leaf:
    """cl0 (switch id 128) as a softswitch on a free port, and a controller (no thread started) that is its
    primary, with the cluster's full plan written."""

    def __init__(self, tmp: Path) -> None:
        port = free_tcp_port()
        self.cluster = cluster_on_port(port, 128, spines=2)  # cl0 is switch id 128
        self.leaf = self.cluster.client_leaf(0)
        assert self.leaf.grpc_port == port
        self.switch = SoftSwitch(DistCachePipeline(), device_id=self.leaf.device_id, grpc_addr=f"127.0.0.1:{port}")
        self.switch.start()
        p4info = tmp / "p4info.txt"
        p4info.write_text(text_format.MessageToString(PROGRAM.p4info()))
        self.ctl = Controller(self.cluster, p4info, lambda h: f"unix:{tmp / h.name}.sock", b"", tmp / "state.json")
        self.ctl.configurer.bring_up_client_leaf(self.cluster, self.leaf, set(), 15.0)

    def fenced(self) -> set[int]:
        action, params = self.ctl.sessions.conns[self.leaf.name].read_default(p4names.LIVENESS_CONFIG)
        assert action == p4names.SET_LIVENESS
        return {s for s in range(p4names.LIVENESS_SPINES) if params["fenced"] >> s & 1}

    def partition_spines(self) -> set[int]:
        return {
            p["spine_id"] for _, _, p in self.ctl.sessions.conns[self.leaf.name].read_table(p4names.SPINE_PARTITION)
        }

    def close(self) -> None:
        self.ctl.close()
        self.switch.close()


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[_Leaf]:
    b = _Leaf(tmp_path)
    yield b
    b.close()


def test_a_fenced_spine_is_down_for_the_shims_before_the_partition_moves(bed: _Leaf) -> None:
    ctl, sp0, sp1 = bed.ctl, bed.cluster.spine(0), bed.cluster.spine(1)
    assert bed.fenced() == set() and bed.partition_spines() == {sp0.switch_id, sp1.switch_id}
    ctl.state.failed[sp0.name] = Failure(admin=False, since=time.time())
    assert ctl.shim_down() == []  # the leaf's last plan routes reads to sp0: the shims keep waiting for it
    ctl.configurer.fence(ctl.cluster, ctl.state.failed)
    assert bed.fenced() == {sp0.switch_id}
    assert sp0.switch_id in bed.partition_spines()  # the partition has not moved ...
    assert ctl.shim_down() == [sp0.switch_id]  # ... and no read can reach sp0: the shims may skip it
    ctl.failover.configure({bed.leaf.role})  # the partition follows; the fence stays until sp0 is routed to again
    assert bed.partition_spines() == {sp1.switch_id} and bed.fenced() == {sp0.switch_id}
    del ctl.state.failed[sp0.name]
    ctl.failover.configure({bed.leaf.role})
    assert bed.partition_spines() == {sp0.switch_id, sp1.switch_id} and bed.fenced() == set()


def test_a_leaf_that_could_not_take_the_fence_keeps_the_spine_up_for_the_shims(bed: _Leaf) -> None:
    ctl, sp0 = bed.ctl, bed.cluster.spine(0)
    ctl.state.failed[sp0.name] = Failure(admin=False, since=time.time())
    bed.switch.close()  # the leaf's P4Runtime server is gone: no fence, and no new session for the plan
    ctl.configurer.fence(ctl.cluster, ctl.state.failed)
    assert ctl.shim_down() == []  # its last plan routes reads to sp0: the shims keep waiting for sp0's acks
