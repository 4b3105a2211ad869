"""Protocol v2's codec (distcache/wire.py): what it carries byte for byte, and every malformed message it
refuses with its reason (docs/protocol.md)."""

from __future__ import annotations

import os

import pytest

from distcache import wire
from distcache.wire import (
    DIGEST_LEN,
    HEADER_LEN,
    MAX_DATAGRAM,
    MAX_DATAGRAM_KEY,
    MAX_KEY,
    FrameReader,
    Message,
    Op,
    Status,
    WireError,
    decode,
    decode_args,
    encode,
    encode_args,
    fits_datagram,
    frame,
    key_digest,
)

SECRET = bytes(range(32))


def test_the_header_is_52_bytes_and_a_cacheable_value_rides_in_chunks_right_behind_it() -> None:
    key = b"user:\x00\xff" + bytes(200)  # binary, longer than v1's 16 bytes
    msg = Message(Op.PUT, key, key_digest(key, SECRET), seq=2**63 + 5, value=b"v" * 20)
    data = encode(msg)
    assert HEADER_LEN == 52 and len(data) == 52 + 32 + len(key)  # two chunks, then the key
    assert data[52:72] == b"v" * 20 and data[72:84] == bytes(12)  # where a switch parses the value
    assert decode(data) == msg


@pytest.mark.parametrize("size", [0, 1, 128, 129, 1 << 20])
def test_values_of_every_size_and_commands_with_arguments_round_trip(size: int) -> None:
    value = os.urandom(size)
    msg = Message(Op.PUT, b"k", key_digest(b"k", SECRET), seq=7, value=value)
    assert decode(encode(msg)) == msg
    cmd = Message(Op.EXEC, b"counter", seq=8, args=[b"INCRBY", b"counter", b"5", b""])
    assert decode(encode(cmd)) == cmd
    assert decode(encode(Message(Op.EXEC_REPLY, b"k", status=Status.WRONG_TYPE))).status == Status.WRONG_TYPE


def test_the_digest_is_keyed_and_the_secret_checked() -> None:
    assert key_digest(b"k", SECRET) != key_digest(b"k", bytes(32)) and len(key_digest(b"k", SECRET)) == DIGEST_LEN
    assert key_digest(b"a", SECRET) != key_digest(b"b", SECRET)
    with pytest.raises(ValueError, match="16-64 bytes"):
        key_digest(b"k", b"short")


def test_what_fits_a_datagram_and_what_takes_the_stream_path() -> None:
    assert fits_datagram(Message(Op.PUT, bytes(MAX_DATAGRAM_KEY), value=bytes(128)))
    assert not fits_datagram(Message(Op.PUT, b"k", value=bytes(MAX_DATAGRAM)))
    assert len(encode(Message(Op.PUT, bytes(MAX_DATAGRAM_KEY), value=bytes(128)))) <= MAX_DATAGRAM
    with pytest.raises(WireError, match=r"key of 65536 bytes exceeds 65535"):
        encode(Message(Op.PUT, bytes(MAX_KEY + 1)))


def test_a_v1_message_is_refused_naming_both_versions() -> None:
    v1 = bytes([1, 1, 0, 0]) + (1).to_bytes(4, "big") + bytes(32)  # a version 1 GET: its 40-byte header
    with pytest.raises(WireError, match="protocol version 1, this peer speaks version 2") as e:
        decode(v1)
    assert e.value.reason == "version"
    assert wire.refusal(v1, e.value) is None  # not this version's request: counted and dropped, never answered


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (lambda d: d[:30], "short"),
        (lambda d: d[:-1], "length"),
        (lambda d: d + b"x", "length"),
        (lambda d: d[:1] + b"\x7f" + d[2:], "op"),
        (lambda d: d[:3] + b"\x63" + d[4:], "op"),  # an unknown status
        (lambda d: d[:50] + b"\x02" + d[51:], "chunks"),  # nchunks that do not fit vlen
        (lambda d: d[:40] + (2**31).to_bytes(4, "big") + d[44:], "too_large"),
    ],
)
def test_malformed_messages_are_refused_with_their_reason(mangle, reason: str) -> None:  # noqa: ANN001
    data = encode(Message(Op.PUT, b"key", seq=3, value=b"0123456789"))
    with pytest.raises(WireError) as e:
        decode(mangle(data))
    assert e.value.reason == reason


def test_an_argument_block_that_lies_is_refused() -> None:
    good = encode_args([b"SET", b"k", b"v"])
    assert decode_args(good) == [b"SET", b"k", b"v"] and decode_args(b"") == []
    for bad, says in (
        (good[:-1], "says 1 bytes, 0 are left"),
        (good + b"!", "1 bytes after the 3 arguments"),
        ((5).to_bytes(4, "big") + good[4:], "argument 3 of 5 has no length"),
        (b"\x00\x01", "has no count"),
        ((70000).to_bytes(4, "big"), "at most 65535"),
    ):
        with pytest.raises(WireError, match=says):
            decode_args(bad)
    with pytest.raises(WireError, match="GET carries no arguments"):
        decode(encode(Message(Op.GET, b"k", args=[b"x"])))


def test_the_stream_path_frames_messages_and_refuses_a_frame_past_its_bound() -> None:
    big = encode(Message(Op.PUT, b"big", value=os.urandom(3 << 20)))
    small = encode(Message(Op.GET, b"k", seq=2))
    stream = frame(big) + frame(small)
    reader, got = FrameReader(), []
    for i in range(0, len(stream), 65536):  # as TCP delivers it, in pieces
        got += reader.feed(stream[i : i + 65536])
    assert got == [big, small] and reader.pending == 0
    assert decode(got[0]).value == decode(big).value
    with pytest.raises(WireError, match="a frame of 1001 bytes exceeds this peer's 1000") as e:
        FrameReader(max_frame=1000).feed(frame(bytes(1001)))
    assert e.value.reason == "frame"
