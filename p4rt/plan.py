"""The table entries each switch needs, derived from the cluster description.

Pure functions: given a :class:`Cluster`, a switch and the spine partition,
they list what the controller writes over P4Runtime.  Keeping them pure makes
them testable without any switch, and lets the controller diff old and new
state when partitions change.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

from distcache import p4names
from distcache.cluster import FABRIC_NET, Cluster, PortKind, Role, Switch
from distcache.placement import detector_designates
from p4rt.p4info import Match, MatchValue


@dataclass(frozen=True)
class Entry:
    table: str
    match: tuple[tuple[str, MatchValue], ...]
    action: str
    params: tuple[tuple[str, int], ...] = ()

    @property
    def match_dict(self) -> dict[str, MatchValue]:
        return dict(self.match)

    @property
    def params_dict(self) -> dict[str, int]:
        return dict(self.params)


@dataclass
class SwitchPlan:
    """What one switch needs: its switch_config, other tables' default actions, and entries."""

    switch: Switch
    config: dict[str, int]
    entries: list[Entry] = field(default_factory=list)
    defaults: list[Entry] = field(default_factory=list)  # match is empty: the table's default action
    meters: dict[tuple[str, int], tuple[int, int, int, int] | None] = field(default_factory=dict)  # None: no limit


def _mac(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def _ip(addr: str) -> int:
    return int(ipaddress.IPv4Address(addr))


def _prefix(prefix: str) -> Match:
    """An LPM match on ``prefix`` (``a.b.c.d/len``)."""
    net = ipaddress.IPv4Network(prefix)
    return Match(int(net.network_address), prefix_len=net.prefixlen)


def _route(prefix: str, dmac: str, port: int) -> Entry:
    return Entry(
        p4names.IPV4_LPM,
        ((p4names.KEY_IPV4_DST, _prefix(prefix)),),
        p4names.SET_NHOP,
        (("dmac", _mac(dmac)), ("port", port)),
    )


def plan(
    cluster: Cluster, sw: Switch, buckets: list[int], live: set[int] | None = None, replicated: Iterable[bytes] = ()
) -> SwitchPlan:
    """Everything ``sw`` needs: its config action and its table entries.

    ``live`` are the spines in service (default: all): leaves spread transit traffic over them
    (transit_spine) and client-rack leaves spread reads of replicated keys over them
    (replica_spine), so a failed spine carries none.  Each slot also names the next live spine of
    the round-robin, which a leaf takes instead when it finds the slot's spine dead (liveness.p4),
    so a leaf never detours to a spine outside ``live``; port_spine tells every leaf which of its
    ports faces which spine (what it hears from them).  ``replicated``: the keys Hybrid replicates
    in every spine (replicated_keys at client-rack leaves; every spine may cache them).
    """
    config = {"switch_id": sw.switch_id, "role": int(sw.role), "mechanism": int(cluster.mechanism)}
    p = SwitchPlan(sw, config)
    ports = cluster.ports(sw.name)
    spines = [cluster.spine(i) for i in range(cluster.spines)]

    def kind(port: int, k: PortKind) -> None:
        p.entries.append(
            Entry(p4names.PORT_KIND, ((p4names.KEY_INGRESS_PORT, port),), p4names.SET_PORT_KIND, (("kind", int(k)),))
        )

    def source(port: int, prefix: str) -> None:
        """Packets from client port ``port`` must come from ``prefix`` (anti-spoofing, DcValidation)."""
        net = ipaddress.IPv4Network(prefix)
        p.entries.append(
            Entry(
                p4names.CLIENT_SOURCE,
                (
                    (p4names.KEY_INGRESS_PORT, port),
                    (p4names.KEY_IPV4_SRC, Match(int(net.network_address), prefix_len=net.prefixlen)),
                ),
                p4names.SOURCE_OK,
            )
        )

    if sw.role in (Role.STORAGE_LEAF, Role.CLIENT_LEAF):
        hosts = [h for h in cluster.hosts() if h.switch == sw.name]
        host_kind = PortKind.STORAGE if sw.role == Role.STORAGE_LEAF else PortKind.CLIENT
        for h in hosts:
            kind(h.port, host_kind)
            p.entries.append(_route(f"{h.ip}/32", h.mac, h.port))
            # valley-free: from a spine only the rack's hosts are destinations (DcValidation drops the rest)
            p.entries.append(Entry(p4names.RACK_HOSTS, ((p4names.KEY_IPV4_DST, _ip(h.ip)),), p4names.DEST_OK))
            if host_kind == PortKind.CLIENT:
                source(h.port, f"{h.ip}/32")
        uplinks = {port: name for port, name in ports.items() if name.startswith("sp")}
        for port in uplinks:
            kind(port, PortKind.FABRIC)
        spine_port = {cluster.switch(name).switch_id: port for port, name in uplinks.items()}
        p.defaults.append(liveness_config(cluster, live))
        for port, sid in sorted((port, sid) for sid, port in spine_port.items()):
            p.entries.append(
                Entry(
                    p4names.PORT_SPINE,
                    ((p4names.KEY_INGRESS_PORT, port),),
                    p4names.SET_PORT_SPINE,
                    (("spine_id", sid),),
                )
            )
        for sp in spines:
            p.entries.append(_route(f"{cluster.spine_address(sp.switch_id)}/32", sp.mac, spine_port[sp.switch_id]))
        # everything else goes up through the live spines, spread by the key's h0 bucket (ECMP)
        p.entries.append(Entry(p4names.IPV4_LPM, ((p4names.KEY_IPV4_DST, _prefix(FABRIC_NET)),), p4names.TRANSIT))
        up = live_spines(cluster, live)
        for slot in range(p4names.TRANSIT_SLOTS):
            sp, alt = slot_spines(up, slot)
            p.entries.append(
                Entry(
                    p4names.TRANSIT_SPINE,
                    ((p4names.KEY_TRANSIT_SLOT, slot),),
                    p4names.SET_TRANSIT,
                    (
                        ("spine_id", sp.switch_id),
                        ("dmac", _mac(sp.mac)),
                        ("port", spine_port[sp.switch_id]),
                        ("alt_spine_id", alt.switch_id if alt else 0),
                        ("alt_dmac", _mac(alt.mac) if alt else 0),
                        ("alt_port", spine_port[alt.switch_id] if alt else 0),
                    ),
                )
            )
        if sw.role == Role.CLIENT_LEAF:
            # replica slots name caches, not paths: only spines in service, none at all when no spine is (a
            # read then goes to the server). A failed spine keeps whatever copies it held when writes stopped
            # invalidating it, and a spine whose data plane comes back answers the reads targeted at it.
            caches = [sp for sp in spines if live is None or sp.switch_id in live]
            for slot in range(p4names.REPLICA_SLOTS if caches else 0):
                sp, alt = slot_spines(caches, slot)
                p.entries.append(
                    Entry(
                        p4names.REPLICA_SPINE,
                        ((p4names.KEY_REPLICA_SLOT, slot),),
                        p4names.SET_REPLICA_SPINES,
                        (("spine_id", sp.switch_id), ("alt_spine_id", alt.switch_id if alt else 0)),
                    )
                )
            p.entries.extend(
                Entry(p4names.REPLICATED_KEYS, ((p4names.KEY_DC_KEY, int.from_bytes(k, "big")),), p4names.REPLICATE)
                for k in sorted(set(replicated))[: p4names.MAX_REPLICATED_KEYS]
            )
            for sp in spines:
                p.entries.append(
                    Entry(
                        p4names.CACHE_ROUTE,
                        ((p4names.KEY_DC_TARGET, sp.switch_id),),
                        p4names.ROUTE_TO_CACHE,
                        (("dmac", _mac(sp.mac)), ("port", spine_port[sp.switch_id])),
                    )
                )
            for r in range(cluster.storage_racks):
                leaf = cluster.storage_leaf(r)
                p.entries.append(
                    Entry(
                        p4names.STORAGE_RACK,
                        ((p4names.KEY_IPV4_DST, _prefix(cluster.rack_prefix(leaf))),),
                        p4names.SET_LEAF_CANDIDATE,
                        (("leaf_id", leaf.switch_id),),
                    )
                )
            p.entries.extend(partition_entries(buckets))
        if sw.role == Role.STORAGE_LEAF and detector_designates(cluster.mechanism, sw.role, 0, sw.switch_id):
            p.entries.append(
                Entry(p4names.HH_RACKS, ((p4names.KEY_IPV4_DST, _prefix(cluster.rack_prefix(sw))),), p4names.DESIGNATE)
            )
    elif sw.role == Role.SPINE:
        p.entries.extend(detector_buckets(cluster, sw, buckets))
        for port, name in ports.items():
            leaf = cluster.switch(name)
            if leaf.role == Role.STORAGE_LEAF:
                kind(port, PortKind.STORAGE)
                p.entries.append(_route(cluster.rack_prefix(leaf), leaf.mac, port))
            else:
                kind(port, PortKind.CLIENT)
                p.entries.append(_route(cluster.rack_prefix(leaf), leaf.mac, port))
                source(port, cluster.rack_prefix(leaf))
    if sw.role in (Role.SPINE, Role.STORAGE_LEAF):
        # the reads a cache switch answers: at most switch_rate per second (cir = pir: over it is red)
        rate, burst = round(cluster.switch_rate), cluster.switch_burst
        p.meters[(p4names.CACHE_METER, 0)] = (rate, burst, rate, burst) if rate > 0 else None
        p.defaults.append(
            Entry(
                p4names.DETECTOR_CONFIG,
                (),
                p4names.SET_DETECTOR,
                (("threshold", cluster.hh_threshold), ("window_shift", cluster.hh_window_shift)),
            )
        )
    return p


def live_spines(cluster: Cluster, live: set[int] | None = None) -> list[Switch]:
    """The spines transit traffic may cross, in id order: those in service, or all of them if none is (a fabric with
    no spine cannot route anyway; a spine answers only reads targeted at it, so transit never reads a cache)."""
    spines = [cluster.spine(i) for i in range(cluster.spines)]
    return [sp for sp in spines if live is None or sp.switch_id in live] or spines


def liveness_config(cluster: Cluster, live: set[int] | None = None) -> Entry:
    """A leaf's liveness_config default: the cluster's liveness times and the fence of the spines out of
    service (the controller's failover writes this entry alone, ahead of the rest of the plan)."""
    return Entry(
        p4names.LIVENESS_CONFIG,
        (),
        p4names.SET_LIVENESS,
        (
            ("dead_after", round(cluster.dead_after_ms * 1000)),
            ("dead_after_max", round(cluster.dead_after_max_ms * 1000)),
            ("hold", round(cluster.liveness_hold_ms * 1000)),
            ("peak_decay_shift", p4names.PEAK_DECAY_SHIFT),
            ("probe_skip", round(cluster.probe_skip_ms * 1000)),
            ("fenced", fence_mask(cluster, live)),
        ),
    )


def fence_mask(cluster: Cluster, live: set[int] | None = None) -> int:
    """liveness_config's ``fenced``: bit s set for each spine s out of service, which a leaf then leaves out
    of every choice (liveness.p4).  One default-action write per leaf takes a failed spine out of every read
    path at once, ahead of the partition's many entries (controller.failover); it is cleared only in the
    plan that routes reads to the spine again, after its flush."""
    spines = cluster.switch_ids(Role.SPINE)
    return sum(1 << s for s in spines if live is not None and s not in live)


def slot_spines(up: list[Switch], slot: int) -> tuple[Switch, Switch | None]:
    """The spine of a transit or replica slot (the live spines dealt round-robin) and the next one, which a
    leaf uses instead when it finds the first dead (None: no other live spine)."""
    return up[slot % len(up)], (up[(slot + 1) % len(up)] if len(up) > 1 else None)


def detector_buckets(cluster: Cluster, sw: Switch, buckets: list[int]) -> list[Entry]:
    """hh_buckets entries of a spine: the h0 buckets whose hot keys it should cache."""
    mine = [b for b, sid in enumerate(buckets) if detector_designates(cluster.mechanism, sw.role, sid, sw.switch_id)]
    return [Entry(p4names.HH_BUCKETS, ((p4names.KEY_BUCKET, b),), p4names.DESIGNATE) for b in mine]


def partition_entries(buckets: list[int]) -> list[Entry]:
    """spine_partition entries for a client-rack leaf (buckets without a spine are left out)."""
    return [
        Entry(p4names.SPINE_PARTITION, ((p4names.KEY_BUCKET, b),), p4names.SET_SPINE_CANDIDATE, (("spine_id", sid),))
        for b, sid in enumerate(buckets)
        if sid
    ]
