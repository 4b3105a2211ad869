"""DcDetector (p4src/include/control/detector.p4): Count-Min + Bloom heavy-hitter reports."""

from __future__ import annotations

import zlib

from distcache import p4names
from distcache.cluster import Role
from distcache.hashing import h0
from distcache.p4names import Stat
from distcache.wire import Op
from softswitch.dataplane.header import DC_DIGEST, IP_DST, Headers, Meta
from softswitch.program import Action, Digest, MatchField, Param, Register, Table
from softswitch.state import SwitchState

ACTIONS = (
    Action(
        p4names.SET_DETECTOR,
        (Param("threshold", p4names.HH_THRESHOLD_BITS), Param("window_shift", p4names.HH_WINDOW_SHIFT_BITS)),
    ),
    Action(p4names.DESIGNATE),
)
TABLES = (
    Table(
        p4names.DETECTOR_CONFIG,
        (),
        (p4names.SET_DETECTOR,),
        p4names.SET_DETECTOR,
        default_params=(("threshold", p4names.HH_THRESHOLD), ("window_shift", p4names.HH_WINDOW_SHIFT)),
        size=1,
    ),
    Table(
        p4names.HH_BUCKETS,
        (MatchField(p4names.KEY_BUCKET, 16, "exact"),),
        (p4names.DESIGNATE, p4names.NO_ACTION),
        p4names.NO_ACTION,
        size=p4names.SPINE_BUCKETS,
    ),
    Table(
        p4names.HH_RACKS,
        (MatchField(p4names.KEY_IPV4_DST, 32, "lpm"),),
        (p4names.DESIGNATE, p4names.NO_ACTION),
        p4names.NO_ACTION,
        size=p4names.MAX_SWITCHES,
    ),
)
DIGESTS = (Digest(p4names.HH_DIGEST, p4names.HH_DIGEST_FIELDS),)
REGISTERS = (
    Register(
        p4names.HH_CM, 32, p4names.HH_CM_ROWS * p4names.HH_CM_WIDTH
    ),  # row r's cell i at r * HH_CM_WIDTH + i (size.p4)
    Register(p4names.HH_BLOOM, 16, p4names.HH_BLOOM_ROWS * p4names.HH_BLOOM_WIDTH),
)

OP_GET, ROLE_SPINE = int(Op.GET), int(Role.SPINE)
CM_SALTS = tuple(range(1, p4names.HH_CM_ROWS + 1))  # crc32 of {key, 8w<salt>}, one salt per row (meta.hh_salt1..)
BLOOM_SALTS = tuple(range(p4names.HH_CM_ROWS + 1, p4names.HH_CM_ROWS + p4names.HH_BLOOM_ROWS + 1))
CM_SALT_BYTES, BLOOM_SALT_BYTES = tuple(bytes((s,)) for s in CM_SALTS), tuple(bytes((s,)) for s in BLOOM_SALTS)
HH_COUNTED, HH_REPORTED = int(Stat.HH_COUNTED), int(Stat.HH_REPORTED)  # plain ints (see cache.py)


def apply(state: SwitchState, h: Headers, m: Meta) -> None:
    if m.op != OP_GET or m.cache_hit:
        return
    key = h.dc[DC_DIGEST]
    tables = state.tables
    if m.role == ROLE_SPINE:
        action, _, _ = tables[p4names.HH_BUCKETS].lookup(h0(key))
    else:
        action, _, _ = tables[p4names.HH_RACKS].lookup(int.from_bytes(h.ipv4[IP_DST], "big"))
    if action != p4names.DESIGNATE:
        return
    _, p, _ = tables[p4names.DETECTOR_CONFIG].lookup()
    threshold = p["threshold"]
    now = m.ingress_global_timestamp
    window = (now >> p["window_shift"]) & 0xFFFF
    regs = state.registers
    estimate = 0xFFFF
    key_crc = zlib.crc32(key)  # crc32(key ++ salt) continued from it: crc32(salt, crc32(key)) (zlib's running CRC)
    reg = regs[p4names.HH_CM]
    for row, salt in enumerate(CM_SALT_BYTES):
        i = row * p4names.HH_CM_WIDTH + zlib.crc32(salt, key_crc) % p4names.HH_CM_WIDTH
        cell = reg.read(i)
        count = cell & 0xFFFF if cell >> 16 == window else 0
        if count != 0xFFFF:
            count += 1
        reg.write(i, (window << 16) | count)
        estimate = min(estimate, count)
    stats = state.counters[p4names.DC_STATS]
    stats.count(HH_COUNTED, m.packet_length)
    if estimate < threshold:
        return
    tag = (window + 1) & 0xFFFF
    bloom = regs[p4names.HH_BLOOM]
    cells = [
        row * p4names.HH_BLOOM_WIDTH + zlib.crc32(salt, key_crc) % p4names.HH_BLOOM_WIDTH
        for row, salt in enumerate(BLOOM_SALT_BYTES)
    ]
    if all(bloom.read(i) == tag for i in cells):
        return  # reported already in this window
    for i in cells:
        bloom.write(i, tag)
    elapsed = now & ((1 << p["window_shift"]) - 1)  # into the window (detector.p4)
    state.emit_digest(p4names.HH_DIGEST, (int.from_bytes(key, "big"), estimate, m.switch_id, elapsed))
    stats.count(HH_REPORTED, m.packet_length)
