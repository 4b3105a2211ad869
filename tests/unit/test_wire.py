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
    MAX_VALUE_LEN,
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
    key=st.binary(min_size=16, max_size=16),
    seq=st.integers(0, 2**32 - 1),
    value=st.binary(max_size=MAX_VALUE_LEN),
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
    assert len(data) == HEADER_LEN + (n * 16 if n else len(msg.value))
    assert decode(data) == msg


@given(messages)
def test_scapy_layer_agrees_with_codec(msg: Message) -> None:
    pkt = frame(msg, "10.2.0.1", "10.1.0.1")
    assert bytes(pkt[UDP].payload) == encode(msg)
    parsed = DistCache(encode(msg))
    assert parsed.op == msg.op and parsed.seq == msg.seq and parsed.key == msg.key
    assert parsed.vlen == len(msg.value) and parsed.nchunks == chunks_for(len(msg.value))


def test_layout_is_big_endian_and_chunked() -> None:
    key = bytes(range(16))
    data = encode(Message(op=Op.PUT, key=key, seq=0x01020304, value=b"abc", leaf_load=0x0A0B0C0D))
    assert data[:8] == bytes([1, 0x02, 0, 0, 1, 2, 3, 4])
    assert data[8:24] == key
    assert data[32:36] == bytes([0x0A, 0x0B, 0x0C, 0x0D])
    assert data[36:40] == bytes([0, 3, 1, 0])  # vlen=3, nchunks=1, reserved
    assert data[40:] == b"abc" + b"\0" * 13
    big = encode(Message(op=Op.PUT, key=key, value=b"v" * (MAX_CACHEABLE + 1)))
    assert big[36:39] == bytes([0, MAX_CACHEABLE + 1, 0]) and len(big) == HEADER_LEN + MAX_CACHEABLE + 1


GOOD = encode(Message(op=Op.PUT, key=b"k" * 16, value=b"x" * 20))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "short"),
        (GOOD[:39], "short"),
        (GOOD[:-1], "length"),
        (GOOD + b"\0", "length"),
        (b"\x02" + GOOD[1:], "version"),
        (GOOD[:1] + b"\x7f" + GOOD[2:], "op"),
        (GOOD[:3] + b"\x09" + GOOD[4:], "status"),
        (GOOD[:38] + b"\x01" + GOOD[39:], "chunks"),
        (GOOD[:36] + (2000).to_bytes(2, "big") + b"\0" + GOOD[39:], "too_large"),
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


def test_encode_rejects_what_cannot_travel() -> None:
    with pytest.raises(WireError, match="too_large"):
        encode(Message(op=Op.PUT, key=b"k" * 16, value=b"v" * (MAX_VALUE_LEN + 1)))
    with pytest.raises(WireError, match="16 bytes"):
        encode(Message(op=Op.GET, key=b"short"))
