"""The DistCache wire format, protocol version 2 (docs/protocol.md): the one definition every Python part imports.

A DistCache message is the payload of a UDP datagram to or from ``DC_PORT`` or, where it does not fit a
datagram (:data:`MAX_DATAGRAM`), a frame on the stream path (TCP to the shim's ``DC_PORT``).  It is the
52-byte header of :data:`HEADER_FIELDS`, then **chunks | key | args | raw value**:

* the user's key byte for byte (up to :data:`MAX_KEY`), with a 128-bit **keyed** digest in the header that
  switches index (:func:`key_digest`: BLAKE2b keyed by the deployment's secret, in Python's hashlib and Go's
  x/crypto alike), so nobody without the secret can make two keys share a cache entry;
* values up to :data:`MAX_VALUE` (Redis' 512 MB): those up to :data:`MAX_CACHEABLE` as zero-padded 16-byte
  chunks a P4 parser extracts into a fixed set of ``bit<128>`` headers right behind the header, larger ones
  as raw bytes at the end, never cached;
* any single-key command (``EXEC``): its name and arguments in an argument block;
* 64-bit sequence numbers.

A switch parses the header and the chunks; what it does not parse rides behind them.  All integers are
big-endian (network byte order).  The field table :data:`HEADER_FIELDS` is the single source of truth: the
struct below, the scapy layer (:mod:`distcache.scapy_layer`), the softswitch pipeline, the Wireshark dissector
and docs/protocol.md follow it, and tests hold ``p4src/include/header.p4`` and the docs against it.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag

DC_PORT = 8888
"""UDP port reserved for DistCache (destination of requests, source of replies), and the shim's stream port."""

VERSION = 2
DIGEST_LEN = 16
CHUNK_LEN = 16
MAX_CHUNKS = 8
MAX_CACHEABLE = CHUNK_LEN * MAX_CHUNKS  # 128 bytes: the largest value a switch caches
MAX_DATAGRAM = 1472  # the UDP payload of a 1 500-byte MTU: anything longer travels on the stream path
MAX_DATAGRAM_KEY = 1024  # the longest key a datagram carries with any cacheable value; longer: the stream path
MAX_KEY = 0xFFFF  # the klen field; longer keys are refused before anything is sent
MAX_VALUE = 512 << 20  # Redis' proto-max-bulk-len: the largest value (a shim may be set lower)
MAX_ARGS = 0xFFFF  # arguments of one command
SECRET_LEN = 32  # bytes of a deployment's key secret (BLAKE2b takes keys up to 64)
RETRY_SPAN = 30.0
"""Seconds a shim remembers a write (and its Redis marker lives): a client's retries must all fall within it."""

# (name, width in bits) in wire order
HEADER_FIELDS: tuple[tuple[str, int], ...] = (
    ("version", 8),
    ("op", 8),
    ("flags", 8),
    ("status", 8),
    ("seq", 64),
    ("digest", 128),
    ("target", 8),
    ("served_by", 8),
    ("spine_id", 8),
    ("leaf_id", 8),
    ("spine_load", 32),
    ("leaf_load", 32),
    ("vlen", 32),
    ("alen", 32),
    ("klen", 16),
    ("nchunks", 8),
    ("reserved", 8),
)
_FMT = {8: "B", 16: "H", 32: "I", 64: "Q", 128: "16s"}
HEADER_STRUCT = struct.Struct("!" + "".join(_FMT[w] for _, w in HEADER_FIELDS))
HEADER_LEN = HEADER_STRUCT.size
assert HEADER_LEN == sum(w for _, w in HEADER_FIELDS) // 8 == 52
_U32 = struct.Struct("!I")


class Op(IntEnum):
    """Operation codes.  A reply is its request's code with the high bit set."""

    GET = 0x01
    PUT = 0x02
    DELETE = 0x03
    EXEC = 0x04  # any single-key command, run by the key's shim in the key's order
    GET_REPLY = 0x81
    PUT_REPLY = 0x82
    DELETE_REPLY = 0x83
    EXEC_REPLY = 0x84
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


REQUEST_OPS = frozenset({Op.GET, Op.PUT, Op.DELETE, Op.EXEC})
_REQUEST_CODES = frozenset(int(o) for o in REQUEST_OPS)
COHERENCE_OPS = frozenset({Op.INVALIDATE, Op.UPDATE})


class Status(IntEnum):
    OK = 0
    NOT_FOUND = 1
    ERROR = 2  # the server failed (e.g. Redis unreachable)
    TOO_LARGE = 3  # a key or value past the limits
    BAD_REQUEST = 4  # a request the server cannot act on
    BUSY = 5  # a write the shim has no room to remember for the retry span: not applied
    STREAM = 6  # the reply does not fit a datagram: ask again on the stream path
    WRONG_TYPE = 7  # the command does not apply to the type of value the key holds (Redis' WRONGTYPE)


class Flag(IntFlag):
    NONE = 0
    CACHED = 0x01  # this reply was served from a switch cache
    POPULATE = 0x02  # an INVALIDATE filling a new entry of `target`: its tag in spine_load (epoch), leaf_load (version)
    ATTEMPT = 0x1C  # a request's attempt number, bits 2..4 (attempt_flags): the client leaf routes a retry elsewhere
    STREAM = 0x20  # this message came on the stream path


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


def key_digest(key: bytes, secret: bytes) -> bytes:
    """The 16-byte digest switches index a key by: BLAKE2b-128 of the key, keyed by the deployment's secret.

    Keyed BLAKE2b is a PRF: without the secret, the chance that any two of n keys share a digest is at most
    n^2 / 2^129 (docs/protocol.md)."""
    if not 16 <= len(secret) <= hashlib.blake2b.MAX_KEY_SIZE:
        raise ValueError(f"a key secret is 16-{hashlib.blake2b.MAX_KEY_SIZE} bytes, not {len(secret)}")
    return hashlib.blake2b(key, digest_size=DIGEST_LEN, key=secret).digest()


class WireError(ValueError):
    """A byte string is not a well-formed DistCache message.

    ``reason`` is a short stable token (``short``, ``version``, ``op``,
    ``chunks``, ``length``, ``too_large``) used for drop counters.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"malformed DistCache message ({reason}): {detail}")
        self.reason = reason


def populate_invalidate(digest: bytes, seq: int, target: int, epoch: int, version: int) -> Message:
    """The INVALIDATE that starts a populate of ``target``'s entry whose tag is (``epoch``, ``version``).

    Coherence messages carry no telemetry, so the tag rides in the load fields: a switch arms a
    new entry (a new tenure of its slot) only with its own populate (docs/protocol.md, Coherence).
    """
    return Message(
        op=Op.INVALIDATE,
        digest=digest,
        seq=seq,
        target=target,
        flags=Flag.POPULATE,
        spine_load=epoch & 0xFFFFFFFF,
        leaf_load=version & 0xFFFF,
    )


def refusal(data: bytes, err: WireError) -> Message | None:
    """The reply a server owes the sender of ``data``, a datagram that did not decode (``err``), when its
    header still reads as one of this version's requests: the request's reply op, digest and seq, with
    ``TOO_LARGE`` for a value over the limit and ``BAD_REQUEST`` for anything else, so the client gets
    its error at once instead of waiting out its timeout.  None for what is no request (dropped and
    counted only: nothing but a request's sender is ever answered)."""
    if len(data) < HEADER_LEN:
        return None
    version, op, _flags, _status, seq, digest = HEADER_STRUCT.unpack_from(data)[:6]
    if version != VERSION or op not in _REQUEST_CODES:
        return None
    status = Status.TOO_LARGE if err.reason == "too_large" else Status.BAD_REQUEST
    return Message(op=Op(op).reply(), digest=bytes(digest), seq=seq, status=status)


def chunks_for(vlen: int) -> int:
    """Number of 16-byte value chunks a value of ``vlen`` bytes travels in."""
    return (vlen + CHUNK_LEN - 1) // CHUNK_LEN if vlen <= MAX_CACHEABLE else 0


@dataclass(slots=True)
class Message:
    """One message.  ``key`` is the user's key, exactly; ``digest`` its :func:`key_digest` (the sender's
    to set, the shim's to check); ``args`` a command's name and arguments (EXEC only)."""

    op: Op
    key: bytes = b""
    digest: bytes = bytes(DIGEST_LEN)
    seq: int = 0
    value: bytes = b""
    args: list[bytes] = field(default_factory=list)
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
        """The reply a server sends for this request: same key, digest and seq; a read's reply echoes its
        ``target`` (the cache the client rack chose, which missed), so the client sees where its read was routed."""
        target = self.target if self.op == Op.GET else 0
        return Message(Op(self.op).reply(), self.key, self.digest, self.seq, value, status=status, target=target)


def encode_args(args: list[bytes]) -> bytes:
    """A command's argument block: the count, then each argument's length and bytes (u32 each)."""
    if len(args) > MAX_ARGS:
        raise WireError("args", f"{len(args)} arguments, at most {MAX_ARGS}")
    return _U32.pack(len(args)) + b"".join(_U32.pack(len(a)) + bytes(a) for a in args)


def decode_args(block: bytes | memoryview) -> list[bytes]:
    """The arguments of an argument block; WireError if its counts and lengths do not add up to its size."""
    view = memoryview(block)
    if not view:
        return []
    if len(view) < 4:
        raise WireError("args", f"an argument block of {len(view)} bytes has no count")
    (count,) = _U32.unpack_from(view)
    if count > MAX_ARGS:
        raise WireError("args", f"{count} arguments, at most {MAX_ARGS}")
    out, at = [], 4
    for i in range(count):
        if at + 4 > len(view):
            raise WireError("args", f"argument {i} of {count} has no length: the block ends at {len(view)} bytes")
        (n,) = _U32.unpack_from(view, at)
        at += 4
        if at + n > len(view):
            raise WireError("args", f"argument {i} says {n} bytes, {len(view) - at} are left")
        out.append(bytes(view[at : at + n]))
        at += n
    if at != len(view):
        raise WireError("args", f"{len(view) - at} bytes after the {count} arguments")
    return out


def encode(msg: Message) -> bytes:
    """Serialize ``msg``; WireError for what cannot travel (a key or value past its limit, a bad digest size)."""
    if len(msg.key) > MAX_KEY:
        raise WireError("key", f"key of {len(msg.key)} bytes exceeds {MAX_KEY}")
    if len(msg.digest) != DIGEST_LEN:
        raise WireError("digest", f"digest must be {DIGEST_LEN} bytes, got {len(msg.digest)}")
    vlen = len(msg.value)
    if vlen > MAX_VALUE:
        raise WireError("too_large", f"value of {vlen} bytes exceeds {MAX_VALUE}")
    args = encode_args(msg.args) if msg.args else b""
    n = chunks_for(vlen)
    head = HEADER_STRUCT.pack(
        VERSION,
        int(msg.op),
        int(msg.flags),
        int(msg.status),
        msg.seq & 0xFFFFFFFFFFFFFFFF,
        msg.digest,
        msg.target,
        msg.served_by,
        msg.spine_id,
        msg.leaf_id,
        msg.spine_load & 0xFFFFFFFF,
        msg.leaf_load & 0xFFFFFFFF,
        vlen,
        len(args),
        len(msg.key),
        n,
        0,
    )
    chunks, raw = (msg.value.ljust(n * CHUNK_LEN, b"\0"), b"") if n else (b"", msg.value)
    return b"".join((head, chunks, msg.key, args, raw))


def decode(data: bytes | memoryview) -> Message:
    """Parse one message; WireError naming what is wrong.  A v1 message is refused naming both versions."""
    view = memoryview(data)
    if len(view) < 1:
        raise WireError("short", "an empty message")
    if view[0] != VERSION:
        raise WireError("version", f"protocol version {view[0]}, this peer speaks version {VERSION}")
    if len(view) < HEADER_LEN:
        raise WireError("short", f"{len(view)} bytes, the header needs {HEADER_LEN}")
    (_v, op, flags, status, seq, digest, target, served_by, spine_id, leaf_id, spine_load, leaf_load, vlen, alen,
     klen, nchunks, _r) = HEADER_STRUCT.unpack_from(view)  # fmt: skip
    try:
        op, status = Op(op), Status(status)
    except ValueError:
        raise WireError("op", f"unknown op 0x{op:02x} or status {status}") from None
    if vlen > MAX_VALUE:
        raise WireError("too_large", f"value length {vlen} exceeds {MAX_VALUE}")
    if nchunks > MAX_CHUNKS or nchunks != chunks_for(vlen):
        raise WireError("chunks", f"nchunks={nchunks} does not fit vlen={vlen}")
    chunk_bytes = nchunks * CHUNK_LEN
    raw = 0 if nchunks else vlen
    if len(view) != HEADER_LEN + chunk_bytes + klen + alen + raw:
        raise WireError(
            "length",
            f"{len(view) - HEADER_LEN} body bytes; the header says {chunk_bytes} of chunks, a {klen}-byte key, "
            f"{alen} of arguments and {raw} of raw value",
        )
    at = HEADER_LEN + chunk_bytes
    key = bytes(view[at : at + klen])
    args = decode_args(view[at + klen : at + klen + alen])
    if op != Op.EXEC and args:
        raise WireError("args", f"{op.name} carries no arguments")
    value = bytes(view[HEADER_LEN : HEADER_LEN + vlen]) if nchunks else bytes(view[at + klen + alen :])
    return Message(op, key, bytes(digest), seq, value, args, status, Flag(flags), target, served_by, spine_id,
                   leaf_id, spine_load, leaf_load)  # fmt: skip


def fits_datagram(msg: Message) -> bool:
    """Whether ``msg`` travels as one datagram (else the stream path): its encoded size within MAX_DATAGRAM."""
    size = HEADER_LEN + len(msg.key) + (len(encode_args(msg.args)) if msg.args else 0)
    n = chunks_for(len(msg.value))
    return size + (n * CHUNK_LEN if n else len(msg.value)) <= MAX_DATAGRAM


# -- the stream path: the same messages, each framed by its length ---------------------------------------------


FRAME_SLACK = 1 << 16
"""Bytes a frame may carry beyond its key and value: the header and an EXEC's argument framing."""


def redirect(data: bytes) -> bytes:
    """The datagram a reply too large for one (``data``, encoded) is sent as instead: its header and key
    with status ``STREAM`` and nothing else, which tells the client to ask again on the stream path with
    the same request (the same seq: a write is not applied again, its reply is sent again in full)."""
    m = decode(data)
    return encode(Message(m.op, m.key, m.digest, m.seq, status=Status.STREAM, flags=m.flags, target=m.target))


def frame(data: bytes) -> bytes:
    """One message as the stream path carries it: its length (u32), then its bytes."""
    return _U32.pack(len(data)) + data


class FrameReader:
    """Cuts a byte stream into messages.  A frame longer than ``max_frame`` is a broken peer: WireError, and the
    connection is to be closed (after a BAD_REQUEST reply); nothing is buffered past one frame's bytes."""

    def __init__(self, max_frame: int = MAX_KEY + MAX_VALUE + FRAME_SLACK) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The complete frames ``data`` ends (possibly none): their messages' bytes, in order."""
        self._buf += data
        out = []
        while len(self._buf) >= 4:
            (n,) = _U32.unpack_from(self._buf)
            if n > self.max_frame:
                raise WireError("frame", f"a frame of {n} bytes exceeds this peer's {self.max_frame}")
            if len(self._buf) < 4 + n:
                break
            out.append(bytes(self._buf[4 : 4 + n]))
            del self._buf[: 4 + n]
        return out

    @property
    def pending(self) -> int:
        """Bytes of a frame not complete yet."""
        return len(self._buf)
