"""The wire codec: round trips, the scapy layer agreeing byte for byte, malformed input."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.layers.inet import UDP

from distcache.scapy_layer import DistCache, frame
from distcache.wire import (
    HEADER_LEN,
    MAX_CACHEABLE,
    MAX_VALUE,
    Flag,
    Message,
    Op,
    Status,
    WireError,
    chunks_for,
    decode,
    encode,
)

messages = st.builds(
    Message,
    op=st.sampled_from(list(Op)),
    key=st.binary(max_size=300),
    digest=st.binary(min_size=16, max_size=16),
    seq=st.integers(0, 2**64 - 1),
    value=st.binary(max_size=1500),
    status=st.sampled_from(list(Status)),
    flags=st.sampled_from([Flag.NONE, Flag.CACHED]),
    target=st.integers(0, 255),
    served_by=st.integers(0, 255),
    spine_id=st.integers(0, 255),
    leaf_id=st.integers(0, 255),
    spine_load=st.integers(0, 2**32 - 1),
    leaf_load=st.integers(0, 2**32 - 1),
)


@given(messages)
def test_round_trip(msg: Message) -> None:
    data = encode(msg)
    n = chunks_for(len(msg.value))
    assert len(data) == HEADER_LEN + len(msg.key) + (n * 16 if n else len(msg.value))
    assert decode(data) == msg


@given(messages)
def test_scapy_layer_agrees_with_codec(msg: Message) -> None:
    pkt = frame(msg, "10.2.0.1", "10.1.0.1")
    assert bytes(pkt[UDP].payload) == encode(msg)
    parsed = DistCache(encode(msg))
    assert parsed.op == msg.op and parsed.seq == msg.seq and parsed.digest == msg.digest
    assert parsed.vlen == len(msg.value) and parsed.nchunks == chunks_for(len(msg.value))
    assert parsed.klen == len(msg.key) and parsed.alen == 0


def test_layout_is_big_endian_and_chunked() -> None:
    digest = bytes(range(16))
    data = encode(Message(Op.PUT, b"key", digest, seq=0x0102030405060708, value=b"abc", leaf_load=0x0A0B0C0D))
    assert data[:12] == bytes([2, 0x02, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8])
    assert data[12:28] == digest
    assert data[36:40] == bytes([0x0A, 0x0B, 0x0C, 0x0D])
    assert data[40:52] == bytes([0, 0, 0, 3, 0, 0, 0, 0, 0, 3, 1, 0])  # vlen=3, alen=0, klen=3, nchunks=1, reserved
    assert data[52:] == b"abc" + b"\0" * 13 + b"key"  # the chunks, then the key
    big = encode(Message(Op.PUT, b"key", digest, value=b"v" * (MAX_CACHEABLE + 1)))
    assert big[40:44] == (MAX_CACHEABLE + 1).to_bytes(4, "big") and big[50] == 0
    assert big[52:] == b"key" + b"v" * (MAX_CACHEABLE + 1)  # the key, then the raw value


GOOD = encode(Message(Op.PUT, b"k" * 16, bytes(16), value=b"x" * 20))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "short"),
        (GOOD[:51], "short"),
        (GOOD[:-1], "length"),
        (GOOD + b"\0", "length"),
        (b"\x01" + GOOD[1:], "version"),
        (GOOD[:1] + b"\x7f" + GOOD[2:], "op"),
        (GOOD[:3] + b"\x09" + GOOD[4:], "op"),
        (GOOD[:50] + b"\x01" + GOOD[51:], "chunks"),
        (GOOD[:40] + (MAX_VALUE + 1).to_bytes(4, "big") + GOOD[44:], "too_large"),
    ],
)
def test_malformed_input_raises_wire_error(data: bytes, reason: str) -> None:
    with pytest.raises(WireError) as e:
        decode(data)
    assert e.value.reason == reason
    assert reason in str(e.value)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_crash_the_decoder(data: bytes) -> None:
    with contextlib.suppress(WireError):
        decode(data)


@given(st.binary(min_size=1, max_size=200))
def test_arbitrary_bodies_behind_a_sound_header_never_crash_the_decoder(tail: bytes) -> None:
    with contextlib.suppress(WireError):
        decode(GOOD[:HEADER_LEN] + tail)


def test_encode_rejects_what_cannot_travel() -> None:
    with pytest.raises(WireError, match="digest"):
        encode(Message(Op.GET, b"k", b"short"))
    with pytest.raises(WireError, match="key"):
        encode(Message(Op.GET, b"k" * 0x10000, bytes(16)))
