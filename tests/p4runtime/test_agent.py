"""The switch agent against a real softswitch over P4Runtime (no Mininet).

The agent pushes the pipeline and its entries, caches keys, and resyncs when its
switch restarts (the switch comes back empty: the agent re-installs the plan and
re-adds no stale cache entry) and when it restarts itself (it reads the cache
entries back).  Its storage shims are unreachable here, so values stay unfilled
("failed"): the cache table is what is under test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether

from agent.agent import SwitchAgent
from agent.slots import SlotAllocator
from agent.state import StateFileError
from distcache import p4names
from distcache.cluster import Mechanism
from distcache.partition import spine_buckets
from distcache.ratelimit import TokenBucket
from distcache.rpc.shim import shim_links
from distcache.wire import DC_PORT, Message, Op, decode, populate_invalidate
from softswitch.dataplane import DistCachePipeline
from softswitch.switch import SoftSwitch
from tests.common.keys import digest
from tests.common.softswitch_helpers import cluster_on_port, free_tcp_port
from tests.ptf.dctest import dc_frame

pytestmark = pytest.mark.timeout(60)


def test_token_bucket_allows_burst_then_rate() -> None:
    now = [0.0]
    tb = TokenBucket(rate=10, burst=3, clock=lambda: now[0])
    assert [tb.take() for _ in range(4)] == [True, True, True, False]
    now[0] += 0.25  # 2.5 tokens
    assert [tb.take() for _ in range(3)] == [True, True, False]
    now[0] += 100
    assert sum(tb.take() for _ in range(10)) == 3  # never more than the burst saved up


def test_token_bucket_reservations_are_served_at_the_rate_in_order() -> None:
    now = [0.0]
    tb = TokenBucket(rate=10, burst=2, clock=lambda: now[0])
    waits = [tb.reserve(max_wait=0.35) for _ in range(7)]
    assert waits[:5] == pytest.approx([0, 0, 0.1, 0.2, 0.3]) and waits[5:] == [None, None]  # beyond the bound
    now[0] += 0.3  # the three waiting callers got their tokens; none is saved up
    assert tb.reserve(0.05) is None and tb.reserve(0.1) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        TokenBucket(rate=0, burst=1)


def test_token_bucket_charge_leaves_a_debt_later_callers_wait_out() -> None:
    now = [0.0]
    tb = TokenBucket(rate=10, burst=2, clock=lambda: now[0])
    tb.charge(4)  # work done without asking: 2 tokens saved, 2 owed
    assert tb.reserve(max_wait=1.0) == pytest.approx(0.3)  # the debt and its own token: 3 tokens at 10/s
    assert not tb.take()
    assert tb.spent == 5  # what was admitted: the charge and the reservation (not the refused take)


def test_slot_allocator_claims_slots_found_on_the_switch() -> None:
    a = SlotAllocator(3, last_versions=[5, 0, 9])
    a.claim(0, 5)
    slot, version = a.take()
    assert (slot, version) == (1, 10)  # versions count per switch: above every slot's last version (9)
    assert a.take() == (2, 11)
    with pytest.raises(RuntimeError):
        a.take()


class AgentBed:
    def __init__(self, tmp: Path, storage_leaf: bool = False) -> None:
        self.port = free_tcp_port()
        sid = 64 if storage_leaf else 1  # sl0 is switch id 64, sp0 is 1
        self.cluster = cluster_on_port(self.port, sid, spines=2 if storage_leaf else 1, cache_slots=8)
        self.sw = self.cluster.storage_leaf(0) if storage_leaf else self.cluster.spine(0)
        assert self.sw.switch_id == sid
        self.p4info = tmp / "p4info.txt"
        from google.protobuf import text_format

        from softswitch.dataplane import PROGRAM

        self.p4info.write_text(text_format.MessageToString(PROGRAM.p4info()))
        self.state_file = tmp / "agent.json"
        self.shim_dir = tmp
        self.switch = self.start_switch()

    def start_switch(self) -> SoftSwitch:
        s = SoftSwitch(DistCachePipeline(), device_id=self.sw.device_id, grpc_addr=f"127.0.0.1:{self.port}")
        s.start()
        return s

    def agent(self) -> SwitchAgent:
        a = SwitchAgent(
            self.cluster, self.sw, self.p4info, b"", shim_links(self.cluster, self.shim_dir), state_file=self.state_file
        )
        a.start()
        a.configure(self.cluster, spine_buckets([self.sw.switch_id]))
        return a

    def cache_table(self) -> dict[bytes, tuple[int, int]]:
        t = self.switch.state.tables[p4names.CACHE_LOOKUP]
        return {e.match[0][0].to_bytes(16, "big"): (e.params["slot"], e.params["version"]) for e in t.entries()}


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[AgentBed]:
    b = AgentBed(tmp_path)
    yield b
    b.switch.close()


def test_agent_installs_the_plan_and_caches_keys(bed: AgentBed) -> None:
    agent = bed.agent()
    try:
        assert bed.switch.state.tables[p4names.IPV4_LPM].__len__() > 0
        assert (
            len(bed.switch.state.tables[p4names.HH_BUCKETS]) == p4names.SPINE_BUCKETS
        )  # the only spine owns every bucket
        for k in ("a", "b"):
            agent.insert(digest(k))
        assert set(bed.cache_table()) == {digest("a"), digest("b")}
        assert agent.status().occupied == 2
    finally:
        agent.stop()


def test_agent_sets_the_cache_meter_from_switch_rate(bed: AgentBed) -> None:
    """switch_rate in the topology becomes the cache meter's rate (cir = pir) and burst; 0 clears it."""
    from dataclasses import replace

    agent = bed.agent()
    meter = bed.switch.state.meters[p4names.CACHE_METER]
    try:
        assert agent.conn.read_meter(p4names.CACHE_METER) == {0: None}  # switch_rate 0: no limit
        agent.configure(replace(bed.cluster, switch_rate=250.0, switch_burst=16), spine_buckets([bed.sw.switch_id]))
        assert agent.conn.read_meter(p4names.CACHE_METER) == {0: (250, 16, 250, 16)}
        assert [meter.execute(0, 1_000_000) for _ in range(17)][-1] == 2  # the 17th packet at once: red
        agent.configure(bed.cluster, spine_buckets([bed.sw.switch_id]))
        assert agent.conn.read_meter(p4names.CACHE_METER) == {0: None}
    finally:
        agent.stop()


def test_agent_restart_reads_the_cache_back(bed: AgentBed) -> None:
    first = bed.agent()
    for k in ("a", "b", "c"):
        first.insert(digest(k))
    first.evict(digest("b"))
    first.stop()
    table = bed.cache_table()
    second = bed.agent()
    try:
        st = second.status(with_keys=True)
        assert {k.key: (k.slot, k.version) for k in st.keys} == table
        e = second.insert(digest("d"))
        assert e is not None
        assert e.slot not in {slot for slot, _ in table.values()}  # a free slot, not one in use
        assert e.version > 1  # slot reuse never hands back a version the slot had (state file)
    finally:
        second.stop()


def test_switch_restart_is_resynced_with_an_empty_cache(bed: AgentBed) -> None:
    agent = bed.agent()
    try:
        agent.insert(digest("stale"))
        routes = len(bed.switch.state.tables[p4names.IPV4_LPM])
        bed.switch.close()
        bed.switch = bed.start_switch()  # comes back with no pipeline at all
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and agent.status().switch_restarts == 0:
            time.sleep(0.1)
        st = agent.status()
        assert st.switch_restarts == 1 and st.switch_connected
        assert st.occupied == 0 and bed.cache_table() == {}  # nothing stale re-added
        assert len(bed.switch.state.tables[p4names.IPV4_LPM]) == routes  # the plan is back
        agent.insert(digest("fresh"))
        assert set(bed.cache_table()) == {digest("fresh")}
    finally:
        agent.stop()


@pytest.mark.parametrize("state", ["deleted", "kept"])
def test_a_switch_that_came_up_empty_gets_an_epoch_it_never_had(bed: AgentBed, state: str) -> None:
    """The model's epoch clock (model/README.md): a restarted switch is back in epoch 0 with empty
    registers, but a populate of its earlier life may still be on its way, carrying a tag of an
    epoch it had then.  Versions count from 1 again after a raise, so the epoch the agent picks
    must be above every one the switch had -- also when the agent lost its state file as well.
    Here the earlier life's populate (key a, slot 0, the first version) arrives after the
    restart: it must not arm the new entry of a (same slot, same version)."""
    a = digest("a")
    agent = bed.agent()
    e = agent.insert(a)
    old_epoch = agent.status().cache_epoch
    agent.stop()
    if state == "deleted":
        bed.state_file.unlink()
    bed.switch.close()
    bed.switch = bed.start_switch()  # comes back with no pipeline, in epoch 0
    agent = bed.agent()
    try:
        again = agent.insert(a)
        st = agent.status()
        assert (again.slot, again.version) == (e.slot, e.version) == (0, 1)
        assert st.cache_epoch > old_epoch
        # the earlier life's populate, delayed: it must not arm the new entry
        spine = bed.sw.switch_id
        server = bed.cluster.server(0, 0)
        stale = populate_invalidate(a, 7, spine, old_epoch, e.version)
        assert _through(bed, 1, server.ip, bed.cluster.spine_address(spine), stale).op == Op.INVALIDATE_ACK
        upd = Message(op=Op.UPDATE, digest=a, seq=7, value=b"earlier life", target=spine)
        assert _through(bed, 1, server.ip, bed.cluster.spine_address(spine), upd).op == Op.UPDATE_ACK
        assert not _read(bed, a).cached
    finally:
        agent.stop()


def _through(bed: AgentBed, port: int, src: str, dst: str, msg: Message) -> Message | None:
    """One DistCache message into the switch on ``port``; the one that comes out (None: dropped)."""
    sport = DC_PORT if msg.op in (Op.INVALIDATE, Op.UPDATE) else 40000
    out = bed.switch.process_packet(port, bytes(dc_frame(src, dst, msg, sport=sport, dport=DC_PORT)))
    return decode(bytes(Ether(out[0][1])[UDP].payload)) if out else None


def _fill(bed: AgentBed, key: bytes, value: bytes, seq: int, epoch: int, version: int) -> None:
    """Populate the spine's entry for ``key`` with packets, as its shim would (from the storage leaf's port)."""
    server, spine = bed.cluster.server(0, 0), bed.sw.switch_id
    for msg in (
        populate_invalidate(key, seq, spine, epoch, version),
        Message(op=Op.UPDATE, digest=key, seq=seq, value=value, target=spine),
    ):
        assert _through(bed, 1, server.ip, bed.cluster.spine_address(spine), msg).op == msg.op.reply()


def _read(bed: AgentBed, key: bytes) -> Message:
    client, server = bed.cluster.client(0, 0), bed.cluster.server(0, 0)
    return _through(bed, 2, client.ip, server.ip, Message(op=Op.GET, digest=key, seq=1, target=bed.sw.switch_id))


@pytest.mark.parametrize("state", ["deleted", "kept"])
def test_agent_restarted_without_its_state_never_serves_another_keys_value(bed: AgentBed, state: str) -> None:
    """Issue 15, defect 1: key a was valid in slot 0 and evicted (the registers keep its tag and value).
    An agent that restarts without its state file would count versions from 1 again: key b lands in slot 0
    with a's tag and hits at once with a's value.  It raises the switch's cache epoch instead, so b misses
    until its own populate; with its state file it continues the versions and keeps the epoch."""
    a, b = digest("a"), digest("b")
    first = bed.agent()
    e = first.insert(a)
    epoch = first.status().cache_epoch
    _fill(bed, a, b"value of a", 10, epoch, e.version)
    assert _read(bed, a).value == b"value of a"
    first.evict(a)
    first.stop()
    if state == "deleted":
        bed.state_file.unlink()
    second = bed.agent()
    try:
        e = second.insert(b)
        st = second.status()
        assert e.slot == 0
        if state == "deleted":
            assert st.cache_epoch > epoch and st.epoch_raises == 1
        else:
            assert (st.cache_epoch, st.epoch_raises) == (epoch, 0)
        assert e.version == (1 if state == "deleted" else 2)
        assert not _read(bed, b).cached  # not a's value
        _fill(bed, b, b"value of b", 11, st.cache_epoch, e.version)
        assert _read(bed, b).value == b"value of b"
    finally:
        second.stop()


def test_raising_the_epoch_invalidates_the_entries_on_the_switch_and_refills_them(bed: AgentBed) -> None:
    first = bed.agent()
    e = first.insert(digest("a"))
    epoch = first.status().cache_epoch
    _fill(bed, digest("a"), b"v", 10, epoch, e.version)
    assert _read(bed, digest("a")).cached
    first.stop()
    bed.state_file.unlink()
    second = bed.agent()
    try:
        assert not _read(bed, digest("a")).cached  # the entry's tag changed with the epoch
        _, params = second.conn.read_default(p4names.CACHE_EPOCH)
        assert params["epoch"] > epoch and json.loads(bed.state_file.read_text())["epoch"] == params["epoch"]
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and second.status(with_keys=True).keys[0].state == "pending":
            time.sleep(0.05)
        assert second.status(with_keys=True).keys[0].state == "failed"  # refill tried (no shim here)
    finally:
        second.stop()


def test_a_slot_whose_versions_run_out_starts_a_new_epoch(bed: AgentBed) -> None:
    agent = bed.agent()
    try:
        agent.insert(digest("a"))
        before = agent.status()
        agent.alloc._top = SlotAllocator.MAX_VERSION  # the switch has had every version of this epoch
        e = agent.insert(digest("b"))
        st = agent.status()
        assert st.cache_epoch > before.cache_epoch
        # a's entry keeps version 1, claimed in the new epoch: b gets the next one
        assert (st.epoch_raises - before.epoch_raises, e.slot, e.version) == (1, 1, 2)
    finally:
        agent.stop()


def test_an_unusable_state_file_is_refused_not_ignored(bed: AgentBed) -> None:
    for text, msg in (
        ("{not json", "unreadable"),
        ('{"switch": "sp9", "last_versions": []}', "not sp0's"),
        ('{"switch": "sp0", "last_versions": [70000]}', "malformed"),
    ):
        bed.state_file.write_text(text)
        with pytest.raises(StateFileError, match=msg):
            SwitchAgent(
                bed.cluster, bed.sw, bed.p4info, b"", shim_links(bed.cluster, bed.shim_dir), state_file=bed.state_file
            )


def test_reports_of_keys_whose_bucket_moved_away_are_not_inserted(bed: AgentBed) -> None:
    """Suspected in issue 15 and confirmed: reports queued before a partition move re-inserted keys of
    buckets the spine no longer owns (a copy nobody reads, and writes invalidate it for nothing)."""
    agent = bed.agent()
    try:
        other = [bed.sw.switch_id + 1] * p4names.SPINE_BUCKETS
        agent.configure(bed.cluster, other)  # every bucket moved to another spine
        agent.on_reports([{"key": int.from_bytes(digest("hot"), "big"), "estimate": 50, "elapsed_us": 1000}])
        st = agent.status()
        assert (st.occupied, st.not_owned) == (0, 1) and bed.cache_table() == {}
    finally:
        agent.stop()


def test_a_report_replaces_the_coldest_key_only_at_a_higher_rate(bed: AgentBed) -> None:
    """A report counts about the threshold whatever the key's rate: the switch says how far into its
    window the count was reached, and a full cache evicts its coldest key only for a key read faster.
    Before, the count itself was held against the cached keys' hits: once each had more hits per
    window than the threshold (any busy cache), no new hot key was ever cached (CI, issue 15 run)."""
    agent = bed.agent()
    try:
        for i in range(bed.cluster.cache_slots):
            agent.insert(digest(f"k{i}"))
        with agent.lock:
            for i, e in enumerate(agent.cached.values()):
                e.inserted_at -= 10  # settled: evictable
                e.hits = [20, 20 + i]  # every cached key: 20 or more hits in the last window
        window_us = 1 << bed.cluster.hh_window_shift
        row = {"key": int.from_bytes(digest("new"), "big"), "estimate": 4}
        agent.on_reports([{**row, "elapsed_us": int(0.9 * window_us)}])  # 3 more reads in 0.9 window: slow
        assert digest("new") not in bed.cache_table() and agent.status().not_hotter == 1
        agent.on_reports([{**row, "elapsed_us": 120_000}])  # 25 per second: hotter than 20, but not by the margin
        assert digest("new") not in bed.cache_table() and agent.status().not_hotter == 2
        agent.on_reports([{**row, "elapsed_us": window_us // 20}])  # 3 in a twentieth: ~60 per window
        table = bed.cache_table()
        assert digest("new") in table and digest("k0") not in table  # k0 had the fewest hits
        assert agent.report_rate({**row, "elapsed_us": 0}) == 3 * 256 * agent.hit_window * 1e6 / window_us
    finally:
        agent.stop()


def test_a_hybrid_replica_takes_a_young_entrys_slot_an_operator_insert_does_not(bed: AgentBed) -> None:
    """A full cache of entries younger than two hit windows refuses a key cached by hand (its coldest
    key's hits are not known yet), but not a replica the controller placed: under churn (a loaded
    run on a slow machine) a spine never had a settled entry when the rebalance came, and Hybrid's
    hottest keys stayed at one spine for 15 s and more (clean-clone make test)."""
    cluster = replace(bed.cluster, mechanism=Mechanism.HYBRID)
    agent = bed.agent()
    try:
        agent.configure(cluster, spine_buckets([bed.sw.switch_id]), replicated=[digest("hot")])
        for i in range(cluster.cache_slots):
            agent.insert(digest(f"k{i}"))
        with agent.lock:
            for i, e in enumerate(agent.cached.values()):
                e.hits = [0, 5 + i]  # k0 the coldest; every entry young
        assert agent.insert(digest("other")) is None  # not a replica: nothing evictable yet
        assert agent.insert(digest("hot")) is not None
        table = bed.cache_table()
        assert digest("hot") in table and digest("k0") not in table and digest("k1") in table
        agent.configure(cluster, spine_buckets([bed.sw.switch_id]), replicated=[digest("hot"), digest("hot2")])
        with agent.lock:
            agent.cached[digest("hot")].hits = [0, 0]  # the coldest now, but pinned
        assert agent.insert(digest("hot2")) is not None
        table = bed.cache_table()
        assert digest("hot") in table and digest("k1") not in table
    finally:
        agent.stop()


def test_a_storage_leafs_agent_probes_every_spine_through_it(tmp_path: Path) -> None:
    """A storage leaf's primary is its agent, so the agent is its probe source (the controller may not send
    packet-outs there): one probe per spine every 10 ms, counted by the leaf; none once the agent stops."""
    bed = AgentBed(tmp_path, storage_leaf=True)
    try:
        agent = bed.agent()
        sent = bed.switch.state.counters[p4names.PROBES_SENT]
        try:
            time.sleep(0.5)
            bed.switch.run_packet_outs()  # the packet loop's job (this bed runs no loop)
            counts = [sent.read(bed.cluster.spine(i).switch_id)[0] for i in range(2)]
            assert min(counts) >= 10, counts  # about 50 each; the bound leaves room for a loaded machine
        finally:
            agent.stop()
        time.sleep(0.05)
        bed.switch.run_packet_outs()
        stopped = [sent.read(bed.cluster.spine(i).switch_id)[0] for i in range(2)]
        time.sleep(0.2)
        bed.switch.run_packet_outs()
        assert [sent.read(bed.cluster.spine(i).switch_id)[0] for i in range(2)] == stopped
    finally:
        bed.switch.close()


def test_a_probe_asks_when_the_leaf_sends_it_not_when_it_was_queued(tmp_path: Path) -> None:
    """A probe that waited in the leaf's packet-out queue while its packet loop was busy starts the spine's
    ask (spine_asked) when the leaf sends it: the time it waited is not the spine's silence."""
    bed = AgentBed(tmp_path, storage_leaf=True)
    try:
        agent = bed.agent()
        try:
            time.sleep(0.1)
        finally:
            agent.stop()  # its probes are queued; none went through the pipeline (this bed runs no loop)
        time.sleep(0.2)
        sent = bed.switch.now_us()
        bed.switch.run_packet_outs()
        spine = bed.cluster.spine(0).switch_id
        assert bed.switch.state.counters[p4names.PROBES_SENT].read(spine)[0] >= 1
        assert bed.switch.state.registers[p4names.SPINE_ASKED].read(spine) >= sent
    finally:
        bed.switch.close()


def test_hits_are_sampled_from_the_slots_in_use(bed: AgentBed) -> None:
    """Each hit window reads the cache_hits cells of the cached keys' slots (one request of those cells, not
    the whole counter: softswitch builds a read under the lock its packets need)."""
    agent = bed.agent()
    try:
        a, b = agent.insert(digest("a")), agent.insert(digest("b"))
        hits = bed.switch.state.counters[p4names.CACHE_HITS]
        for _ in range(5):
            hits.count(a.slot, 100)
        hits.count(b.slot, 100)
        hits.count(7, 100)  # a slot nobody uses
        agent.sample_hits()
        agent.sample_hits()  # nothing since: the newest window is empty
        hits.count(b.slot, 100)
        agent.sample_hits()
        assert (a.hits, b.hits) == ([0, 0], [0, 1]) and (a.recent_hits, b.recent_hits) == (0, 1)
        with agent.lock:
            agent._last_hits.clear()
            for e in agent.cached.values():
                e.state = "unknown"  # (as read back after a restart: the count so far is not this window's)
        agent.sample_hits()
        assert (a.hits[-1], b.hits[-1]) == (0, 0)
    finally:
        agent.stop()


def test_the_digest_queue_is_bounded() -> None:
    """Suspected in issue 15 and confirmed: the queue of digest lists had no bound."""
    from p4rt.client import DIGEST_QUEUE, SwitchConnection

    conn = SwitchConnection("127.0.0.1:1", 1)
    try:
        assert conn.digest_lists.maxsize == DIGEST_QUEUE > 0
    finally:
        conn.close()


def test_an_entry_whose_populate_failed_is_filled_again(bed: AgentBed, redis_sock: Path) -> None:
    """A populate that did not complete (here: the key's shim was not up yet) leaves the entry invalid in its
    slot, and the detector no longer reports the key: the agent tries again until it is filled."""
    from tests.unit.test_shim_client import ShimThread, SwitchPeer

    agent = bed.agent()
    peer = shim = None
    try:
        e = agent.insert(digest("a"), name=b"a")  # as an operator's cache names the key
        assert e.state == "failed"  # no shim is listening
        peer = SwitchPeer(redis_sock)  # plays the switch's side of the coherence path
        shim = ShimThread(redis_sock, peer, bed.shim_dir / "shim-r0s0.sock", cluster=bed.cluster)
        redis.Redis(unix_socket_path=str(redis_sock)).set("a", b"v")
        deadline = time.monotonic() + 10  # (gRPC may wait out its reconnect backoff: a try or two fail)
        while time.monotonic() < deadline and agent.status(with_keys=True).keys[0].state != "valid":
            agent.fill_again()  # what the agent does every hit window
            time.sleep(0.1)
        assert agent.status(with_keys=True).keys[0].state == "valid"
        assert agent.status().fills_retried >= 1
        assert [m.op for m, _ in peer.seen] == [Op.INVALIDATE, Op.UPDATE]  # the populate, with its tag
        assert (peer.seen[0][0].spine_load, peer.seen[0][0].leaf_load) == (agent.status().cache_epoch, e.version)
        assert agent.fill_again() == 0  # nothing left to fill
    finally:
        agent.stop()
        if shim is not None:
            shim.close()
        if peer is not None:
            peer.close()
