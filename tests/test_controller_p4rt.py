"""The controller's P4Runtime client against a softswitch running the DistCache pipeline."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller.p4rt import Match, P4RuntimeError, SwitchConnection
from distcache import p4names as n
from softswitch.dataplane import PROGRAM, DistCachePipeline
from softswitch.switch import SoftSwitch

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def conn() -> Iterator[SwitchConnection]:
    sw = SoftSwitch(DistCachePipeline(), device_id=9, grpc_addr="127.0.0.1:0")
    sw.start()
    c = SwitchConnection(sw.server.address, 9, name="t")
    try:
        c.connect()
        c.set_pipeline(PROGRAM.p4info())
        yield c
    finally:
        c.close()
        sw.close()


def test_entries_round_trip_by_name(conn: SwitchConnection) -> None:
    conn.insert(
        n.IPV4_LPM, {n.KEY_IPV4_DST: Match(0x0A010000, prefix_len=24)}, n.SET_NHOP, {"dmac": 0x020000000001, "port": 3}
    )
    conn.insert(n.CACHE_LOOKUP, {n.KEY_DC_KEY: 2**127 + 5}, n.CACHE_HIT, {"slot": 7, "version": 1})
    assert conn.read_table(n.IPV4_LPM) == [
        ({n.KEY_IPV4_DST: Match(0x0A010000, prefix_len=24)}, n.SET_NHOP, {"dmac": 0x020000000001, "port": 3})
    ]
    conn.modify(n.CACHE_LOOKUP, {n.KEY_DC_KEY: 2**127 + 5}, n.CACHE_HIT, {"slot": 8, "version": 2})
    assert conn.read_table(n.CACHE_LOOKUP)[0][2] == {"slot": 8, "version": 2}
    conn.delete(n.CACHE_LOOKUP, {n.KEY_DC_KEY: 2**127 + 5})
    assert conn.read_table(n.CACHE_LOOKUP) == []


def test_errors_carry_the_per_update_code(conn: SwitchConnection) -> None:
    conn.insert(n.PORT_KIND, {n.KEY_INGRESS_PORT: 1}, n.SET_PORT_KIND, {"kind": 2})
    with pytest.raises(P4RuntimeError) as e:
        conn.insert(n.PORT_KIND, {n.KEY_INGRESS_PORT: 1}, n.SET_PORT_KIND, {"kind": 2})
    assert e.value.code == "ALREADY_EXISTS" and "already exists" in str(e.value)
    with pytest.raises(P4RuntimeError) as e:
        conn.delete(n.PORT_KIND, {n.KEY_INGRESS_PORT: 2})
    assert e.value.code == "NOT_FOUND"
    with pytest.raises(P4RuntimeError, match="no table"):
        conn.insert("DcIngress.nope", {}, n.NO_ACTION)
    with pytest.raises(ValueError, match="does not fit"):
        conn.insert(n.PORT_KIND, {n.KEY_INGRESS_PORT: 1024}, n.SET_PORT_KIND, {"kind": 1})


def test_default_action_and_counters(conn: SwitchConnection) -> None:
    conn.set_default(n.SWITCH_CONFIG, n.SET_CONFIG, {"switch_id": 64, "role": 2, "mechanism": 1})
    cells = conn.read_counter(n.DC_DROPS)
    assert sorted(cells) == list(range(n.N_DROP_REASONS)) and all(v == (0, 0) for v in cells.values())
    assert conn.read_counter(n.CACHE_HITS, 5) == {5: (0, 0)}
