"""The gateway against a plain redis-server in a running deployment, under DistCache with the hot keys cached.

The same command sequences as tests/unit/test_gateway_differential.py (hypothesis: every family, both protocols,
pipelined and not), sent to a client host's gateway, through the fabric to two storage servers, and to a
redis-server of the test's own; replies compared byte for byte (TTLs and set order aside, as there). Before each
sequence its keys hold strings written through the gateway and cached in the switches (``distcache-ctl cache``), so
the sequence's reads are answered by switches until its writes invalidate them: the switches' READ_HIT counters
must rise during the test.  The test reaches the gateway, which listens on the client host's address only,
through a byte relay in the host's namespace (tests/common/relay.py).
"""

from __future__ import annotations

import itertools
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from dcnet.deploy import Deployment
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distcache import p4names
from distcache.cluster import Cluster
from distcache.p4names import Stat
from harness.redis import redis_argv, wait_for_redis
from tests.unit.test_gateway_differential import FAMILIES, Raw, commands, normalized, spread_keys

pytestmark = [pytest.mark.timeout(600)]

CLUSTER = Cluster(servers_per_rack=2, cache_slots=256)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with Deployment(CLUSTER, run_dir=tmp_path_factory.mktemp("run")) as d:
        yield d


@pytest.fixture(scope="module")
def relay(dep: Deployment) -> Iterator[Path]:
    """A Unix socket that reaches the gateway of client host c0h0."""
    host = dep.client_host(CLUSTER.client(0, 0).name)
    ip, port = host.gateway_address.split(":")
    path = dep.run_dir / "gateway-relay.sock"
    proc = host.popen(  # type: ignore[attr-defined]
        [sys.executable, "-m", "tests.common.relay", str(path), ip, port], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "relay ready"
    yield path
    proc.kill()
    proc.wait(5)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    d = tmp_path_factory.mktemp("reference")
    sock = d / "redis.sock"
    proc = subprocess.Popen(redis_argv(sock, d), stdout=subprocess.DEVNULL)
    wait_for_redis(sock, proc)
    yield sock
    proc.terminate()
    proc.wait(5)


def unix(path: Path) -> Raw:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(path))
    return Raw(s)


def read_hits(dep: Deployment) -> int:
    total = 0
    for sw in ("sp0", "sl0"):
        total += dep.controller.conns[sw].read_counter(p4names.DC_STATS, Stat.READ_HIT)[Stat.READ_HIT][0]
    return total


_examples = itertools.count()


def server_of(key: bytes) -> str:
    return CLUSTER.server_for_key(CLUSTER.digest(key)).name


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), proto=st.sampled_from([2, 3]), pipelined=st.booleans())
def test_the_same_replies_as_redis_with_hot_keys_cached(
    dep: Deployment, relay: Path, reference: Path, data: st.DataObject, proto: int, pipelined: bool
) -> None:
    keys = spread_keys(server_of, f"e{next(_examples)}:".encode())
    chosen = data.draw(st.lists(st.sampled_from(FAMILIES), min_size=1, max_size=2, unique=True))
    seq = data.draw(st.lists(commands(keys, chosen), min_size=3, max_size=20))
    gw, ref = unix(relay), unix(reference)
    try:
        setup = [[b"SET", k, b"cached:" + k] for k in keys]
        assert gw.send(setup) == ref.send(setup)
        for k in keys:  # every key of the sequence in the switches' caches (the key's spine and storage leaf)
            dep.controller.cache(k.decode())
        assert gw.send([[b"GET", keys[0]]]) == ref.send([[b"GET", keys[0]]])
        if proto == 3:
            gw.send([[b"HELLO", b"3"]])
            ref.send([[b"HELLO", b"3"]])
        for batch in [seq] if pipelined else [[c] for c in seq]:
            got, want = gw.send(batch), ref.send(batch)
            for cmd, g, w in zip(batch, got, want, strict=True):
                assert normalized(cmd, g) == normalized(cmd, w), (proto, cmd, g, w, seq)
    finally:
        gw.close()
        ref.close()


def test_the_switches_answered_reads_meanwhile(dep: Deployment, relay: Path) -> None:
    """Runs after the sequences (file order): the caches answered reads of the cached keys, and go on doing so."""
    before = read_hits(dep)
    gw = unix(relay)
    try:
        gw.send([[b"SET", b"e-hot", b"x"]])
        dep.controller.cache("e-hot")
        for _ in range(5):
            assert gw.send([[b"GET", b"e-hot"]]) == [b"$1\r\nx\r\n"]
    finally:
        gw.close()
    assert read_hits(dep) - before == 5
    assert before > 0  # the sequences' reads of cached keys were answered by switches too
