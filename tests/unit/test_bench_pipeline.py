"""``make bench`` (bench/pipeline.py) measures the paths its rows are named after.

Before: the "storage leaf: cache hit" row armed its entry with a plain INVALIDATE, which never arms a new
entry, so every frame it measured was a miss (READ_HIT stayed 0).
"""

from __future__ import annotations

from bench.pipeline import Row, rows, takes_its_path
from distcache import p4names
from distcache.cluster import Cluster
from distcache.p4defines import Stat
from distcache.scapy_layer import frame
from distcache.wire import DC_PORT, Message, Op
from softswitch.dataplane import DistCachePipeline
from tests.common.keys import digest


def test_every_row_takes_its_path() -> None:
    for row in rows(Cluster()):
        assert takes_its_path(row), row.name


def test_the_hit_row_answers_from_the_cache_every_time() -> None:
    hit = rows(Cluster())[0]
    for _ in range(5):
        assert takes_its_path(hit)
    assert hit.state.counters[p4names.DC_STATS].read(Stat.READ_MISS)[0] == 0


def test_an_entry_armed_with_a_plain_invalidate_is_no_hit_and_the_check_says_so() -> None:
    c = Cluster()
    hit = rows(c)[0]
    key, srv = digest("another"), c.server(0, 0)
    hit.state.tables[p4names.CACHE_LOOKUP].insert(
        [int.from_bytes(key, "big")], p4names.CACHE_HIT, {"slot": 2, "version": 1}
    )
    pipe = DistCachePipeline()
    for m in (Message(op=Op.INVALIDATE, key=key, seq=9), Message(op=Op.UPDATE, key=key, seq=9, value=b"v")):
        pipe.process(hit.state, 1, bytes(frame(m, srv.ip, c.spine_address(1), sport=DC_PORT)), 0)
    get = bytes(frame(Message(op=Op.GET, key=key, seq=2, target=c.switch("sl0").switch_id), c.client(0, 0).ip, srv.ip))
    assert not takes_its_path(Row("unarmed", hit.state, 2, get, Stat.READ_HIT, 2))
