"""The controller's Prometheus exporter over real softswitches, agents and a shim on loopback.

A real controller serves ``/metrics`` over HTTP (controller.metrics.serve_metrics); the test scrapes it
as Prometheus would and parses it with prometheus_client's parser.  What it checks: every switch has its
series, read from its P4Runtime counters (frames fed to a softswitch move them); cache switches have
their agent's; the shim's series arrive through its control socket with its server label; an operator
failure shows in the controller's counters and histograms; a shim that is gone is reported down without
stalling the scrape; no label carries a key.
"""

from __future__ import annotations

import os
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from google.protobuf import text_format
from prometheus_client.parser import text_string_to_metric_families

from controller.controller import Controller
from controller.metrics import serve_metrics
from distcache import p4names
from distcache.cluster import Cluster
from distcache.hashing import N_SPINE_BUCKETS
from distcache.rpc.shim import ShimLink
from softswitch.dataplane import PROGRAM
from softswitch.switch import SoftSwitch
from tests.common.control_bed import start_agent, start_switches
from tests.common.keys import digest
from tests.common.shim_bed import ShimThread, SwitchPeer
from tests.common.softswitch_helpers import ports_free

pytestmark = pytest.mark.timeout(120)
KEYS = [f"hot-{i}" for i in range(5)]


def _cluster() -> Cluster:
    for base in range(23000 + os.getpid() % 83 * 200, 60000, 997):
        c = Cluster(
            spines=2,
            cache_slots=16,
            grpc_base_port=base,
            agent_base_port=base + 256,
            controller_address=f"127.0.0.1:{base + 255}",
            metrics_address=f"127.0.0.1:{base + 254}",
        )
        ports = [sw.grpc_port for sw in c.switches()] + [base + 254, base + 255]
        if ports_free(ports + [c.agent_base_port + sw.switch_id for sw in c.switches()]):
            return c
    raise RuntimeError("no free loopback ports")


@dataclass
class ExporterBed:
    cluster: Cluster
    ctl: Controller
    switches: dict[str, SoftSwitch]
    shim: ShimThread

    def scrape(self) -> dict[tuple[str, frozenset], float]:
        """GET /metrics: (sample name, labels) -> value."""
        with urllib.request.urlopen(f"http://{self.cluster.metrics_address}/metrics", timeout=10) as r:
            text = r.read().decode()
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        }


def value(smp: dict, name: str, **labels: str) -> float:
    return smp[name, frozenset(labels.items())]


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory, redis_sock: Path) -> Iterator[ExporterBed]:
    tmp = tmp_path_factory.mktemp("metrics")
    cluster = _cluster()
    p4info = tmp / "p4info.txt"
    p4info.write_text(text_format.MessageToString(PROGRAM.p4info()))
    redis.Redis(unix_socket_path=str(redis_sock)).flushall()
    closers = []
    try:
        peer = SwitchPeer(redis_sock)  # the coherence paths' far end (no fabric here)
        closers.append(peer.close)
        shim = ShimThread(redis_sock, peer, tmp / "shim-r0s0.sock", cluster=cluster)
        closers.append(shim.close)
        switches = start_switches(cluster, closers)
        agents = {
            sw.name: start_agent(cluster, sw, p4info, tmp, closers)
            for sw in (cluster.spine(0), cluster.spine(1), cluster.storage_leaf(0))
        }
        ctl = Controller(cluster, p4info, lambda h: f"unix:{tmp / f'shim-{h.name}.sock'}", b"", tmp / "ctl.json")
        ctl.start(timeout=20, monitor=False)
        closers.append(ctl.close)
        ShimLink(shim.control_addr).partition(ctl.partition.buckets() or [0] * N_SPINE_BUCKETS)
        serve_metrics(ctl, cluster.metrics_address)
        for k in KEYS:  # what an agent does with a key its switch's detector reported hot
            agents["sl0"].insert(digest(k), name=k.encode())  # (its shim knows the key from its reads)
        yield ExporterBed(cluster, ctl, switches, shim)
    finally:
        for close in reversed(closers):
            close()


def test_every_switch_has_its_counters_and_frames_move_them(bed: ExporterBed) -> None:
    before = bed.scrape()
    for sw in bed.cluster.switches():
        labels = {"switch": sw.name, "role": {1: "spine", 2: "storage_leaf", 3: "client_leaf"}[int(sw.role)]}
        assert value(before, "distcache_switch_up", **labels) == 1
        assert value(before, "distcache_switch_in_service", **labels) == 1
        for reason in p4names.DropReason:  # every reason has a series from the start, zeros too
            value(before, "distcache_switch_drops_total", **labels, reason=reason.name.lower())
        for stat in p4names.Stat:
            value(before, "distcache_switch_dc_stats_total", **labels, counter=stat.name.lower())
    junk = b"\xff" * 12 + b"\x86\xdd" + b"\x00" * 40  # an IPv6 frame: counted NOT_IPV4 and dropped
    for _ in range(3):
        bed.switches["sp1"].process_packet(1, junk)
    after = bed.scrape()
    key = {"switch": "sp1", "role": "spine", "reason": "not_ipv4"}
    assert (
        value(after, "distcache_switch_drops_total", **key) == value(before, "distcache_switch_drops_total", **key) + 3
    )


def test_cache_switches_show_their_agents_figures(bed: ExporterBed) -> None:
    smp = bed.scrape()
    leaf = {"switch": "sl0", "role": "storage_leaf"}
    assert value(smp, "distcache_agent_up", **leaf) == 1
    assert value(smp, "distcache_switch_cache_slots", **leaf) == 16
    assert value(smp, "distcache_switch_cache_occupied", **leaf) == len(KEYS)
    assert value(smp, "distcache_switch_cache_occupied", switch="sp0", role="spine") == 0
    assert ("distcache_agent_up", frozenset({"switch": "cl0", "role": "client_leaf"}.items())) not in smp  # no agent


def test_the_shims_series_come_through_its_control_socket(bed: ExporterBed) -> None:
    smp = bed.scrape()
    assert value(smp, "distcache_shim_up", server="r0s0") == 1
    assert value(smp, "distcache_shim_redis_up", server="r0s0") == 1
    # the five inserted keys were populated through the shim: one phase-1 exchange each
    assert value(smp, "distcache_shim_coherence_messages_total", server="r0s0", phase="invalidate") == len(KEYS)
    assert value(smp, "distcache_shim_cached_keys", server="r0s0") == len(KEYS)


def test_no_label_carries_a_key(bed: ExporterBed) -> None:
    labels = {v for _, ls in bed.scrape() for _, v in ls}
    for k in KEYS:
        assert not any(k in v or digest(k).hex() in v for v in labels)


def test_an_operator_failure_moves_the_controllers_series(bed: ExporterBed) -> None:
    before = bed.scrape()
    bed.ctl.fail("sp1", keep_running=True)
    try:
        smp = bed.scrape()
        assert value(smp, "distcache_switch_in_service", switch="sp1", role="spine") == 0
        assert value(smp, "distcache_switch_up", switch="sp1", role="spine") == 1  # drained, still running
        assert value(smp, "distcache_switch_buckets", switch="sp1", role="spine") == 0
        assert value(smp, "distcache_switch_buckets", switch="sp0", role="spine") == N_SPINE_BUCKETS
        assert value(smp, "distcache_controller_failed_switches") == 1
        assert (
            value(smp, "distcache_controller_failovers_total")
            == value(before, "distcache_controller_failovers_total") + 1
        )
        assert value(smp, "distcache_controller_switch_failures_total", how="operator") == 1
        assert value(smp, "distcache_controller_failover_seconds_count") == 1
        assert 0 < value(smp, "distcache_controller_failover_seconds_sum") < 10
        assert value(smp, "distcache_controller_epoch") > value(before, "distcache_controller_epoch")
    finally:
        bed.ctl.recover("sp1")
    smp = bed.scrape()
    assert value(smp, "distcache_switch_in_service", switch="sp1", role="spine") == 1
    assert (
        value(smp, "distcache_controller_recoveries_total")
        == value(before, "distcache_controller_recoveries_total") + 1
    )


def test_a_shim_that_is_gone_is_down_and_does_not_stall_the_scrape(bed: ExporterBed) -> None:
    bed.shim.close()
    t = time.monotonic()
    smp = bed.scrape()
    assert time.monotonic() - t < 5
    assert value(smp, "distcache_shim_up", server="r0s0") == 0
    assert not any(name.startswith("distcache_shim_requests") for name, _ in smp)
    assert value(smp, "distcache_switch_up", switch="sp0", role="spine") == 1
