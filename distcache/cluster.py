"""The cluster description: one parameterized leaf-spine deployment.

Everything that places things (the Mininet topology, the controller's routes
and partitions, the shim's coherence paths, the client's server choice and the
simulator) derives from a :class:`Cluster`, so they cannot disagree.  It is a
plain dataclass that round-trips through JSON (``cluster.json`` in a run
folder).

Numbering and addressing plan (all derived, never configured twice):

* switch ids (``bit<8>`` on the wire): spines ``1..63``, storage-rack leaves
  ``64 + r``, client-rack leaves ``128 + c``;
* spine *i* owns the address ``10.255.0.i``; coherence packets are sent to it
  so that they pass the storage leaf on the way up and come back;
* storage server *s* of rack *r*: ``10.1.r.(s+1)``; client *n* of client rack
  *c*: ``10.2.c.(n+1)``; every rack's gateway is ``.254``;
* leaf ports ``1..k`` face the rack's hosts, the next ports face spines in
  order; spine ports ``1..R`` face storage leaves, then client leaves.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from enum import IntEnum
from pathlib import Path

from distcache.hashing import h1


class Role(IntEnum):
    """Switch roles; the value is what ``set_config`` writes into the pipeline."""

    NONE = 0
    SPINE = 1
    STORAGE_LEAF = 2
    CLIENT_LEAF = 3


class PortKind(IntEnum):
    """What a switch port faces; coherence ops are accepted only from STORAGE."""

    FABRIC = 0
    CLIENT = 1
    STORAGE = 2


class Mechanism(IntEnum):
    """Caching mechanisms compared in the paper (§6); chosen per cluster."""

    NOCACHE = 0
    DISTCACHE = 1
    REPLICATION = 2
    PARTITION = 3
    HYBRID = 4


SPINE_BASE, STORAGE_LEAF_BASE, CLIENT_LEAF_BASE = 0, 64, 128
MAX_SPINES = 63


def _mac(*octets: int) -> str:
    return ":".join(f"{o:02x}" for o in (0x02, *octets))


@dataclass(frozen=True)
class Host:
    name: str
    ip: str
    mac: str
    gateway: str
    gateway_mac: str
    switch: str  # name of the leaf it hangs off
    port: int  # leaf port number
    rack: int
    index: int  # index inside the rack


@dataclass(frozen=True)
class Switch:
    name: str
    switch_id: int
    role: Role
    mac: str
    grpc_port: int
    device_id: int


@dataclass(frozen=True)
class Link:
    a: str
    a_port: int
    b: str
    b_port: int


@dataclass
class Cluster:
    spines: int = 1
    storage_racks: int = 1
    servers_per_rack: int = 1
    client_racks: int = 1
    clients_per_rack: int = 1
    cache_slots: int = 4096
    hh_threshold: int = 16  # reads of an uncached key in one detector window before it is reported
    hh_window_shift: int = 20  # detector windows last 2^shift microseconds (20: about 1 s)
    mechanism: Mechanism = Mechanism.DISTCACHE
    grpc_base_port: int = 50051
    agent_base_port: int = 51051  # switch agents' control API: 127.0.0.1:<agent_base_port + switch id>
    controller_address: str = "127.0.0.1:50050"  # the controller's operator API (loopback or management net)
    insert_rate: float = 50.0  # insertions per second an agent may make from hot-key reports
    insert_burst: int = 20
    server_rate: float = 0.0  # requests per second each storage server serves (its shim's token bucket); 0: no limit
    server_burst: int = 32
    server_queue: float = 0.1  # seconds a request may wait for its server's rate before it is dropped
    switch_rate: float = 0.0  # reads per second each cache switch answers from its cache (P4 meter); 0: no limit
    switch_burst: int = 64
    hybrid_rate: float = 0.0  # Hybrid replicates keys read more often than this per second; 0: switch_rate / 2
    link_mbps: float = 0.0  # bandwidth of every emulated link in Mbit/s (Mininet TCLink); 0: no limit
    redis_appendfsync: str = "always"  # storage durability: redis-server's append-only file fsync policy
    description: str = ""  # free text: what this topology is for

    def __post_init__(self) -> None:
        self.mechanism = Mechanism(self.mechanism)
        for name in ("spines", "storage_racks", "servers_per_rack", "client_racks", "clients_per_rack"):
            if getattr(self, name) < 1:
                raise ValueError(f"cluster needs at least one of {name}")
        if self.spines > MAX_SPINES or self.storage_racks > 64 or self.client_racks > 127:
            raise ValueError("cluster too large for 8-bit switch ids (≤63 spines, ≤64 storage racks)")
        if self.servers_per_rack > 250 or self.clients_per_rack > 250:
            raise ValueError("at most 250 hosts per rack (one /24 each)")
        if self.redis_appendfsync not in ("always", "everysec", "no"):
            raise ValueError(f"redis_appendfsync must be always, everysec or no, not {self.redis_appendfsync!r}")
        if self.server_rate < 0 or self.link_mbps < 0 or self.server_burst < 1:
            raise ValueError("server_rate and link_mbps must be >= 0 (0: no limit) and server_burst >= 1")
        if not 0 <= self.server_queue <= 10:
            raise ValueError("server_queue must be 0..10 seconds")
        if self.switch_rate < 0 or self.hybrid_rate < 0 or self.switch_burst < 1:
            raise ValueError("switch_rate and hybrid_rate must be >= 0 (0: no limit / derived) and switch_burst >= 1")

    # -- switches -----------------------------------------------------------------
    def spine(self, i: int) -> Switch:
        sid = SPINE_BASE + i + 1
        return self._switch(f"sp{i}", sid, Role.SPINE)

    def storage_leaf(self, r: int) -> Switch:
        return self._switch(f"sl{r}", STORAGE_LEAF_BASE + r, Role.STORAGE_LEAF)

    def client_leaf(self, c: int) -> Switch:
        return self._switch(f"cl{c}", CLIENT_LEAF_BASE + c, Role.CLIENT_LEAF)

    def _switch(self, name: str, sid: int, role: Role) -> Switch:
        return Switch(name=name, switch_id=sid, role=role, mac=_mac(0xFF, 0, 0, 0, sid),
                      grpc_port=self.grpc_base_port + sid, device_id=sid)

    def switches(self) -> list[Switch]:
        return ([self.spine(i) for i in range(self.spines)]
                + [self.storage_leaf(r) for r in range(self.storage_racks)]
                + [self.client_leaf(c) for c in range(self.client_racks)])

    def switch(self, name: str) -> Switch:
        for sw in self.switches():
            if sw.name == name:
                return sw
        raise KeyError(f"no switch named {name!r} in this cluster")

    def switch_by_id(self, sid: int) -> Switch:
        for sw in self.switches():
            if sw.switch_id == sid:
                return sw
        raise KeyError(f"no switch with id {sid} in this cluster")

    def agent_address(self, sw: Switch) -> str:
        """Where the agent of cache switch ``sw`` serves its control API (loopback only)."""
        return f"127.0.0.1:{self.agent_base_port + sw.switch_id}"

    @staticmethod
    def spine_address(spine_id: int) -> str:
        return f"10.255.0.{spine_id}"

    # -- hosts --------------------------------------------------------------------
    def server(self, r: int, s: int) -> Host:
        leaf = self.storage_leaf(r)
        return Host(name=f"r{r}s{s}", ip=f"10.1.{r}.{s + 1}", mac=_mac(0x01, r, s, 0, 1),
                    gateway=f"10.1.{r}.254", gateway_mac=leaf.mac, switch=leaf.name,
                    port=s + 1, rack=r, index=s)

    def client(self, c: int, n: int) -> Host:
        leaf = self.client_leaf(c)
        return Host(name=f"c{c}h{n}", ip=f"10.2.{c}.{n + 1}", mac=_mac(0x02, c, n, 0, 1),
                    gateway=f"10.2.{c}.254", gateway_mac=leaf.mac, switch=leaf.name,
                    port=n + 1, rack=c, index=n)

    def servers(self) -> list[Host]:
        return [self.server(r, s) for r in range(self.storage_racks) for s in range(self.servers_per_rack)]

    def clients(self) -> list[Host]:
        return [self.client(c, n) for c in range(self.client_racks) for n in range(self.clients_per_rack)]

    def hosts(self) -> list[Host]:
        return self.servers() + self.clients()

    def server_for_key(self, wkey: bytes) -> Host:
        """The storage server that owns ``wkey`` (hash h1)."""
        g = h1(wkey, self.storage_racks * self.servers_per_rack)
        return self.server(g // self.servers_per_rack, g % self.servers_per_rack)

    # -- links --------------------------------------------------------------------
    def links(self) -> list[Link]:
        out = [Link(h.name, 0, h.switch, h.port) for h in self.hosts()]
        for i in range(self.spines):
            sp = self.spine(i)
            for r in range(self.storage_racks):
                out.append(Link(self.storage_leaf(r).name, self.servers_per_rack + 1 + i, sp.name, 1 + r))
            for c in range(self.client_racks):
                out.append(Link(self.client_leaf(c).name, self.clients_per_rack + 1 + i, sp.name,
                                1 + self.storage_racks + c))
        return out

    def ports(self, switch: str) -> dict[int, str]:
        """Port number -> name of the node on the other side, for one switch."""
        res: dict[int, str] = {}
        for ln in self.links():
            if ln.a == switch:
                res[ln.a_port] = ln.b
            if ln.b == switch:
                res[ln.b_port] = ln.a
        return dict(sorted(res.items()))

    # -- persistence --------------------------------------------------------------
    def to_json(self) -> str:
        d = asdict(self)
        d["mechanism"] = self.mechanism.name.lower()
        return json.dumps(d, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Cluster:
        d = json.loads(text)
        if not isinstance(d, dict):
            raise ValueError("a cluster description is a JSON object")
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown cluster field(s) {unknown}; known: {sorted(f.name for f in fields(cls))}")
        if isinstance(d.get("mechanism"), str):
            try:
                d["mechanism"] = Mechanism[d["mechanism"].upper()]
            except KeyError:
                raise ValueError(f"unknown mechanism {d['mechanism']!r}; "
                                 f"use one of {[m.name.lower() for m in Mechanism]}") from None
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path) -> Cluster:
        try:
            return cls.from_json(Path(path).read_text())
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}: {e}") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")
