"""What the DistCache PTF tests share: one small cluster, its entries, exact frames.

The switch under test plays one role of this cluster (2 spines, 2 storage racks
of one server, 2 client racks of one client) with exactly the table entries the
controller would give it (p4rt.plan.plan), so its port numbers are the
cluster's:

* storage leaf sl0 (id 64): port 1 server r0s0; ports 2, 3 spines sp0, sp1;
* client leaf cl0 (id 128): port 1 client c0h0; ports 2, 3 spines sp0, sp1;
* spine sp0 (id 1): ports 1, 2 storage leaves sl0, sl1; ports 3, 4 client leaves.

Expected frames are built here with scapy from the protocol (distcache.wire),
never by running a pipeline.
"""

from __future__ import annotations

import queue
import time

import ptf.testutils as tu
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from distcache import p4names
from distcache.cluster import Cluster, Mechanism, Role, Switch
from distcache.hashing import h0
from distcache.partition import spine_buckets
from distcache.wire import DC_PORT, Message, Op, decode, encode, populate_invalidate
from p4rt.plan import plan
from p4rt.probes import ProbeCounts, read_probe_counts, send_probe
from tests.common.keys import digest
from tests.ptf.base import P4RuntimeTest

C = Cluster(spines=2, storage_racks=2, client_racks=2)
SP0, SP1 = C.spine(0), C.spine(1)
SL0, SL1 = C.storage_leaf(0), C.storage_leaf(1)
CL0 = C.client_leaf(0)
SERVER, SERVER1, CLIENT = C.server(0, 0), C.server(1, 0), C.client(0, 0)
BUCKETS = spine_buckets([SP0.switch_id, SP1.switch_id])
CLIENT_PORT = 40000
HOST_MAC = "02:00:00:00:00:01"  # the source MAC of the frames tests send
SWITCH_MAC = "02:00:00:00:00:02"  # their destination MAC; a frame the switch routes leaves with it as source
WINDOW_SHIFT = 18  # 2^18 us = 262 ms windows for the aging tests (wide margins on a loaded machine)
STEADY_SHIFT = 32  # 2^32 us = 72 min: other tests never see a window end (counts they check stay put)


SPINES = (SP0, SP1)
LEAF_UPLINK = {SP0.switch_id: 2, SP1.switch_id: 3}  # a leaf's port to each spine (sl0 and cl0 alike)


def transit_spine(key: bytes | None, live: tuple[Switch, ...] = SPINES, attempt: int = 0) -> Switch:
    """The spine a leaf sends ``key``'s transit traffic through: slot h0 mod TRANSIT_SLOTS of the live
    spines dealt round-robin (p4rt.plan.plan); a non-DistCache packet (None) takes slot 0.
    A client's retry (``attempt``, from a client port only) takes the slot ``attempt`` further on."""
    slot = ((h0(key) if key is not None else 0) + attempt) & (p4names.TRANSIT_SLOTS - 1)
    return live[slot % len(live)]


def key_for_spine(spine: Switch, stem: str = "k", transit: Switch | None = None) -> bytes:
    """A wire key whose h0 bucket belongs to ``spine`` and whose transit goes through ``transit``
    (default: the same spine, so a leaf sends all of the key's traffic up one port)."""
    for i in range(10_000):
        k = digest(f"{stem}{i}")
        if BUCKETS[h0(k)] == spine.switch_id and transit_spine(k) == (transit or spine):
            return k
    raise AssertionError(f"no key maps to {spine.name}")


KEY = key_for_spine(SP0)  # the key most tests read and write
KEY1 = key_for_spine(SP1)


def dc_frame(
    src: str,
    dst: str,
    msg: Message | bytes,
    *,
    sport: int = CLIENT_PORT,
    dport: int = DC_PORT,
    smac: str = HOST_MAC,
    dmac: str = SWITCH_MAC,
    ttl: int = 64,
    udp_checksum: int | None = None,
    ip_options: bytes = b"",
) -> Packet:
    """An Ethernet/IPv4/UDP frame carrying ``msg`` (or raw bytes)."""
    payload = msg if isinstance(msg, bytes) else encode(msg)
    u = UDP(sport=sport, dport=dport) if udp_checksum is None else UDP(sport=sport, dport=dport, chksum=udp_checksum)
    pkt = Ether(src=smac, dst=dmac) / IP(src=src, dst=dst, ttl=ttl, id=1, flags=0) / u / Raw(payload)
    if ip_options:  # scapy's option classes reorder/pad; splice the raw option bytes in instead
        raw = bytes(pkt)
        ihl_byte = 0x40 | (5 + len(ip_options) // 4)
        total = len(raw) - 14 + len(ip_options)
        hdr = bytes([ihl_byte]) + raw[15:16] + total.to_bytes(2, "big") + raw[18:24] + b"\0\0" + raw[26:34]
        pkt = Ether(raw[:14] + hdr + ip_options + raw[34:])
        del pkt[IP].chksum
        if udp_checksum is None:
            del pkt[UDP].chksum
        pkt = Ether(bytes(pkt))
    return pkt


def gateway(leaf: Switch) -> str:
    """A leaf's rack gateway address (the addressing plan's ``.254``), where its probes come from."""
    return (
        C.server(leaf.switch_id - SL0.switch_id, 0)
        if leaf.role == Role.STORAGE_LEAF
        else C.client(leaf.switch_id - CL0.switch_id, 0)
    ).gateway


def probe_wire(leaf: Switch, spine: Switch, seq: int, *, reply: bool = False, ttl: int = 63) -> Packet:
    """A probe between ``leaf`` and ``spine`` as it travels the link: the PROBE the leaf sends up (from its
    gateway address to the spine's, TTL 64 less the leaf's hop), or the PROBE_REPLY the spine sends back
    (addresses swapped, stamped with the spine's id, TTL 64 less the spine's hop).  UDP checksum 0."""
    msg = Message(
        op=Op.PROBE_REPLY if reply else Op.PROBE,
        digest=bytes(16),
        seq=seq,
        target=spine.switch_id,
        leaf_id=leaf.switch_id,
        spine_id=spine.switch_id if reply else 0,
    )
    a, b = gateway(leaf), C.spine_address(spine.switch_id)
    src, dst, smac, dmac = (b, a, spine.mac, leaf.mac) if reply else (a, b, leaf.mac, spine.mac)
    return (
        Ether(src=smac, dst=dmac)
        / IP(src=src, dst=dst, ttl=ttl, id=0, flags=0)
        / UDP(sport=DC_PORT, dport=DC_PORT, chksum=0)
        / Raw(encode(msg))
    )


def routed(pkt: Packet, dmac: str, smac: str = SWITCH_MAC) -> Packet:
    """``pkt`` as a router forwards it: new MACs, TTL-1, IPv4 checksum recomputed, UDP checksum kept."""
    out = Ether(bytes(pkt))
    out.src, out.dst = smac, dmac
    out[IP].ttl -= 1
    del out[IP].chksum
    return Ether(bytes(out))


class DcTest(P4RuntimeTest):
    """A PTF test on one switch of :data:`C`, set up as the controller would."""

    role: Switch = SL0
    mechanism: Mechanism = Mechanism.DISTCACHE
    live: set[int] | None = None  # spines in service (None: all)
    replicated: tuple[bytes, ...] = ()  # Hybrid's replicated keys

    def setUp(self) -> None:
        super().setUp()
        self.install(self.role, self.mechanism)
        self.set_window(STEADY_SHIFT)

    # -- control plane ------------------------------------------------------------------------
    def install(self, sw: Switch, mechanism: Mechanism) -> None:
        cluster = Cluster(
            spines=C.spines, storage_racks=C.storage_racks, client_racks=C.client_racks, mechanism=mechanism
        )
        p = plan(cluster, sw, BUCKETS, self.live, self.replicated)
        self.config = p.config
        self.set_default(p4names.SWITCH_CONFIG, p4names.SET_CONFIG, p.config)
        for e in p.defaults:
            self.set_default(e.table, e.action, e.params_dict)
        for e in p.entries:
            self.insert(e.table, e.match_dict, e.action, e.params_dict)

    def configure(self, switch_id: int, role: int, mechanism: int) -> None:
        self.set_default(
            p4names.SWITCH_CONFIG, p4names.SET_CONFIG, {"switch_id": switch_id, "role": role, "mechanism": mechanism}
        )

    def set_window(self, shift: int) -> None:
        self.set_default(p4names.LOAD_WINDOW, p4names.SET_LOAD_WINDOW, {"shift": shift})

    def cache(self, key: bytes, slot: int, version: int) -> None:
        self.insert(
            p4names.CACHE_LOOKUP,
            {p4names.KEY_DC_KEY: int.from_bytes(key, "big")},
            p4names.CACHE_HIT,
            {"slot": slot, "version": version},
        )

    def uncache(self, key: bytes) -> None:
        self.sw.delete(p4names.CACHE_LOOKUP, {p4names.KEY_DC_KEY: int.from_bytes(key, "big")})

    def stat(self, s: p4names.Stat) -> int:
        return self.counter(p4names.DC_STATS, int(s))

    def drops(self, r: p4names.DropReason) -> int:
        return self.counter(p4names.DC_DROPS, int(r))

    # -- data plane ---------------------------------------------------------------------------
    def receive(self, timeout: float = 1.0) -> tuple[int, Packet]:
        """The next frame out of any port, as (port, scapy packet)."""
        res = tu.dp_poll(self, device_number=0, timeout=timeout)
        if not isinstance(res, self.dataplane.PollSuccess):
            self.fail("no frame came out of the switch")
        return res.port, Ether(res.packet)

    def exchange(self, port: int, pkt: Packet) -> tuple[int, Message]:
        """Send ``pkt`` and return the one DistCache message that comes out, with its port."""
        self.send(port, pkt)
        out_port, out = self.receive()
        return out_port, decode(bytes(out[UDP].payload))

    def coherence(
        self,
        op: Op,
        seq: int,
        value: bytes = b"",
        *,
        key: bytes = KEY,
        target: int = 0,
        src: str = SERVER.ip,
        dst: str | None = None,
        populate: tuple[int, int] | None = None,
    ) -> Packet:
        """A coherence message from the storage server, addressed as the shim addresses it.

        ``populate=(epoch, version)``: the INVALIDATE of a populate of ``target``'s entry with that tag.
        """
        if populate is not None:
            msg = populate_invalidate(key, seq, target, *populate)
        else:
            msg = Message(op=op, digest=key, seq=seq, value=value, target=target)
        return dc_frame(src, dst or C.spine_address(BUCKETS[h0(key)]), msg, sport=DC_PORT, dport=DC_PORT)

    def set_cache_epoch(self, epoch: int) -> None:
        self.set_default(p4names.CACHE_EPOCH, p4names.SET_CACHE_EPOCH, {"epoch": epoch})

    def fill(self, key: bytes, slot: int, version: int, value: bytes, seq: int, port: int = 1, epoch: int = 0) -> None:
        """Install ``key`` and populate it with ``value`` as the shim does: an INVALIDATE flagged
        POPULATE with the entry's tag, then the UPDATE of the same seq, both addressed to the
        switch under test, which reflects them as acknowledgements."""
        self.cache(key, slot, version)
        target = self.role.switch_id
        for op, v in ((Op.INVALIDATE, b""), (Op.UPDATE, value)):
            populate = (epoch, version) if op == Op.INVALIDATE else None
            self.send(port, self.coherence(op, seq, v, key=key, target=target, populate=populate))
            self.receive()

    def read(
        self, port: int, target: int, *, key: bytes = KEY, seq: int = 7, src: str = CLIENT.ip, dst: str = SERVER.ip
    ) -> tuple[int, Message]:
        """A GET for ``key`` marked for ``target``; the message that comes out, and its port."""
        return self.exchange(port, dc_frame(src, dst, Message(op=Op.GET, digest=key, seq=seq, target=target)))

    def find_window_start(self, read_port: int, reply_port: int, shift: int = WINDOW_SHIFT) -> float:
        """Set load windows of 2^shift us and return when one starts, in time.monotonic() seconds.

        The switch's windows are cut from its own clock; to know where they start, the switch
        plays a spine for a moment (with sp0's or no detector entries, so the probes' key is
        counted by no detector): a read targeted at it counts one, a reply it passes carries
        the count, and the count starting again from 1 marks a new window (found to within
        the couple of milliseconds between two probes).  Its configuration is restored after.
        """
        self.set_window(shift)
        me = self.config["switch_id"]
        self.configure(me, int(Role.SPINE), int(self.mechanism))
        try:
            last, deadline = 0, time.monotonic() + 4 * (1 << shift) / 1e6
            while time.monotonic() < deadline:
                t = time.monotonic()
                self.read(read_port, me, key=KEY1, dst=SERVER.ip)  # KEY1: no detector designates it here
                reply = Message(op=Op.GET_REPLY, digest=KEY1, seq=1)
                _, m = self.exchange(
                    reply_port, dc_frame(SERVER.ip, CLIENT.ip, reply, sport=DC_PORT, dport=CLIENT_PORT)
                )
                if m.spine_load <= last and last:
                    return t
                last = m.spine_load
            self.fail("the load count never started again: no window boundary seen")
        finally:
            self.set_default(p4names.SWITCH_CONFIG, p4names.SET_CONFIG, self.config)
        raise AssertionError("unreachable")

    # -- probes (liveness) ----------------------------------------------------------------------
    def probe(self, spine: Switch, seq: int = 1) -> None:
        """The controller's probe for ``spine``: a P4Runtime PacketOut into the leaf under test
        (p4rt.probes, as the controller sends it); fails unless it leaves up ``spine``'s port
        exactly as the protocol says."""
        send_probe(self.sw, self.role, spine, seq)
        self.expect(probe_wire(self.role, spine, seq), LEAF_UPLINK[spine.switch_id])

    def answer(self, spine: Switch, seq: int = 1) -> None:
        """``spine``'s reply to a probe, arriving on its port; returns once the leaf counted it (it keeps
        the reply: nothing comes out), so what the test sends next is heard after it."""
        before = self.counter(p4names.PROBES_ANSWERED, spine.switch_id)
        self.send(LEAF_UPLINK[spine.switch_id], probe_wire(self.role, spine, seq, reply=True))
        got = self.wait_counter(p4names.PROBES_ANSWERED, spine.switch_id, before + 1)
        self.assertEqual(got, before + 1, f"the leaf did not count {spine.name}'s probe reply")

    def probe_counts(self) -> dict[int, ProbeCounts]:
        return read_probe_counts(self.sw)

    # -- digests ------------------------------------------------------------------------------
    def enable_hot_key_digests(self, threshold: int, window_shift: int = STEADY_SHIFT) -> None:
        """Detector threshold and window, and delivery of its digests one by one on the stream."""
        while not self.sw.digest_lists.empty():  # lists a previous test left unread
            self.sw.digest_lists.get_nowait()
        self.set_default(
            p4names.DETECTOR_CONFIG, p4names.SET_DETECTOR, {"threshold": threshold, "window_shift": window_shift}
        )
        self.enable_digest(p4names.HH_DIGEST)

    def enable_digest(self, name: str) -> None:
        """Delivery of digest ``name`` one by one on the stream (lists a previous test left unread dropped)."""
        while not self.sw.digest_lists.empty():
            self.sw.digest_lists.get_nowait()
        self.sw.configure_digest(name, max_timeout_ns=0, max_list_size=1, ack_timeout_ns=10**9)

    def hot_keys(self, timeout: float = 1.0) -> list[dict[str, int]]:
        """The data of the next DigestList (acknowledged), or fail if none comes."""
        return self.digest_rows(p4names.HH_DIGEST, timeout)

    def digest_rows(self, name: str, timeout: float = 1.0) -> list[dict[str, int]]:
        """The data of the next DigestList (acknowledged), which must be of digest ``name``."""
        try:
            dl = self.sw.digest_lists.get(timeout=timeout)
        except queue.Empty:
            self.fail(f"no digest came (expected {name})")
        self.sw.ack_digest(dl)
        got, rows = self.sw.decode_digest(dl)
        self.assertEqual(got, name)
        return rows

    def expect_no_digest(self, timeout: float = 0.3) -> None:
        try:
            dl = self.sw.digest_lists.get(timeout=timeout)
        except queue.Empty:
            return
        self.fail(f"unexpected digest: {self.sw.decode_digest(dl)}")

    def wait_until(self, t: float) -> None:
        delay = t - time.monotonic()
        if delay > 0:
            time.sleep(delay)
