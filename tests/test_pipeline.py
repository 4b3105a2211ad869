"""Data-plane conformance of the DistCache pipeline, PTF style.

Each test installs the entries the controller would install (controller.entries),
sends one frame into a port of softswitch's pipeline and checks the exact
frame(s) that come out, or the counter that moved when it was dropped.  The
expected frames are built independently with scapy.
"""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from controller.entries import plan
from controller.partition import spine_buckets
from distcache import p4names as n
from distcache.cluster import Cluster
from distcache.hashing import wire_key
from distcache.p4names import DropReason, Stat
from distcache.wire import DC_PORT, Flag, Message, Op, decode, encode
from softswitch.dataplane import PROGRAM, DistCachePipeline
from softswitch.local import install
from softswitch.state import SwitchState

C = Cluster()
SP, SL, CL = C.spine(0), C.storage_leaf(0), C.client_leaf(0)
SERVER, CLIENT = C.server(0, 0), C.client(0, 0)
SPINE_ADDR = C.spine_address(SP.switch_id)
KEY = wire_key("hot")
T0 = 5_000_000  # µs: some time into the switch's life


def switch(sw) -> SwitchState:  # noqa: ANN001
    """A state with exactly what the controller installs on ``sw``."""
    return install(SwitchState(PROGRAM), plan(C, sw, spine_buckets([SP.switch_id])))


def frame(src: str, dst: str, msg: Message | bytes, sport: int = 40000, dport: int = DC_PORT,
          smac: str = "02:00:00:00:00:01", dmac: str = "02:00:00:00:00:02", ttl: int = 64) -> bytes:
    payload = msg if isinstance(msg, bytes) else encode(msg)
    return bytes(Ether(src=smac, dst=dmac) / IP(src=src, dst=dst, ttl=ttl) / UDP(sport=sport, dport=dport)
                 / Raw(payload))


def run(state: SwitchState, port: int, pkt: bytes, now: int = T0) -> list[tuple[int, bytes]]:
    return DistCachePipeline().process(state, port, pkt, now)


def counter(state: SwitchState, name: str, index: int) -> int:
    return state.counters[name].read(index)[0]


def cache_key(state: SwitchState, key: bytes, slot: int, version: int) -> None:
    state.tables[n.CACHE_LOOKUP].insert([int.from_bytes(key, "big")], n.CACHE_HIT, {"slot": slot, "version": version})


def coherence(state: SwitchState, port: int, op: Op, seq: int, value: bytes = b"", target: int = 0) -> list:
    msg = Message(op=op, key=KEY, seq=seq, value=value, target=target)
    return run(state, port, frame(SERVER.ip, SPINE_ADDR, msg, sport=DC_PORT))


def get(state: SwitchState, port: int, target: int, seq: int = 7, src: str = CLIENT.ip) -> list:
    return run(state, port, frame(src, SERVER.ip, Message(op=Op.GET, key=KEY, seq=seq, target=target)))


# ---- storage-rack leaf: cache fill, hit, coherence -----------------------------------------------------

def test_leaf_hit_returns_exact_reply_frame() -> None:
    s = switch(SL)
    cache_key(s, KEY, slot=3, version=9)
    value = b"hello distcache, 33 bytes long!!!"
    assert len(coherence(s, 1, Op.INVALIDATE, seq=100)) == 1  # forwarded up towards the spine
    assert len(coherence(s, 1, Op.UPDATE, seq=100, value=value)) == 1
    assert counter(s, n.DC_STATS, Stat.UPDATE) == 1
    out = get(s, 2, target=SL.switch_id, seq=41)  # arrives from the spine port
    assert len(out) == 1
    port, got = out[0]
    assert port == 2  # back up towards the client via the spine
    reply = Message(op=Op.GET_REPLY, key=KEY, seq=41, value=value, flags=Flag.CACHED, target=SL.switch_id,
                    served_by=SL.switch_id, leaf_id=SL.switch_id, leaf_load=1)
    want = Ether(src="02:00:00:00:00:02", dst=SP.mac) / IP(src=SERVER.ip, dst=CLIENT.ip, ttl=63) / \
        UDP(sport=DC_PORT, dport=40000, chksum=0) / Raw(encode(reply))
    assert got == bytes(want)
    assert counter(s, n.CACHE_HITS, 3) == 1 and counter(s, n.DC_STATS, Stat.READ_HIT) == 1


def test_read_not_targeted_here_is_forwarded_untouched_except_routing() -> None:
    s = switch(SL)
    cache_key(s, KEY, 0, 1)
    coherence(s, 1, Op.INVALIDATE, 5)
    coherence(s, 1, Op.UPDATE, 5, b"v")
    out = get(s, 2, target=SP.switch_id)  # the client rack chose the spine; the spine missed
    assert [p for p, _ in out] == [1]
    m = decode(bytes(Ether(out[0][1])[UDP].payload))
    assert m.op == Op.GET and not m.cached
    assert counter(s, n.DC_STATS, Stat.READ_HIT) == 0


def test_update_without_matching_invalidate_is_ignored() -> None:
    s = switch(SL)
    cache_key(s, KEY, 0, 1)
    coherence(s, 1, Op.UPDATE, 77, b"stale")
    assert counter(s, n.DC_STATS, Stat.UPDATE_STALE) == 1
    out = get(s, 2, target=SL.switch_id)
    assert not decode(bytes(Ether(out[0][1])[UDP].payload)).cached  # still a miss, goes to the server


def test_invalidate_stops_hits_and_late_update_of_older_write_is_ignored() -> None:
    s = switch(SL)
    cache_key(s, KEY, 0, 1)
    coherence(s, 1, Op.INVALIDATE, 10)
    coherence(s, 1, Op.UPDATE, 10, b"old")
    assert decode(bytes(Ether(get(s, 2, SL.switch_id)[0][1])[UDP].payload)).cached
    coherence(s, 1, Op.INVALIDATE, 11)  # next write, phase 1
    assert not decode(bytes(Ether(get(s, 2, SL.switch_id)[0][1])[UDP].payload)).cached
    coherence(s, 1, Op.UPDATE, 10, b"old")  # a late duplicate of the previous phase 2
    assert not decode(bytes(Ether(get(s, 2, SL.switch_id)[0][1])[UDP].payload)).cached
    coherence(s, 1, Op.UPDATE, 11, b"new")
    hit = decode(bytes(Ether(get(s, 2, SL.switch_id)[0][1])[UDP].payload))
    assert hit.cached and hit.value == b"new"


def test_reinserted_key_with_new_version_is_invalid_until_filled() -> None:
    s = switch(SL)
    cache_key(s, KEY, 0, 1)
    coherence(s, 1, Op.INVALIDATE, 3)
    coherence(s, 1, Op.UPDATE, 3, b"v1")
    s.tables[n.CACHE_LOOKUP].delete([int.from_bytes(KEY, "big")])
    cache_key(s, KEY, 0, 2)  # same slot, new version: the old valid tag must not serve
    assert not decode(bytes(Ether(get(s, 2, SL.switch_id)[0][1])[UDP].payload)).cached


def test_coherence_from_untrusted_ports_is_dropped_and_counted() -> None:
    s = switch(SL)
    cache_key(s, KEY, 0, 1)
    assert coherence(s, 2, Op.INVALIDATE, 1) == []  # from the spine-facing (fabric) port
    assert counter(s, n.DC_DROPS, DropReason.UNTRUSTED) == 1
    c = switch(CL)
    assert coherence(c, 1, Op.UPDATE, 1, b"evil") == []  # a client trying to write a cache
    assert coherence(c, 1, Op.INVALIDATE_ACK, 1) == []  # or to fake an acknowledgement
    assert counter(c, n.DC_DROPS, DropReason.UNTRUSTED) == 2


def test_big_values_are_never_cached() -> None:
    s = switch(SL)
    cache_key(s, KEY, 0, 1)
    coherence(s, 1, Op.INVALIDATE, 8)
    out = coherence(s, 1, Op.UPDATE, 8, b"z" * 200)
    assert len(out) == 1  # forwarded, but not applied
    assert counter(s, n.DC_STATS, Stat.UPDATE_STALE) == 1
    assert not decode(bytes(Ether(get(s, 2, SL.switch_id)[0][1])[UDP].payload)).cached


# ---- spine: reflection and load stamping ---------------------------------------------------------------

def test_spine_reflects_coherence_addressed_to_it() -> None:
    s = switch(SP)
    out = coherence(s, 1, Op.INVALIDATE, 55, target=SP.switch_id)
    assert len(out) == 1 and out[0][0] == 1  # back down to the storage rack
    pkt = Ether(out[0][1])
    assert (pkt[IP].src, pkt[IP].dst) == (SPINE_ADDR, SERVER.ip)
    assert pkt[UDP].dport == DC_PORT
    ack = decode(bytes(pkt[UDP].payload))
    assert ack.op == Op.INVALIDATE_ACK and ack.seq == 55 and ack.key == KEY


def test_cache_switches_stamp_their_load_into_replies() -> None:
    s = switch(SP)
    for seq in range(3):
        get(s, 2, target=SP.switch_id, seq=seq)  # three reads targeted here: load 3
    reply = Message(op=Op.GET_REPLY, key=KEY, seq=1, value=b"x")
    out = run(s, 1, frame(SERVER.ip, CLIENT.ip, reply, sport=DC_PORT, dport=40000))
    m = decode(bytes(Ether(out[0][1])[UDP].payload))
    assert (m.spine_id, m.spine_load) == (SP.switch_id, 3)
    # a new window starts the count again
    later = T0 + (1 << n.LOAD_WINDOW_SHIFT) * 2
    out = run(s, 1, frame(SERVER.ip, CLIENT.ip, reply, sport=DC_PORT, dport=40000), now=later)
    assert decode(bytes(Ether(out[0][1])[UDP].payload)).spine_load == 0


# ---- client-rack leaf: power of two choices ------------------------------------------------------------

def reply_with_loads(c: SwitchState, spine_load: int, leaf_load: int, now: int = T0) -> None:
    msg = Message(op=Op.GET_REPLY, key=KEY, seq=1, spine_id=SP.switch_id, spine_load=spine_load,
                  leaf_id=SL.switch_id, leaf_load=leaf_load)
    assert run(c, 2, frame(SERVER.ip, CLIENT.ip, msg, sport=DC_PORT, dport=40000), now)


def chosen(c: SwitchState, seq: int, now: int = T0) -> tuple[int, int]:
    out = run(c, 1, frame(CLIENT.ip, SERVER.ip, Message(op=Op.GET, key=KEY, seq=seq)), now)
    assert len(out) == 1
    return out[0][0], decode(bytes(Ether(out[0][1])[UDP].payload)).target


def test_client_leaf_picks_less_loaded_cache() -> None:
    c = switch(CL)
    reply_with_loads(c, spine_load=10, leaf_load=2)
    assert chosen(c, seq=2) == (2, SL.switch_id)
    reply_with_loads(c, spine_load=1, leaf_load=50)
    assert chosen(c, seq=3) == (2, SP.switch_id)
    assert counter(c, n.DC_STATS, Stat.ROUTED_SPINE) == 1 and counter(c, n.DC_STATS, Stat.ROUTED_LEAF) == 1


def test_ties_alternate_and_stale_loads_age_out() -> None:
    c = switch(CL)
    assert {chosen(c, seq)[1] for seq in (4, 5)} == {SP.switch_id, SL.switch_id}
    reply_with_loads(c, spine_load=100, leaf_load=0)
    assert chosen(c, seq=6)[1] == SL.switch_id
    much_later = T0 + (1 << n.LOAD_WINDOW_SHIFT) * 5
    assert chosen(c, seq=6, now=much_later)[1] == SP.switch_id  # loads aged to 0: tie, even seq -> spine


def test_nocache_mechanism_marks_no_target() -> None:
    c = switch(CL)
    c.tables[n.SWITCH_CONFIG].set_default(n.SET_CONFIG, {"switch_id": CL.switch_id, "role": 3, "mechanism": 0})
    assert chosen(c, seq=2)[1] == 0


# ---- malformed input ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("payload", "reason"), [
    (encode(Message(op=Op.GET, key=KEY))[:20], DropReason.TRUNCATED),
    (b"\x07" + encode(Message(op=Op.GET, key=KEY))[1:], DropReason.BAD_VERSION),
    (encode(Message(op=Op.GET, key=KEY))[:1] + b"\x42" + encode(Message(op=Op.GET, key=KEY))[2:],
     DropReason.UNKNOWN_OP),
    (encode(Message(op=Op.PUT, key=KEY, value=b"abc"))[:-16], DropReason.TRUNCATED),
    (encode(Message(op=Op.GET, key=KEY))[:38] + b"\x09\x00", DropReason.BAD_CHUNKS),
    (encode(Message(op=Op.PUT, key=KEY, value=b"a" * 20))[:38] + b"\x01\x00" + b"a" * 16, DropReason.BAD_CHUNKS),
])
def test_malformed_datagrams_are_counted_and_dropped(payload: bytes, reason: DropReason) -> None:
    for sw in (SP, SL, CL):
        s = switch(sw)
        assert run(s, 1, frame(CLIENT.ip, SERVER.ip, payload)) == []
        assert counter(s, n.DC_DROPS, reason) == 1
        assert sum(counter(s, n.DC_DROPS, r) for r in DropReason) == 1


def test_runt_frames_non_ip_and_unroutable_are_dropped() -> None:
    s = switch(SL)
    assert run(s, 1, b"\x00" * 10) == []
    assert counter(s, n.DC_DROPS, DropReason.TRUNCATED) == 1
    assert run(s, 1, bytes(Ether(type=0x0806) / Raw(b"\x00" * 28))) == []
    assert counter(s, n.DC_DROPS, DropReason.NOT_IPV4) == 1
    assert run(s, 1, frame(SERVER.ip, "192.0.2.1", Message(op=Op.GET, key=KEY))) == []
    assert counter(s, n.DC_DROPS, DropReason.NO_ROUTE) == 1


def test_other_udp_is_routed_like_a_router() -> None:
    s = switch(SL)
    out = run(s, 1, frame(SERVER.ip, CLIENT.ip, b"not distcache", sport=1234, dport=5678, ttl=9))
    assert [p for p, _ in out] == [2]
    pkt = Ether(out[0][1])
    assert pkt[IP].ttl == 8 and pkt.dst == SP.mac and bytes(pkt[UDP].payload) == b"not distcache"
    fresh = pkt[IP].copy()
    del fresh.chksum
    assert IP(bytes(fresh)).chksum == pkt[IP].chksum  # checksum recomputed for the new TTL
