"""The DistCache pipeline as softswitch executes it: p4src/distcache.p4 in Python.

Each block below follows the P4 source statement by statement (parser,
ingress, checksum update, deparser) and uses the same tables, registers and
counters by name, so the control plane cannot tell the two targets apart.
v1model semantics kept on purpose: a parser error does not drop the packet
but reaches ingress as ``parser_error``; metadata starts zeroed; egress is
empty; the IPv4 checksum is recomputed on every IPv4 packet.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from distcache import p4names as n
from distcache.cluster import Mechanism, PortKind, Role
from distcache.hashing import h0
from distcache.p4names import DropReason, Stat
from distcache.wire import (
    CHUNK_LEN,
    DC_PORT,
    HEADER_LEN,
    HEADER_STRUCT,
    MAX_CACHEABLE,
    MAX_VALUE_LEN,
    VERSION,
)
from distcache.wire import Op as _Op
from softswitch.distcache_program import PROGRAM
from softswitch.program import Program
from softswitch.state import SwitchState

ETH_LEN, IPV4_LEN, UDP_LEN = 14, 20, 8
TYPE_IPV4, PROTO_UDP = 0x0800, 17
_ETH = struct.Struct("!6s6sH")
_IPV4 = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")

OP_GET, OP_PUT, OP_DELETE = int(_Op.GET), int(_Op.PUT), int(_Op.DELETE)
OP_GET_REPLY, OP_PUT_REPLY, OP_DELETE_REPLY = int(_Op.GET_REPLY), int(_Op.PUT_REPLY), int(_Op.DELETE_REPLY)
OP_INVALIDATE, OP_UPDATE = int(_Op.INVALIDATE), int(_Op.UPDATE)
OP_INVALIDATE_ACK, OP_UPDATE_ACK = int(_Op.INVALIDATE_ACK), int(_Op.UPDATE_ACK)
KNOWN_OPS = frozenset(int(o) for o in _Op)
REPLY_OPS = frozenset({OP_GET_REPLY, OP_PUT_REPLY, OP_DELETE_REPLY})
FLAG_CACHED = 0x01
STATUS_OK = 0

NO_ERROR, PACKET_TOO_SHORT, DC_BAD_VERSION, DC_BAD_CHUNKS = "NoError", "PacketTooShort", "DcBadVersion", "DcBadChunks"

ROLE_SPINE, ROLE_STORAGE_LEAF, ROLE_CLIENT_LEAF = int(Role.SPINE), int(Role.STORAGE_LEAF), int(Role.CLIENT_LEAF)
PORT_CLIENT, PORT_STORAGE = int(PortKind.CLIENT), int(PortKind.STORAGE)
MECH_DISTCACHE, MECH_PARTITION = int(Mechanism.DISTCACHE), int(Mechanism.PARTITION)
DC_FIELDS = ("version", "op", "flags", "status", "seq", "key", "target", "served_by", "spine_id", "leaf_id",
             "spine_load", "leaf_load", "vlen", "nchunks", "reserved")


@dataclass(slots=True)
class Headers:
    """Parsed headers (``None`` = invalid) plus the unparsed payload."""

    eth: list | None = None  # [dst, src, type]
    ipv4: list | None = None  # [ver_ihl, tos, total_len, ident, flags_frag, ttl, proto, csum, src, dst]
    udp: list | None = None  # [sport, dport, length, csum]
    dc: dict | None = None
    vals: list[bytes] = field(default_factory=list)
    payload: bytes = b""


@dataclass(slots=True)
class Meta:
    switch_id: int = 0
    role: int = 0
    mechanism: int = 0
    port_kind: int = 0
    cache_hit: int = 0
    slot: int = 0
    version: int = 0
    spine_cand: int = 0
    leaf_cand: int = 0
    load: int = 0
    routed: bool = False
    dropped: bool = False
    egress_spec: int = 0


def parse(pkt: bytes) -> tuple[Headers, str]:
    """DcParser: returns the headers and the parser error (``NoError`` if none)."""
    h = Headers()
    if len(pkt) < ETH_LEN:
        return h, PACKET_TOO_SHORT
    h.eth = list(_ETH.unpack_from(pkt, 0))
    off = ETH_LEN
    if h.eth[2] != TYPE_IPV4:
        h.payload = pkt[off:]
        return h, NO_ERROR
    if len(pkt) < off + IPV4_LEN:
        return h, PACKET_TOO_SHORT
    h.ipv4 = list(_IPV4.unpack_from(pkt, off))
    off += IPV4_LEN
    ihl, frag, proto = h.ipv4[0] & 0x0F, h.ipv4[4] & 0x1FFF, h.ipv4[6]
    if not (ihl == 5 and frag == 0 and proto == PROTO_UDP):
        h.payload = pkt[off:]
        return h, NO_ERROR
    if len(pkt) < off + UDP_LEN:
        return h, PACKET_TOO_SHORT
    h.udp = list(_UDP.unpack_from(pkt, off))
    off += UDP_LEN
    if h.udp[1] != DC_PORT and h.udp[0] != DC_PORT:
        h.payload = pkt[off:]
        return h, NO_ERROR
    if len(pkt) < off + HEADER_LEN:
        return h, PACKET_TOO_SHORT
    h.dc = dict(zip(DC_FIELDS, HEADER_STRUCT.unpack_from(pkt, off), strict=True))
    off += HEADER_LEN
    if h.dc["version"] != VERSION:
        return h, DC_BAD_VERSION
    nchunks = h.dc["nchunks"]
    if nchunks > 8:
        return h, DC_BAD_CHUNKS
    for _ in range(nchunks):
        if len(pkt) < off + CHUNK_LEN:
            return h, PACKET_TOO_SHORT
        h.vals.append(pkt[off:off + CHUNK_LEN])
        off += CHUNK_LEN
    h.payload = pkt[off:]
    return h, NO_ERROR


def _ipv4_checksum(fields: list) -> int:
    raw = _IPV4.pack(*fields[:7], 0, *fields[8:])
    s = sum(struct.unpack("!10H", raw))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def deparse(h: Headers) -> bytes:
    """DcComputeChecksum + DcDeparser."""
    out = [_ETH.pack(*h.eth)] if h.eth else []
    if h.ipv4:
        h.ipv4[7] = _ipv4_checksum(h.ipv4)
        out.append(_IPV4.pack(*h.ipv4))
    if h.udp:
        out.append(_UDP.pack(*h.udp))
    if h.dc:
        out.append(HEADER_STRUCT.pack(*(h.dc[f] for f in DC_FIELDS)))
    out.extend(h.vals)
    out.append(h.payload)
    return b"".join(out)


class DistCachePipeline:
    """DcIngress of p4src/distcache.p4 (DcEgress is empty)."""

    program: Program = PROGRAM

    def process(self, state: SwitchState, ingress_port: int, packet: bytes, now_us: int) -> list[tuple[int, bytes]]:
        h, perr = parse(packet)
        m = Meta()
        now_epoch = (now_us >> n.LOAD_WINDOW_SHIFT) & 0xFFFFFFFF
        tables, regs, ctrs = state.tables, state.registers, state.counters
        drops, stats = ctrs[n.DC_DROPS], ctrs[n.DC_STATS]

        def drop_reason(reason: int) -> None:
            drops.count(reason, len(packet))
            m.dropped = True

        action, p, _ = tables[n.SWITCH_CONFIG].lookup()
        if action == n.SET_CONFIG:
            m.switch_id, m.role, m.mechanism = p["switch_id"], p["role"], p["mechanism"]
        action, p, _ = tables[n.PORT_KIND].lookup(ingress_port)
        if action == n.SET_PORT_KIND:
            m.port_kind = p["kind"]

        # ---- malformed input: count and drop ----
        dc = h.dc
        if perr == PACKET_TOO_SHORT:
            drop_reason(DropReason.TRUNCATED)
        elif perr == DC_BAD_VERSION:
            drop_reason(DropReason.BAD_VERSION)
        elif perr == DC_BAD_CHUNKS:
            drop_reason(DropReason.BAD_CHUNKS)
        elif perr != NO_ERROR:
            drop_reason(DropReason.PARSER_OTHER)
        elif h.ipv4 is None:
            drop_reason(DropReason.NOT_IPV4)
        elif dc is not None:
            op = dc["op"]
            vlen = dc["vlen"]
            want_chunks = (vlen + 15) >> 4 if vlen <= MAX_CACHEABLE else 0
            if op not in KNOWN_OPS:
                drop_reason(DropReason.UNKNOWN_OP)
            elif vlen > MAX_VALUE_LEN or dc["nchunks"] != want_chunks:
                drop_reason(DropReason.BAD_CHUNKS)
            elif op in (OP_INVALIDATE, OP_UPDATE) and m.port_kind != PORT_STORAGE:
                drop_reason(DropReason.UNTRUSTED)
            elif op in (OP_INVALIDATE_ACK, OP_UPDATE_ACK) and m.port_kind == PORT_CLIENT:
                drop_reason(DropReason.UNTRUSTED)

        if not m.dropped and dc is not None:
            op = dc["op"]
            h.udp[3] = 0
            if m.role in (ROLE_SPINE, ROLE_STORAGE_LEAF):
                action, p, _ = tables[n.CACHE_LOOKUP].lookup(int.from_bytes(dc["key"], "big"))
                if action == n.CACHE_HIT:
                    m.cache_hit, m.slot, m.version = 1, p["slot"], p["version"]
                if op == OP_GET and dc["target"] == m.switch_id:
                    self._account_load(state, m, now_epoch, 1)
                    valid = regs[n.CACHE_VALID].read(m.slot) if m.cache_hit else 0
                    if m.cache_hit and valid != 0 and valid == m.version:
                        self._serve_hit(state, h, m)
                        stats.count(Stat.READ_HIT, len(packet))
                    else:
                        stats.count(Stat.READ_MISS, len(packet))
                elif op in (OP_INVALIDATE, OP_UPDATE):
                    if m.cache_hit:
                        self._apply_coherence(state, h, m, op, len(packet))
                    if dc["target"] == m.switch_id:
                        dc["op"] = op | 0x80
                        _reflect(h)
                        stats.count(Stat.REFLECTED, len(packet))
                elif op in REPLY_OPS:
                    self._account_load(state, m, now_epoch, 0)
                    _stamp_load(h, m)
                    stats.count(Stat.REPLY_STAMPED, len(packet))
            elif m.role == ROLE_CLIENT_LEAF:
                if op == OP_GET and m.port_kind == PORT_CLIENT:
                    self._choose_cache(state, h, m, now_epoch, len(packet))
                elif op in REPLY_OPS:
                    loads, epochs = regs[n.PEER_LOAD], regs[n.PEER_LOAD_EPOCH]
                    if dc["spine_id"] != 0:
                        loads.write(dc["spine_id"], dc["spine_load"])
                        epochs.write(dc["spine_id"], now_epoch)
                    if dc["leaf_id"] != 0:
                        loads.write(dc["leaf_id"], dc["leaf_load"])
                        epochs.write(dc["leaf_id"], now_epoch)
                    stats.count(Stat.LOAD_RECORDED, len(packet))

        if not m.dropped and not m.routed:
            action, p, _ = tables[n.IPV4_LPM].lookup(int.from_bytes(h.ipv4[9], "big"))
            if action == n.SET_NHOP:
                _set_nhop(h, m, p)
            else:
                m.dropped = True
                drops.count(DropReason.NO_ROUTE, len(packet))

        if m.dropped:
            return []
        return [(m.egress_spec, deparse(h))]

    # ---- actions and blocks of DcIngress ----
    @staticmethod
    def _account_load(state: SwitchState, m: Meta, now_epoch: int, amount: int) -> None:
        epoch_reg, count_reg = state.registers[n.LOAD_EPOCH], state.registers[n.LOAD_COUNT]
        count = count_reg.read(0)
        if epoch_reg.read(0) != now_epoch:
            count = 0
            epoch_reg.write(0, now_epoch)
        count = (count + amount) & 0xFFFFFFFF
        count_reg.write(0, count)
        m.load = count

    @staticmethod
    def _serve_hit(state: SwitchState, h: Headers, m: Meta) -> None:
        regs = state.registers
        dc = h.dc
        vlen = regs[n.CACHE_VLEN].read(m.slot)
        nchunks = ((vlen + 15) >> 4) & 0xFF
        base = m.slot * n.MAX_CHUNKS
        values = regs[n.CACHE_VALUE]
        dc.update(op=OP_GET_REPLY, status=STATUS_OK, flags=dc["flags"] | FLAG_CACHED,
                  served_by=m.switch_id, vlen=vlen, nchunks=nchunks)
        h.vals = [values.read(base + i).to_bytes(CHUNK_LEN, "big") for i in range(min(nchunks, n.MAX_CHUNKS))]
        h.udp[2] = (UDP_LEN + HEADER_LEN + (nchunks << 4)) & 0xFFFF
        h.ipv4[2] = (IPV4_LEN + h.udp[2]) & 0xFFFF
        _stamp_load(h, m)
        _reflect(h)
        state.counters[n.CACHE_HITS].count(m.slot)

    @staticmethod
    def _apply_coherence(state: SwitchState, h: Headers, m: Meta, op: int, nbytes: int) -> None:
        regs, stats = state.registers, state.counters[n.DC_STATS]
        dc = h.dc
        if op == OP_INVALIDATE:
            regs[n.CACHE_VALID].write(m.slot, 0)
            regs[n.CACHE_SEQ].write(m.slot, dc["seq"])
            stats.count(Stat.INVALIDATE, nbytes)
        elif regs[n.CACHE_SEQ].read(m.slot) == dc["seq"] and dc["vlen"] <= MAX_CACHEABLE:
            base = m.slot * n.MAX_CHUNKS
            regs[n.CACHE_VLEN].write(m.slot, dc["vlen"])
            values = regs[n.CACHE_VALUE]
            for i, chunk in enumerate(h.vals[:dc["nchunks"]]):
                values.write(base + i, int.from_bytes(chunk, "big"))
            regs[n.CACHE_VALID].write(m.slot, m.version)
            stats.count(Stat.UPDATE, nbytes)
        else:
            stats.count(Stat.UPDATE_STALE, nbytes)

    @staticmethod
    def _choose_cache(state: SwitchState, h: Headers, m: Meta, now_epoch: int, nbytes: int) -> None:
        """Power of two choices between the key's spine and storage-leaf caches."""
        tables, regs, stats = state.tables, state.registers, state.counters[n.DC_STATS]
        dc = h.dc
        dc["target"] = 0
        if m.mechanism in (MECH_DISTCACHE, MECH_PARTITION):
            action, p, _ = tables[n.SPINE_PARTITION].lookup(h0(dc["key"]))
            if action == n.SET_SPINE_CANDIDATE:
                m.spine_cand = p["spine_id"]
        if m.mechanism == MECH_DISTCACHE:
            action, p, _ = tables[n.STORAGE_RACK].lookup(int.from_bytes(h.ipv4[9], "big"))
            if action == n.SET_LEAF_CANDIDATE:
                m.leaf_cand = p["leaf_id"]
        loads, epochs = regs[n.PEER_LOAD], regs[n.PEER_LOAD_EPOCH]

        def fresh_load(sid: int) -> int:
            age = (now_epoch - epochs.read(sid)) & 0xFFFFFFFF
            return loads.read(sid) if age <= 1 else 0

        spine_load = fresh_load(m.spine_cand) if m.spine_cand else 0
        leaf_load = fresh_load(m.leaf_cand) if m.leaf_cand else 0
        if m.spine_cand and m.leaf_cand:
            tie_to_spine = (dc["seq"] & 1) == 0
            if spine_load < leaf_load or (spine_load == leaf_load and tie_to_spine):
                dc["target"] = m.spine_cand
            else:
                dc["target"] = m.leaf_cand
        elif m.spine_cand:
            dc["target"] = m.spine_cand
        elif m.leaf_cand:
            dc["target"] = m.leaf_cand
        if dc["target"] != 0 and dc["target"] == m.spine_cand:
            action, p, _ = tables[n.CACHE_ROUTE].lookup(dc["target"])
            if action == n.SET_NHOP:
                _set_nhop(h, m, p)
            stats.count(Stat.ROUTED_SPINE, nbytes)
        elif dc["target"] != 0:
            stats.count(Stat.ROUTED_LEAF, nbytes)


def _set_nhop(h: Headers, m: Meta, p: dict[str, int]) -> None:
    m.egress_spec = p["port"]
    h.eth[1] = h.eth[0]
    h.eth[0] = p["dmac"].to_bytes(6, "big")
    h.ipv4[5] = (h.ipv4[5] - 1) & 0xFF
    m.routed = True


def _stamp_load(h: Headers, m: Meta) -> None:
    if m.role == ROLE_SPINE:
        h.dc["spine_id"], h.dc["spine_load"] = m.switch_id, m.load
    else:
        h.dc["leaf_id"], h.dc["leaf_load"] = m.switch_id, m.load


def _reflect(h: Headers) -> None:
    h.ipv4[8], h.ipv4[9] = h.ipv4[9], h.ipv4[8]
    h.udp[0], h.udp[1] = h.udp[1], h.udp[0]
    h.ipv4[5] = 64
