"""The Redis-protocol gateway of a client host, end to end in Mininet: redis-cli on the client host, through its
gateway, the fabric and the switches' caches, to the shims and redis-servers.

A GET of a cached key is answered by a switch: the hits the gateway counts (INFO) equal what the switches'
READ_HIT counters gained.  The gateway listens on its host's own address only, and comes back after a kill.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator

import pytest
from dcnet.deploy import Deployment

from distcache import p4names
from distcache.cluster import Cluster
from distcache.p4names import Stat

pytestmark = [pytest.mark.timeout(240)]

CLUSTER = Cluster(servers_per_rack=2)
CLIENT = CLUSTER.client(0, 0)


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with Deployment(CLUSTER, run_dir=tmp_path_factory.mktemp("run")) as d:
        yield d


def cli(dep: Deployment, *args: str) -> str:
    """redis-cli on the client host, against its gateway (--raw: values as they are)."""
    host = dep.client_host(CLIENT.name)
    ip, port = host.gateway_address.split(":")
    return host.cmd(f"redis-cli --raw -h {ip} -p {port} {shlex.join(args)}").strip()  # type: ignore[attr-defined]


def info(dep: Deployment, field: str) -> int:
    for line in cli(dep, "INFO", "distcache").splitlines():
        if line.startswith(field + ":"):
            return int(line.split(":", 1)[1])
    raise AssertionError(f"INFO has no {field}")


def read_hits(dep: Deployment) -> int:
    total = 0
    for sw in ("sp0", "sl0"):
        total += dep.controller.conns[sw].read_counter(p4names.DC_STATS, Stat.READ_HIT)[Stat.READ_HIT][0]
    return total


def test_redis_cli_through_the_gateway(dep: Deployment) -> None:
    assert cli(dep, "PING") == "PONG"
    assert cli(dep, "SET", "user:1", "ada") == "OK"
    assert cli(dep, "GET", "user:1") == "ada"
    assert cli(dep, "INCRBY", "visits", "3") == "3"
    assert cli(dep, "MSET", "a", "1", "b", "2", "c", "3", "d", "4") == "OK"
    assert cli(dep, "MGET", "a", "none", "b", "c", "d").splitlines() == ["1", "", "2", "3", "4"]
    assert cli(dep, "DEL", "a", "b", "c", "d") == "4"


def test_the_hits_it_counts_are_the_switches_read_hits(dep: Deployment) -> None:
    assert cli(dep, "SET", "hot", "from a switch") == "OK"
    placed = dep.controller.cache("hot")
    assert {e.state for e in placed.values()} == {"valid"}
    hits, switch_hits = info(dep, "cache_hits"), read_hits(dep)
    for _ in range(5):
        assert cli(dep, "GET", "hot") == "from a switch"
    gained, switch_gained = info(dep, "cache_hits") - hits, read_hits(dep) - switch_hits
    assert gained == 5 and switch_gained == gained
    assert cli(dep, "SET", "hot", "new") == "OK"  # a write through the gateway: the caches invalidated first
    assert cli(dep, "GET", "hot") == "new"


def test_it_listens_on_its_hosts_address_only_and_comes_back_after_a_kill(dep: Deployment) -> None:
    host = dep.client_host(CLIENT.name)
    listening = host.cmd("ss -Hltn")  # type: ignore[attr-defined]
    assert host.gateway_address in listening and "0.0.0.0:6379" not in listening and "*:6379" not in listening
    host.gateway.kill()
    assert "Could not connect" in cli(dep, "PING")
    host.start_gateway()
    assert cli(dep, "GET", "user:1") == "ada"
