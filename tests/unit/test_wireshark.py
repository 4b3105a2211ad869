"""The Wireshark dissector (tools/wireshark/distcache.lua) shows every field as distcache.wire decodes it.

A pcap built with the project's encoder covers every op, every status, replies served from a cache with
their telemetry, coherence messages (a populate too), attempts, values of every shape up to the largest,
keys short, long and binary, commands with arguments, and malformed and truncated datagrams; tshark decodes
it with the dissector and
every field of every frame must equal distcache.wire.decode's (tests/common/wireshark.py), malformed
ones carrying WireError's reason as malformed expert info, never a Lua error.  The dissector is generated
from distcache/wire.py (tools/gen_dissector.py): a stale one fails here first.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import RawPcapWriter

from distcache import wire
from distcache.cluster import Cluster
from distcache.scapy_layer import frame
from distcache.wire import Flag, Message, Op, Status, encode
from tests.common.wireshark import TSHARK, Frame, dissect, expected, info_column, mismatches, reason_of
from tools import gen_dissector

needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (Debian package tshark)")
CLIENT, SERVER = "10.1.0.1", "10.2.0.1"
View = tuple[dict[int, Frame], str, dict[int, str]]  # tshark's fields per frame, its JSON, its Info column
digest = Cluster().digest
# byte offsets of header fields, for the malformed cases
AT = {name: sum(w for _, w in wire.HEADER_FIELDS[:i]) // 8 for i, (name, _) in enumerate(wire.HEADER_FIELDS)}


def request(op: Op, key: bytes = b"k1", **kw: object) -> bytes:
    return bytes(frame(Message(op, key, digest(key), **kw), CLIENT, SERVER))  # type: ignore[arg-type]


def reply(op: Op, key: bytes = b"k1", **kw: object) -> bytes:
    msg = Message(op, key, digest(key), **kw)  # type: ignore[arg-type]
    return bytes(frame(msg, SERVER, CLIENT, sport=wire.DC_PORT, dport=40000))


def raw(payload: bytes, sport: int = 40000, dport: int = wire.DC_PORT) -> bytes:
    return bytes(Ether() / IP(src=CLIENT, dst=SERVER) / UDP(sport=sport, dport=dport) / Raw(payload))


def _put(vlen: int) -> bytes:
    return encode(Message(Op.PUT, b"v", digest(b"v"), value=(bytes(range(256)) * 8)[:vlen]))


def _patched(payload: bytes, offset: int, new: bytes) -> bytes:
    return payload[:offset] + new + payload[offset + len(new) :]


def cases() -> list[tuple[str, bytes, int | None]]:
    """(what, Ethernet frame, bytes of it the capture holds or None for all)."""
    value = b"the value of k1"
    out: list[tuple[str, bytes, int | None]] = []
    for op in Op:
        carries = value if op in (Op.PUT, Op.UPDATE) else b""
        out.append((f"{op.name} request shape", request(op, seq=7, value=carries), None))
    for status in Status:
        out.append((f"GET_REPLY {status.name}", reply(Op.GET_REPLY, seq=8, status=status), None))
        out.append((f"PUT_REPLY {status.name}", reply(Op.PUT_REPLY, seq=9, status=status), None))
    telemetry = {"spine_id": 2, "spine_load": 2**32 - 1, "leaf_id": 9, "leaf_load": 5}
    populate = wire.populate_invalidate(digest(b"hot"), 15, 4, 99, 3)
    hit = {"flags": Flag.CACHED, "served_by": 3, "target": 3, "spine_id": 3, "leaf_id": 11}
    out += [
        ("cache hit from a spine", reply(Op.GET_REPLY, seq=10, value=value, spine_load=42, leaf_load=17, **hit), None),
        ("cache hit, 128-byte value", reply(Op.GET_REPLY, seq=11, value=bytes(range(128)), **hit), None),
        ("server reply with telemetry", reply(Op.GET_REPLY, seq=12, value=value, **telemetry), None),
        ("INVALIDATE", request(Op.INVALIDATE, seq=2**64 - 1, target=4), None),
        ("INVALIDATE_ACK", reply(Op.INVALIDATE_ACK, seq=13, target=4), None),
        ("UPDATE with value", request(Op.UPDATE, seq=14, target=4, value=b"new"), None),
        ("UPDATE_ACK", reply(Op.UPDATE_ACK, seq=14, target=4), None),
        ("populate INVALIDATE", bytes(frame(populate, SERVER, CLIENT)), None),
        ("long key", request(Op.GET, b"a key longer than sixteen bytes " * 8), None),
        ("binary key with escapes", request(Op.GET, b'\x1b[31m<b>"\\\x00\xff'), None),
        ("empty key", request(Op.GET, b""), None),
        ("EXEC with arguments", request(Op.EXEC, b"n", seq=16, args=[b"INCRBY", b"n", b"5", b""]), None),
        ("EXEC_REPLY WRONG_TYPE", reply(Op.EXEC_REPLY, b"n", seq=16, status=Status.WRONG_TYPE), None),
    ]  # fmt: skip
    attempts = range(wire.MAX_WIRE_ATTEMPT + 1)
    out += [(f"attempt {a}", request(Op.GET, flags=wire.attempt_flags(a)), None) for a in attempts]
    sizes = (1, 16, 17, 127, wire.MAX_CACHEABLE, wire.MAX_CACHEABLE + 1, 500)
    out += [(f"PUT vlen {n}", raw(_put(n)), None) for n in sizes]
    biggest = _put(wire.MAX_DATAGRAM - wire.HEADER_LEN - 1)  # the largest datagram (a 1-byte key)
    good = _put(20)
    cmd = encode(Message(Op.EXEC, b"n", digest(b"n"), args=[b"GET", b"n"]))
    v1 = bytes([1, 1, 0, 0]) + bytes(36)  # a version 1 GET: 40 bytes
    out += [
        ("PUT at the maximum size", raw(biggest), None),
        ("short: 1 byte", raw(b"\x02"), None),
        ("short: 51 bytes", raw(good[:51]), None),
        ("short: 27 bytes, from the port", raw(good[:27], sport=wire.DC_PORT, dport=5555), None),
        ("version 1", raw(v1), None),
        ("version 3", raw(_patched(good, 0, b"\x03")), None),
        ("unknown op", raw(_patched(good, 1, b"\x55")), None),
        ("unknown status", raw(_patched(good, 3, b"\x09")), None),
        ("value over MAX_VALUE", raw(_patched(biggest, AT["vlen"], (wire.MAX_VALUE + 1).to_bytes(4, "big"))), None),
        ("nchunks not fitting vlen", raw(_patched(good, AT["nchunks"], b"\x03")), None),
        ("chunks missing", raw(good[:-16]), None),
        ("bytes after the value", raw(good + b"extra"), None),
        ("key longer than the message", raw(_patched(good, AT["klen"], b"\x01\x00")), None),
        ("argument block that lies", raw(_patched(cmd, len(cmd) - 8, b"\x00\x00\x00\x09")), None),
        ("arguments on a GET", raw(_patched(cmd, 1, b"\x01")), None),
        ("large value cut", raw(biggest[:-1]), None),
        ("not DistCache at all", raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 3), None),
        ("capture cut in the header", raw(good), 14 + 20 + 8 + 30),
        ("capture cut in the digest", raw(good), 14 + 20 + 8 + 20),
        ("capture cut in the value", raw(good), 14 + 20 + 8 + 60),
        ("capture cut in a large value", raw(biggest), 14 + 20 + 8 + 600),
        ("capture cut in the arguments", raw(cmd), 14 + 20 + 8 + len(cmd) - 3),
        ("malformed and cut", raw(_patched(good, 0, b"\x07")), 14 + 20 + 8 + 50),
    ]  # fmt: skip
    return out


CASES = cases()


def decoded_pcap(tmp: Path) -> View:
    pcap = tmp / "cases.pcap"
    writer = RawPcapWriter(str(pcap), linktype=1)
    writer.write_header(None)
    for _, data, captured in CASES:
        writer.write_packet(data[:captured], sec=1, usec=0, caplen=len(data[:captured]), wirelen=len(data))
    writer.close()
    frames, text = dissect(pcap)
    return frames, text, info_column(pcap)


@pytest.fixture(scope="module")
def tshark_view(tmp_path_factory: pytest.TempPathFactory) -> View:
    return decoded_pcap(tmp_path_factory.mktemp("wireshark"))


def test_the_dissector_is_generated_from_the_wire_format() -> None:
    assert gen_dissector.OUTPUT.read_text() == gen_dissector.render(), "run python -m tools.gen_dissector"
    text = gen_dissector.render()
    assert f"local DC_PORT = {wire.DC_PORT}" in text
    for op in Op:
        assert f'[0x{int(op):02x}] = "{op.name}"' in text
    for name, _ in wire.HEADER_FIELDS:
        assert f'"distcache.{name}"' in text


@needs_tshark
@pytest.mark.parametrize("index", range(len(CASES)), ids=[c[0] for c in CASES])
def test_every_field_is_the_decoders(index: int, tshark_view: View) -> None:
    frames, _, _ = tshark_view
    _, data, captured = CASES[index]
    udp = 14 + 20 + 8
    payload = data[udp:]
    want, reason = expected(payload, None if captured is None else captured - udp)
    shown = frames.get(index + 1)
    assert shown is not None, "tshark did not hand the datagram to the DistCache dissector"
    assert reason_of(shown) == reason, shown.experts
    assert mismatches(shown, want) == []


@needs_tshark
def test_no_lua_error_and_malformed_frames_are_flagged(tshark_view: View) -> None:
    frames, text, _ = tshark_view
    assert "Lua Error" not in text and "_ws.lua.error" not in text
    flagged = {n for n, f in frames.items() if reason_of(f)}
    bad = {i + 1 for i, (_, data, captured) in enumerate(CASES) if expected(data[42:], captured and captured - 42)[1]}
    assert flagged == bad and len(bad) >= 15


@needs_tshark
def test_the_info_column_names_the_cache_hit_and_keeps_keys_as_data(
    tshark_view: View,
) -> None:
    _, _, info = tshark_view
    number = {what: i + 1 for i, (what, _, _) in enumerate(CASES)}
    assert info[number["cache hit from a spine"]] == 'GET_REPLY OK seq=10 key="k1" vlen=15 [cache hit: switch 3]'
    assert info[number["populate INVALIDATE"]] == "INVALIDATE seq=15 target=4 [populate]"
    assert info[number["empty key"]] == "GET seq=0"
    # a client's key bytes are shown escaped, never as terminal escapes or markup
    assert info[number["binary key with escapes"]] == 'GET seq=0 key="\\x1b[31m<b>\\x22\\x5c\\x00\\xff"'
    assert info[number["attempt 2"]] == 'GET seq=0 key="k1" attempt=2'
    assert info[number["unknown op"]].endswith("[Malformed: op]")
    assert info[number["EXEC with arguments"]] == 'EXEC seq=16 key="n"'
    assert info[number["version 1"]].endswith("[Malformed: version]")
