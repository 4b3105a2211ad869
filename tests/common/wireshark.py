"""tshark with the DistCache dissector, and what it must show for a datagram by distcache.wire's decoder.

Shared by tests/unit/test_wireshark.py (pcaps built from the encoder) and tests/e2e/test_wireshark_pcap.py
(pcaps of a deployment).  :func:`dissect` runs tshark once over a pcap and flattens each frame's
``distcache`` tree into ``{field: [values as tshark prints them]}``; :func:`expected` says the same of a
UDP payload through :func:`distcache.wire.decode` (or, for a malformed one, the header fields its bytes
hold and the WireError reason); :func:`mismatches` compares the two field by field.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from distcache import wire
from tools.gen_dissector import OUTPUT as DISSECTOR

TSHARK = shutil.which("tshark")
NEEDS_TSHARK = "tshark is not installed (Debian package tshark; make deps installs it)"
Fields = dict[str, list[object]]
_BYTES = {
    "distcache.digest",
    "distcache.key",
    "distcache.arg",
    "distcache.value",
    "distcache.value.chunk",
    "distcache.value.padding",
    "distcache.body",
}


@dataclass
class Frame:
    """What tshark showed of one frame's DistCache layer."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    experts: list[str] = field(default_factory=list)


def _flatten(tree: dict, out: Frame) -> None:
    for name, value in tree.items():
        if name == "_ws.expert.message":
            out.experts.append(value)
        if isinstance(value, dict):
            _flatten(value, out)
        elif name.startswith("distcache.") and name != "distcache.malformed":
            out.fields.setdefault(name, []).extend(value if isinstance(value, list) else [value])


def _tshark(pcap: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """tshark over ``pcap`` with the dissector loaded; fails on any Lua complaint on stderr."""
    assert TSHARK is not None, NEEDS_TSHARK
    cmd = [TSHARK, "-n", "-r", str(pcap), "-X", f"lua_script:{DISSECTOR}", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0 and "Lua" not in proc.stderr, proc.stderr[-2000:]
    return proc


def dissect(pcap: Path) -> tuple[dict[int, Frame], str]:
    """Frame number -> its DistCache layer (frames without one are absent), and tshark's raw JSON."""
    proc = _tshark(pcap, "-T", "json", "--no-duplicate-keys", "-J", "frame distcache")
    frames = {}
    for pkt in json.loads(proc.stdout or "[]"):
        layers = pkt["_source"]["layers"]
        if "distcache" in layers:
            frames[int(layers["frame"]["frame.number"])] = out = Frame()
            _flatten(layers["distcache"], out)
    return frames, proc.stdout


def info_column(pcap: Path) -> dict[int, str]:
    """Frame number -> the Info column tshark shows with the dissector."""
    proc = _tshark(pcap, "-T", "fields", "-e", "frame.number", "-e", "_ws.col.Info")
    rows = (line.split("\t", 1) for line in proc.stdout.splitlines())
    return {int(n): info for n, info in rows}


REPLY_BIT = int(wire.Op.GET.reply()) ^ int(wire.Op.GET)  # what Op.is_reply tests
COHERENCE = wire.COHERENCE_OPS | {op.reply() for op in wire.COHERENCE_OPS}


def printable(key: bytes) -> str:
    """A user key as the dissector shows it: printable ASCII as is, anything else (and ``"``, ``\\``) as ``\\xNN``."""
    return "".join(chr(b) if 0x20 <= b < 0x7F and b not in b'"\\' else f"\\x{b:02x}" for b in key)


def _children(out: Fields) -> Fields:
    """The fields the dissector derives from the op and flags in ``out``: reply bit, coherence, flags."""
    if "distcache.op" in out:
        op = int(out["distcache.op"][0])  # type: ignore[call-overload]
        out["distcache.reply"] = [bool(op & REPLY_BIT)]
        if op in COHERENCE:
            out["distcache.coherence"] = [True]
    if "distcache.flags" in out:
        flags = int(out["distcache.flags"][0])  # type: ignore[call-overload]
        for flag in wire.Flag.__members__.values():
            if flag.value and flag.name is not None:
                low = flag.value & -flag.value
                bits = (flags & flag.value) // low
                out[f"distcache.flags.{flag.name.lower()}"] = [bits if flag.value != low else bool(bits)]
    return out


def header(data: bytes) -> Fields:
    """The header fields that lie wholly within ``data`` (a malformed or cut payload), with their children."""
    out: Fields = {}
    offset = 0
    for name, bits in wire.HEADER_FIELDS:
        size = bits // 8
        if offset + size > len(data):
            break
        chunk = data[offset : offset + size]
        out[f"distcache.{name}"] = [chunk if size == wire.DIGEST_LEN else int.from_bytes(chunk, "big")]
        offset += size
    return _children(out)


def _body(out: Fields, msg: wire.Message) -> Fields:
    """The body's fields of a wholly captured message: chunks and padding, key, arguments, value."""
    vlen, n = len(msg.value), wire.chunks_for(len(msg.value))
    if vlen:
        out["distcache.value"] = [msg.value]
    if n:
        padded = msg.value.ljust(n * wire.CHUNK_LEN, b"\0")
        out["distcache.value.chunk"] = [padded[i : i + wire.CHUNK_LEN] for i in range(0, len(padded), wire.CHUNK_LEN)]
        if len(padded) > vlen:
            out["distcache.value.padding"] = [padded[vlen:]]
    if msg.key:
        out["distcache.key"] = [msg.key]
        out["distcache.key.text"] = [printable(msg.key)]
    if msg.args:
        out["distcache.args"] = [len(msg.args)]
        out["distcache.arg"] = list(msg.args)
    return out


def decoded(payload: bytes, captured: int | None = None) -> Fields:
    """Every field the dissector must show for a well-formed payload, from distcache.wire.decode.

    ``captured``: how much of the payload the capture holds (at least the header), when a snap length cut it:
    then the body is shown undecoded.
    """
    msg = wire.decode(payload)
    values = wire.HEADER_STRUCT.unpack_from(payload)
    out: Fields = {
        f"distcache.{name}": [v if name == "digest" else int(v)]
        for (name, _), v in zip(wire.HEADER_FIELDS, values, strict=True)
    }
    assert out["distcache.digest"] == [msg.digest] and out["distcache.seq"] == [msg.seq]
    out = _children(out)
    assert out["distcache.reply"] == [msg.op.is_reply] and out["distcache.flags.cached"] == [msg.cached]
    if msg.op == wire.Op.INVALIDATE and msg.flags & wire.Flag.POPULATE:
        out["distcache.populate.epoch"] = [msg.spine_load]
        out["distcache.populate.version"] = [msg.leaf_load]
    if captured is not None and captured < len(payload):
        if captured > wire.HEADER_LEN:
            out["distcache.body"] = [payload[wire.HEADER_LEN : captured]]
        return out
    return _body(out, msg)


def expected(payload: bytes, captured: int | None = None) -> tuple[Fields, str | None]:
    """What the dissector must show for ``payload`` of which ``captured`` bytes are in the capture.

    Returns the fields and the malformed reason (None for a well-formed, wholly captured payload): a
    well-formed payload shows every field of its decode; a malformed one its header fields and
    WireError's reason; a capture cut short the fields it holds and the reason "truncated".  A message of
    another version is refused as soon as its first byte is seen; an argument block only once it is whole.
    """
    captured = len(payload) if captured is None else captured
    if captured >= 1 and payload[0] != wire.VERSION:
        fields = header(payload[: min(captured, wire.HEADER_LEN)])
        if captured > wire.HEADER_LEN:
            fields["distcache.body"] = [payload[wire.HEADER_LEN : captured]]
        return fields, "version"
    try:
        wire.decode(payload)
    except wire.WireError as e:
        if e.reason != "short" and captured < wire.HEADER_LEN:
            return header(payload[:captured]), "truncated"
        if e.reason == "args" and captured < len(payload):  # the block is checked only when it is whole
            return decoded_cut(payload, captured), "truncated"
        fields = header(payload[:captured])
        if captured > wire.HEADER_LEN:
            fields["distcache.body"] = [payload[wire.HEADER_LEN : captured]]
        return fields, e.reason
    if captured < wire.HEADER_LEN:
        return header(payload[:captured]), "truncated"
    return decoded(payload, captured), None if captured == len(payload) else "truncated"


def decoded_cut(payload: bytes, captured: int) -> Fields:
    """A cut capture of a message whose header is sound: its header fields and the captured body."""
    out = header(payload[: wire.HEADER_LEN])
    if captured > wire.HEADER_LEN:
        out["distcache.body"] = [payload[wire.HEADER_LEN : captured]]
    return out


def _same(shown: str, want: object) -> bool:
    if isinstance(want, bool):
        return shown == ("1" if want else "0")
    if isinstance(want, int):
        return int(shown, 0) == want
    if isinstance(want, bytes):
        return bytes.fromhex(shown.replace(":", "")) == want
    return shown == want


def mismatches(frame: Frame, want: Fields) -> list[str]:
    """Each field where tshark's view differs from ``want`` (missing, extra, or another value)."""
    bad = [f"{name}: tshark shows it, the decoder has none" for name in sorted(set(frame.fields) - set(want))]
    for name, values in want.items():
        shown = frame.fields.get(name)
        if shown is None:
            bad.append(f"{name}: missing, the decoder has {values!r}")
        elif len(shown) != len(values) or not all(_same(s, w) for s, w in zip(shown, values, strict=True)):
            bad.append(f"{name}: tshark {shown!r}, decoder {values!r}")
    return bad


def reason_of(frame: Frame) -> str | None:
    """The reason of the malformed expert info a frame carries (None if it has none)."""
    prefix = "Malformed DistCache message ("
    reasons = [m[len(prefix) :].split(")", 1)[0] for m in frame.experts if m.startswith(prefix)]
    assert len(reasons) <= 1, frame.experts
    return reasons[0] if reasons else None


def udp_payload(frame: bytes, port: int = wire.DC_PORT) -> tuple[bytes, int] | None:
    """The UDP payload of an Ethernet/IPv4 frame to or from ``port`` and its length on the wire, or None."""
    if len(frame) < 14 + 20 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    udp = 14 + (frame[14] & 0x0F) * 4
    if len(frame) < udp + 8:
        return None
    sport, dport, length = struct.unpack_from("!HHH", frame, udp)
    if port not in (sport, dport):
        return None
    return frame[udp + 8 : udp + length], length - 8
