"""The shim's Prometheus series, read through its control API as the controller's exporter reads them.

A real shim on loopback against a real redis-server (tests/common/shim_bed.py); the client library sends
the requests; the series are parsed with prometheus_client's own parser.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from distcache.rpc.shim import ShimLink
from tests.common.keys import digest
from tests.common.shim_bed import CLUSTER, shim_on_loopback

pytestmark = pytest.mark.timeout(60)
SPINE = CLUSTER.spine(0).switch_id


def samples(link: ShimLink) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the shim's exposition: (sample name, sorted labels) -> value."""
    out = {}
    for fam in text_string_to_metric_families(link.metrics().decode()):
        for s in fam.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def value(smp: dict, name: str, **labels: str) -> float:
    return smp.get((name, tuple(sorted({"server": "r0s0", **labels}.items()))), 0.0)


@pytest.fixture
def bed(redis_sock: Path, tmp_path: Path):  # noqa: ANN201
    with shim_on_loopback(redis_sock, tmp_path / "shim.sock") as b:
        yield b.client, b.link


def test_requests_and_replies_are_counted_by_op_and_status_with_their_latency(bed) -> None:  # noqa: ANN001
    client, link = bed
    for i in range(5):
        client.put(f"k{i}", "v")
    for i in range(7):
        client.get(f"k{i}")  # k5 and k6 were never written
    assert client.delete("k0") is True
    assert client.delete("k0") is False
    smp = samples(link)
    assert value(smp, "distcache_shim_requests_total", op="PUT") == 5
    assert value(smp, "distcache_shim_requests_total", op="GET") == 7
    assert value(smp, "distcache_shim_replies_total", op="GET", status="OK") == 5
    assert value(smp, "distcache_shim_replies_total", op="GET", status="NOT_FOUND") == 2
    assert value(smp, "distcache_shim_replies_total", op="DELETE", status="OK") == 1
    assert value(smp, "distcache_shim_replies_total", op="DELETE", status="NOT_FOUND") == 1
    # one latency observation per reply, in seconds, all within the +Inf bucket and a sane sum
    assert value(smp, "distcache_shim_request_seconds_count", op="GET") == 7
    assert value(smp, "distcache_shim_request_seconds_bucket", op="GET", le="+Inf") == 7
    assert 0 < value(smp, "distcache_shim_request_seconds_sum", op="GET") < 7 * 3.0
    assert value(smp, "distcache_shim_redis_up") == 1
    assert value(smp, "distcache_shim_coherence_messages_total", phase="invalidate") == 0  # nothing cached
    # the seven writes (five PUTs, two DELETEs) are remembered for the retry span, under the memory bound
    assert value(smp, "distcache_shim_dedup_entries") == 7
    assert value(smp, "distcache_shim_dedup_capacity") == (64 << 20) // 320
    assert value(smp, "distcache_shim_errors_total", kind="busy") == 0


def test_a_cached_keys_write_shows_both_coherence_phases(bed) -> None:  # noqa: ANN001
    client, link = bed
    client.put("hot", "old")
    assert link.populate(digest("hot"), SPINE, 0, 1, b"hot") == "valid"  # one INVALIDATE + one UPDATE
    client.put("hot", "new")  # phase 1 and phase 2 along the spine's path
    smp = samples(link)
    assert value(smp, "distcache_shim_coherence_messages_total", phase="invalidate") == 2
    assert value(smp, "distcache_shim_coherence_phase_seconds_count", phase="invalidate") == 1  # the write's
    assert value(smp, "distcache_shim_cached_keys") == 1
    assert value(smp, "distcache_shim_replies_total", op="PUT", status="OK") == 2


def test_queue_time_is_observed_under_a_server_rate(redis_sock: Path, tmp_path: Path) -> None:
    cluster = dataclasses.replace(CLUSTER, server_rate=50.0, server_burst=1, server_queue=1.0)
    with shim_on_loopback(redis_sock, tmp_path / "shim.sock", cluster=cluster) as b:
        b.client.mget([f"k{i}" for i in range(10)])  # 10 at once against a burst of 1: 9 wait their turn
        smp = samples(b.link)
    assert value(smp, "distcache_shim_queue_seconds_count") == 10
    assert value(smp, "distcache_shim_queue_seconds_sum") > 0.1  # 9 waits of 20-180 ms
    assert value(smp, "distcache_shim_rate_limit") == 50
    assert value(smp, "distcache_shim_rate_spent_total") >= 10
