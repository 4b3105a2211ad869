"""The DistCache wire format: the one definition every Python part imports.

A DistCache message is the payload of a UDP datagram to or from ``DC_PORT``.
It is a fixed 40-byte header followed by the value.  Values of up to
``MAX_CACHEABLE`` bytes travel as ``nchunks`` zero-padded 16-byte chunks, the
shape a P4 parser can extract into a fixed set of ``bit<128>`` headers; larger
values travel as raw bytes after the header (``nchunks == 0``) and are never
cached by a switch.  All integers are big-endian (network byte order).

The field table :data:`HEADER_FIELDS` is the single source of truth: the
struct layout below, the scapy layer (:mod:`distcache.scapy_layer`), the
softswitch pipeline and ``docs/protocol.md`` all follow it, and tests hold
``p4src/headers.p4`` and the docs against it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum, IntFlag

DC_PORT = 8888
"""UDP port reserved for DistCache (destination of requests, source of replies)."""

VERSION = 1
KEY_LEN = 16
CHUNK_LEN = 16
MAX_CHUNKS = 8
MAX_CACHEABLE = CHUNK_LEN * MAX_CHUNKS  # 128 bytes: the largest value a switch caches
MAX_VALUE_LEN = 1024  # the largest value a message may carry at all
RETRY_SPAN = 30.0
"""Seconds a shim remembers a write (and its Redis marker lives): a client's retries must all fall within it."""

# (name, width in bits) in wire order.  Widths are multiples of 8.
HEADER_FIELDS: tuple[tuple[str, int], ...] = (
    ("version", 8),
    ("op", 8),
    ("flags", 8),
    ("status", 8),
    ("seq", 32),
    ("key", 128),
    ("target", 8),
    ("served_by", 8),
    ("spine_id", 8),
    ("leaf_id", 8),
    ("spine_load", 32),
    ("leaf_load", 32),
    ("vlen", 16),
    ("nchunks", 8),
    ("reserved", 8),
)
_FMT = {8: "B", 16: "H", 32: "I", 128: "16s"}
HEADER_STRUCT = struct.Struct("!" + "".join(_FMT[w] for _, w in HEADER_FIELDS))
_STRUCT = HEADER_STRUCT
HEADER_LEN = HEADER_STRUCT.size
assert HEADER_LEN == sum(w for _, w in HEADER_FIELDS) // 8 == 40


class Op(IntEnum):
    """Operation codes.  A reply is its request's code with the high bit set."""

    GET = 0x01
    PUT = 0x02
    DELETE = 0x03
    GET_REPLY = 0x81
    PUT_REPLY = 0x82
    DELETE_REPLY = 0x83
    INVALIDATE = 0x10  # coherence phase 1 (storage server -> cache switches)
    UPDATE = 0x11  # coherence phase 2 / cache population
    INVALIDATE_ACK = 0x90
    UPDATE_ACK = 0x91
    PROBE = 0x20  # liveness: the controller, through a leaf (packet-out), to one spine, which reflects it
    PROBE_REPLY = 0xA0

    @property
    def is_reply(self) -> bool:
        return bool(self & 0x80)

    def reply(self) -> Op:
        """The op code answering this request (``GET`` -> ``GET_REPLY``)."""
        return Op(self | 0x80)


REQUEST_OPS = frozenset({Op.GET, Op.PUT, Op.DELETE})
_REQUEST_CODES = frozenset(int(o) for o in REQUEST_OPS)
COHERENCE_OPS = frozenset({Op.INVALIDATE, Op.UPDATE})


class Status(IntEnum):
    OK = 0
    NOT_FOUND = 1
    ERROR = 2  # the server failed (e.g. Redis unreachable)
    TOO_LARGE = 3  # value longer than MAX_VALUE_LEN
    BAD_REQUEST = 4  # a request the server cannot act on
    BUSY = 5  # a write the shim has no room to remember for the retry span: not applied (shim/dedup.py)


class Flag(IntFlag):
    NONE = 0
    CACHED = 0x01  # this reply was served from a switch cache
    POPULATE = 0x02  # an INVALIDATE filling a new entry of `target`: its tag in spine_load (epoch), leaf_load (version)
    ATTEMPT = 0x1C  # a request's attempt number, bits 2..4 (attempt_flags): the client leaf routes a retry elsewhere


ATTEMPT_SHIFT = 2  # the attempt number's lowest bit in ``flags`` (FLAG_ATTEMPT_SHIFT in p4src/include/define.p4)
_ATTEMPT_MASK = int(Flag.ATTEMPT)
MAX_WIRE_ATTEMPT = int(Flag.ATTEMPT) >> ATTEMPT_SHIFT  # 7: the largest attempt number the field holds


def attempt_flags(attempt: int) -> Flag:
    """The ``flags`` bits that carry a request's attempt number (0 = its first copy).

    The client-rack leaf sends attempt 0 on its usual path, attempt 1 to the key's other cache, and
    attempt 2 and later past every cache to the storage server, each through another transit spine
    (docs/protocol.md, "Retries and their paths").  Attempts past the field's 7 carry 2..7 again, so
    late retries keep going to the server, each through the next transit spine.
    """
    if attempt < 0:
        raise ValueError(f"attempt {attempt}: expected 0 or more")
    if attempt > MAX_WIRE_ATTEMPT:
        attempt = 2 + (attempt - 2) % (MAX_WIRE_ATTEMPT - 1)
    return Flag(attempt << ATTEMPT_SHIFT)


def attempt_of(flags: int) -> int:
    """The attempt number a request's ``flags`` carry (what routing.p4 reads).

    Masked with a plain int: ``int & Flag.ATTEMPT`` builds an IntFlag member (microseconds), and the
    switch data planes ask this of every client read."""
    return (int(flags) & _ATTEMPT_MASK) >> ATTEMPT_SHIFT


def populate_invalidate(key: bytes, seq: int, target: int, epoch: int, version: int) -> Message:
    """The INVALIDATE that starts a populate of ``target``'s entry whose tag is (``epoch``, ``version``).

    Coherence messages carry no telemetry, so the tag rides in the load fields: a switch arms a
    new entry (a new tenure of its slot) only with its own populate (docs/protocol.md, Coherence).
    """
    return Message(
        op=Op.INVALIDATE,
        key=key,
        seq=seq,
        target=target,
        flags=Flag.POPULATE,
        spine_load=epoch & 0xFFFFFFFF,
        leaf_load=version & 0xFFFF,
    )


class WireError(ValueError):
    """A byte string is not a well-formed DistCache message.

    ``reason`` is a short stable token (``short``, ``version``, ``op``,
    ``chunks``, ``length``, ``too_large``) used for drop counters.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"malformed DistCache message ({reason}): {detail}")
        self.reason = reason


def refusal(data: bytes, err: WireError) -> Message | None:
    """The reply a server owes the sender of ``data``, a datagram that did not decode (``err``), when its
    header still reads as one of this version's requests: the request's reply op, key and seq, with
    ``TOO_LARGE`` for a value over the limit and ``BAD_REQUEST`` for anything else, so the client gets
    its error at once instead of waiting out its timeout.  None for what is no request (dropped and
    counted only: nothing but a request's sender is ever answered)."""
    if len(data) < HEADER_LEN:
        return None
    version, op, _flags, _status, seq, key = HEADER_STRUCT.unpack_from(data)[:6]
    if version != VERSION or op not in _REQUEST_CODES:
        return None
    status = Status.TOO_LARGE if err.reason == "too_large" else Status.BAD_REQUEST
    return Message(op=Op(op).reply(), key=bytes(key), seq=seq, status=status)


def chunks_for(vlen: int) -> int:
    """Number of 16-byte value chunks a value of ``vlen`` bytes travels in."""
    return (vlen + CHUNK_LEN - 1) // CHUNK_LEN if vlen <= MAX_CACHEABLE else 0


@dataclass(slots=True)
class Message:
    """One DistCache message.  ``key`` is always the 16-byte wire key."""

    op: Op
    key: bytes
    seq: int = 0
    value: bytes = b""
    status: Status = Status.OK
    flags: Flag = Flag.NONE
    target: int = 0
    served_by: int = 0
    spine_id: int = 0
    leaf_id: int = 0
    spine_load: int = 0
    leaf_load: int = 0

    @property
    def cached(self) -> bool:
        return bool(self.flags & Flag.CACHED)

    def reply(self, status: Status = Status.OK, value: bytes = b"") -> Message:
        """The reply a server sends for this request: same key and seq; a read's reply echoes its ``target``
        (the cache the client rack chose, which missed), so the client sees where its read was routed."""
        target = self.target if self.op == Op.GET else 0
        return Message(op=Op(self.op).reply(), key=self.key, seq=self.seq, status=status, value=value, target=target)


def encode(msg: Message) -> bytes:
    """Serialize ``msg``; raises :class:`WireError` for values that cannot travel."""
    if len(msg.key) != KEY_LEN:
        raise WireError("key", f"wire key must be {KEY_LEN} bytes, got {len(msg.key)}")
    vlen = len(msg.value)
    if vlen > MAX_VALUE_LEN:
        raise WireError("too_large", f"value of {vlen} bytes exceeds {MAX_VALUE_LEN}")
    n = chunks_for(vlen)
    head = _STRUCT.pack(
        VERSION,
        int(msg.op),
        int(msg.flags),
        int(msg.status),
        msg.seq & 0xFFFFFFFF,
        msg.key,
        msg.target,
        msg.served_by,
        msg.spine_id,
        msg.leaf_id,
        msg.spine_load & 0xFFFFFFFF,
        msg.leaf_load & 0xFFFFFFFF,
        vlen,
        n,
        0,
    )
    body = msg.value.ljust(n * CHUNK_LEN, b"\0") if n else msg.value
    return head + body


def decode(data: bytes) -> Message:
    """Parse one message; raises :class:`WireError` naming what is wrong."""
    if len(data) < HEADER_LEN:
        raise WireError("short", f"{len(data)} bytes, header needs {HEADER_LEN}")
    (
        version,
        op,
        flags,
        status,
        seq,
        key,
        target,
        served_by,
        spine_id,
        leaf_id,
        spine_load,
        leaf_load,
        vlen,
        nchunks,
        _reserved,
    ) = _STRUCT.unpack_from(data)
    if version != VERSION:
        raise WireError("version", f"version {version}, expected {VERSION}")
    try:
        op = Op(op)
    except ValueError:
        raise WireError("op", f"unknown op code 0x{op:02x}") from None
    if vlen > MAX_VALUE_LEN:
        raise WireError("too_large", f"value length {vlen} exceeds {MAX_VALUE_LEN}")
    if nchunks != chunks_for(vlen):
        raise WireError("chunks", f"nchunks={nchunks} does not fit vlen={vlen}")
    body_len = nchunks * CHUNK_LEN if nchunks else vlen
    if len(data) != HEADER_LEN + body_len:
        raise WireError("length", f"{len(data) - HEADER_LEN} body bytes, header says {body_len}")
    try:
        status = Status(status)
    except ValueError:
        raise WireError("status", f"unknown status {status}") from None
    value = bytes(data[HEADER_LEN : HEADER_LEN + vlen])
    return Message(
        op=op,
        key=bytes(key),
        seq=seq,
        value=value,
        status=status,
        flags=Flag(flags),
        target=target,
        served_by=served_by,
        spine_id=spine_id,
        leaf_id=leaf_id,
        spine_load=spine_load,
        leaf_load=leaf_load,
    )
