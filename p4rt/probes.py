"""Probes of the spines' data planes: what the controller's probe loop calls (issue 16).

A leaf learns by itself which spines forward (p4src/include/control/liveness.p4), but only once
something asks: the probe source is the controller.  For each leaf and spine it sends a PROBE into
the leaf as a P4Runtime PacketOut (:func:`send_probe`); the leaf sends it up the port facing that
spine, the spine reflects it, and the leaf counts both per spine id (``probes_sent``,
``probes_answered``: :func:`read_probe_counts`).  So the controller learns, from those counters,
of a spine whose data plane stopped (its probes go unanswered at every leaf) even while its
P4Runtime server answers (:class:`ProbeLedger`).  A client leaf reports each death of a spine when
it hears from it again (:func:`spine_deaths`): the detection time in the data plane, measured there.
Probing every 10 ms per spine keeps a leaf's detection within DEAD_AFTER_US plus one interval.  The
controller probes through the client leaves, whose primary it is; a storage leaf's primary is its
agent, which probes through it the same way (only the primary may send packet-outs).

Where the probe source runs beside the leaf (a Mininet deployment: switches, controller and agents all
in the root namespace), it writes each probe straight into the leaf's probe port (PROBE_PORT in
define.p4, through the veth peer :func:`probe_interfaces` names), shaped as a packet-out: packet_out
header, then the frame; the parser takes it as it takes a packet-out.  That is a hardware switch's packet generator:
a PacketOut crosses the source's and the switch's gRPC stacks, and on a loaded 2-core host the probe
rounds took a third of it (0.6 cores idle, for 600 probes a second); a raw write costs a system call.
Without that interface (a switch elsewhere, a test bed without it) :class:`ProbeSource` sends
PacketOuts as before.  Only root processes of that host can write there: no host of the fabric can.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import queue
import socket
import struct
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from distcache import p4names
from distcache.cluster import Cluster, Role, Switch
from distcache.inet import csum16
from distcache.p4defines import PROTO_UDP, TYPE_IPV4
from distcache.p4names import PACKET_OUT_FIELDS
from distcache.wire import DC_PORT, Message, Op, encode
from p4rt.client import SwitchConnection
from p4rt.codec import P4RuntimeError

PROBE_TTL = 64
#: every leaf probes every spine this often (the controller for client leaves, the agent for a storage leaf):
#: with DEAD_AFTER_US, a leaf finds a stopped spine dead within 30 + 10 ms of its last packet
DP_PROBE_INTERVAL = 0.01
_ETH = struct.Struct("!6s6sH")
_IPV4 = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")


def leaf_address(leaf: Switch) -> str:
    """The address a leaf's probes come from: its rack's gateway (``.254`` of the rack's /24), which
    a spine's anti-spoofing check (client_source) accepts from a client rack's leaf."""
    if leaf.role not in (Role.STORAGE_LEAF, Role.CLIENT_LEAF):
        raise ValueError(f"{leaf.name} is not a leaf: only leaves send probes")
    return Cluster.rack_gateway(leaf)


def probe_frame(leaf: Switch, spine: Switch, seq: int) -> bytes:
    """The Ethernet frame of one PROBE from ``leaf`` to ``spine``: to the spine's address (the leaf's
    route to it leads up the port facing it), from the leaf's gateway address, UDP checksum 0."""
    if spine.role != Role.SPINE:
        raise ValueError(f"{spine.name} is not a spine: probes go to spines")
    dc = encode(Message(op=Op.PROBE, seq=seq, target=spine.switch_id, leaf_id=leaf.switch_id))
    udp = _UDP.pack(DC_PORT, DC_PORT, _UDP.size + len(dc), 0)
    src = ipaddress.IPv4Address(leaf_address(leaf)).packed
    dst = ipaddress.IPv4Address(Cluster.spine_address(spine.switch_id)).packed
    total = _IPV4.size + len(udp) + len(dc)
    ip = _IPV4.pack(0x45, 0, total, 0, 0, PROBE_TTL, PROTO_UDP, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", csum16(ip)) + ip[12:]
    mac = bytes.fromhex(leaf.mac.replace(":", ""))
    return _ETH.pack(mac, mac, TYPE_IPV4) + ip + udp + dc


def send_probe(conn: SwitchConnection, leaf: Switch, spine: Switch, seq: int) -> None:
    """Send one probe for ``spine`` into ``leaf`` (``conn`` is the leaf's primary session)."""
    conn.packet_out(probe_frame(leaf, spine, seq), spine_id=spine.switch_id)


def probe_interfaces(leaf: Switch | str) -> tuple[str, str]:
    """(the leaf's probe port, its peer where the probe source writes): the veth pair a deployment gives
    each leaf (dcnet.p4switch), named after the switch (at most 15 characters, as Linux wants)."""
    name = leaf if isinstance(leaf, str) else leaf.name
    return f"{name}-prb", f"{name}-prbs"


def packet_out_header(**fields: int) -> bytes:
    """The packet_out header's bytes (PACKET_OUT_FIELDS: names and widths, most significant bit first),
    as a frame on PROBE_PORT starts."""
    value, bits = 0, 0
    for name, width in PACKET_OUT_FIELDS:
        v = fields.pop(name)
        if not 0 <= v < 1 << width:
            raise ValueError(f"packet_out field {name}={v} does not fit {width} bits")
        value, bits = value << width | v, bits + width
    if fields:
        raise ValueError(f"packet_out has no field {sorted(fields)[0]!r}")
    if bits % 8:
        raise ValueError(f"packet_out header of {bits} bits is not whole bytes")
    return value.to_bytes(bits // 8, "big")


class ProbeSource:
    """The probe rounds of one leaf: written into its probe port where :func:`probe_interfaces`' peer
    exists on this host (a raw socket, opened as root), else sent as PacketOuts on the leaf's primary
    session.  A write that fails (the interface went away) falls back to PacketOuts and tries the port
    again after RETRY seconds."""

    RETRY = 1.0

    def __init__(self, leaf: Switch) -> None:
        leaf_address(leaf)  # a leaf, or ValueError
        self.leaf = leaf
        self.seq = 0
        self.iface = probe_interfaces(leaf)[1]
        self._sock: socket.socket | None = None
        self._next_try = 0.0
        self.written = 0  # probes written into the probe port
        self.packet_outs = 0  # probes sent as PacketOuts

    def _port(self) -> socket.socket | None:
        if self._sock is None and time.monotonic() >= self._next_try:
            self._next_try = time.monotonic() + self.RETRY
            if os.path.exists(f"/sys/class/net/{self.iface}"):
                sock = None
                try:
                    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                    sock.bind((self.iface, 0))
                    self._sock = sock
                except OSError:  # not root, or it went away just now: PacketOuts
                    if sock is not None:
                        sock.close()
        return self._sock

    def round(self, conn: SwitchConnection | None, spines: Iterable[Switch]) -> None:
        """One probe per spine.  Raises P4RuntimeError, the rest unsent, when they go as PacketOuts and
        the leaf's stream is down (or there is no session)."""
        for spine in spines:
            self.seq = (self.seq + 1) & 0xFFFFFFFFFFFFFFFF
            sock = self._port()
            if sock is not None:
                try:
                    sock.send(packet_out_header(spine_id=spine.switch_id) + probe_frame(self.leaf, spine, self.seq))
                    self.written += 1
                    continue
                except OSError:
                    self.close()
            if conn is None:
                raise P4RuntimeError(f"{self.leaf.name}: no probe port and no session to probe through", "UNAVAILABLE")
            send_probe(conn, self.leaf, spine, self.seq)
            self.packet_outs += 1

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None


@dataclass(frozen=True)
class ProbeCounts:
    """A leaf's probe counters for one spine: probes it sent up, replies that came back down."""

    sent: int
    answered: int


def read_probe_counts(conn: SwitchConnection, spines: Iterable[int] | None = None) -> dict[int, ProbeCounts]:
    """spine id -> counts, from a leaf, in one request: the cells of ``spines`` (default: every spine id);
    spines never probed are left out."""
    ids = list(spines) if spines is not None else list(range(1, p4names.LIVENESS_SPINES))
    got = conn.read_counters({p4names.PROBES_SENT: ids, p4names.PROBES_ANSWERED: ids})
    sent, answered = got[p4names.PROBES_SENT], got[p4names.PROBES_ANSWERED]
    out = {}
    for sid in ids:
        s, a = sent.get(sid, (0, 0))[0], answered.get(sid, (0, 0))[0]
        if s or a:
            out[sid] = ProbeCounts(s, a)
    return out


@dataclass
class _Track:
    sent: int = 0
    answered: int = 0
    sent_at_answer: int = 0  # ``sent`` when ``answered`` last moved
    answered_once: bool = False  # a spine never heard at this leaf is not "silent": maybe no link is up yet


class ProbeLedger:
    """Which spines stopped answering probes, from successive reads of the leaves' counters.

    A spine is silent at a leaf once ``misses`` probes were sent to it there since its last reply;
    its data plane is dead (:meth:`dead`) when it is silent at every leaf that probes it.  Counters
    that went down (the leaf restarted, or its pipeline was pushed again) start the leaf afresh.
    """

    def __init__(self, misses: int = 3) -> None:
        if misses < 1:
            raise ValueError(f"misses {misses}: expected 1 or more")
        self.misses = misses
        self._tracks: dict[tuple[str, int], _Track] = {}

    def update(self, leaf: str, counts: Mapping[int, ProbeCounts]) -> None:
        """Take one read of ``leaf``'s counters (:func:`read_probe_counts`)."""
        for sid, c in counts.items():
            t = self._tracks.get((leaf, sid))
            if t is None or c.sent < t.sent or c.answered < t.answered:
                # first seen (or counters reset): counted from now on.  A spine that never answered here is
                # never called silent (a leaf whose links are not up yet, a harness without links): a data
                # plane is declared dead only once it stopped answering, so probes can never make a spine
                # look dead that was not heard before (its P4Runtime server's silence is the other detector)
                self._tracks[(leaf, sid)] = _Track(c.sent, c.answered, c.sent, c.answered > 0)
                continue
            if c.answered != t.answered:
                t.sent_at_answer = c.sent
                t.answered_once = True
            t.sent, t.answered = c.sent, c.answered

    def silent(self, leaf: str) -> set[int]:
        """Spines ``leaf`` sent ``misses`` probes or more since their last reply."""
        return {sid for (lf, sid), t in self._tracks.items() if lf == leaf and self._silent(t, self.misses)}

    @staticmethod
    def _silent(t: _Track, misses: int) -> bool:
        return t.answered_once and t.sent - t.sent_at_answer >= misses

    def dead(self, spines: Iterable[int] | None = None, misses: int | None = None) -> set[int]:
        """Spines silent at every leaf that probes them (among ``spines``, default: all seen), with
        ``misses`` probes (default: the ledger's) counting as silent."""
        m = self.misses if misses is None else misses
        by_spine: dict[int, list[bool]] = {}
        for (_, sid), t in self._tracks.items():
            by_spine.setdefault(sid, []).append(self._silent(t, m))
        wanted = set(by_spine) if spines is None else set(spines)
        return {sid for sid, flags in by_spine.items() if sid in wanted and flags and all(flags)}


@dataclass(frozen=True)
class SpineDeath:
    """A spine's death as a client leaf saw it, reported (digest ``spine_death_t``) when the spine was
    heard from again: how long after the last packet heard from it the leaf found it dead (the detection
    time in the data plane) and how long it was silent.  ``at``: when the report arrived (time.time())."""

    leaf: str
    spine: str
    detect_s: float
    silent_s: float
    at: float


def spine_deaths(conn: SwitchConnection, leaf: Switch, cluster: Cluster, at: float) -> list[SpineDeath]:
    """The death reports waiting on ``leaf``'s primary session, each list acknowledged (a client leaf
    sends no other digest: it has no detector entries)."""
    out: list[SpineDeath] = []
    while True:
        try:
            dl = conn.digest_lists.get_nowait()
        except queue.Empty:
            return out
        try:
            name, rows = conn.decode_digest(dl)
        finally:
            conn.ack_digest(dl)
        if name != p4names.SPINE_DEATH_DIGEST:
            continue
        for r in rows:
            try:
                spine = cluster.switch_by_id(r["spine_id"]).name
            except KeyError:
                spine = f"switch id {r['spine_id']}"
            out.append(SpineDeath(leaf.name, spine, r["detect_us"] / 1e6, r["silent_us"] / 1e6, at))
