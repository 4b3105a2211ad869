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

import functools
import ipaddress
import json
import math
import re
from dataclasses import asdict, dataclass, fields
from enum import IntEnum
from pathlib import Path
from typing import ClassVar

from distcache import p4defines, p4names
from distcache.addresses import DATA_NETS, MAX_PORT, ClusterError, service_address
from distcache.addresses import show as _show
from distcache.hashing import h1_memo, key_bytes, secret_of
from distcache.wire import key_digest


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
#: a leaf's switch id is its role's base plus its rack's index (spines count from SPINE_BASE + 1)
ID_BASE = {Role.SPINE: SPINE_BASE + 1, Role.STORAGE_LEAF: STORAGE_LEAF_BASE, Role.CLIENT_LEAF: CLIENT_LEAF_BASE}
#: each rack's /24 lies in its role's /16: storage racks 10.1.r.0/24, client racks 10.2.c.0/24
RACK_NETS = {Role.STORAGE_LEAF: "10.1", Role.CLIENT_LEAF: "10.2"}
SPINE_NET = "10.255.0"  # spine i's coherence address is 10.255.0.i
GATEWAY_HOST = 254  # every rack's gateway (its leaf) is .254 of the rack's /24
FABRIC_NET = "10.0.0.0/8"  # every address of the data network: what a leaf sends up to the spines
MAX_SPINES = p4defines.MAX_SPINE_ID
MAX_STORAGE_RACKS = CLIENT_LEAF_BASE - STORAGE_LEAF_BASE  # storage leaves are ids 64..127
MAX_CLIENT_RACKS = p4names.MAX_SWITCHES - 1 - CLIENT_LEAF_BASE  # client leaves are ids 128..254
MAX_HOSTS_PER_RACK = 250  # hosts are .1 .. .250 of their rack's /24 (.254 is the gateway)
assert tuple(ipaddress.ip_network(f"{n}.0.0/16") for n in (*RACK_NETS.values(), SPINE_NET[:-2])) == DATA_NETS
REDIS_APPENDFSYNC = ("always", "everysec", "no")
# Redis' maxmemory policies: all but noeviction evict, and then each shim invalidates what is evicted
REDIS_POLICIES = ("noeviction", "allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu",
                  "volatile-random", "volatile-ttl")  # fmt: skip


def _check_int(name: str, value: object, lo: int, hi: int | None, why: str) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= lo and (hi is None or value <= hi)
    if not ok:
        bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ClusterError(f"{name}: expected an integer {bound}{why}, got {_show(value)}")


def _check_number(name: str, value: object, lo: float, hi: float | None, why: str) -> None:
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= lo
        and (hi is None or value <= hi)
    )
    if not ok:
        bound = f"{lo:g}..{hi:g}" if hi is not None else f">= {lo:g}"
        raise ClusterError(f"{name}: expected a number {bound}{why}, got {_show(value)}")


def _mininet_max_mbps() -> float | None:
    """The largest bandwidth Mininet's TCLink sets (it ignores larger ones with a message), where Mininet
    is installed; the emulation is the only user of ``link_mbps``."""
    try:
        from mininet.link import TCIntf
    except ImportError:
        return None
    return float(TCIntf.bwParamMax)


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


def is_cache_switch(sw: Switch) -> bool:
    """Whether ``sw`` caches keys (a spine or a storage leaf; client leaves only route)."""
    return sw.role in (Role.SPINE, Role.STORAGE_LEAF)


@dataclass(frozen=True)
class Link:
    a: str
    a_port: int
    b: str
    b_port: int


@functools.lru_cache(maxsize=32)
def _shape_servers(storage_racks: int, servers_per_rack: int) -> tuple[tuple[Host, ...], tuple[str, ...]]:
    """The storage servers of a shape (a host depends only on its rack and index) and their names, built once."""
    servers = tuple(Cluster(storage_racks=storage_racks, servers_per_rack=servers_per_rack).servers())
    return servers, tuple(h.name for h in servers)


@dataclass
class Cluster:
    spines: int = 1
    storage_racks: int = 1
    servers_per_rack: int = 1
    client_racks: int = 1
    clients_per_rack: int = 1
    cache_slots: int = p4defines.CACHE_SLOTS
    hh_threshold: int = 16  # reads of an uncached key in one detector window before it is reported
    hh_window_shift: int = 20  # detector windows last 2^shift microseconds (20: about 1 s)
    mechanism: Mechanism = Mechanism.DISTCACHE
    grpc_base_port: int = 50051
    agent_base_port: int = 51051  # switch agents' control API: 127.0.0.1:<agent_base_port + switch id>
    controller_address: str = "127.0.0.1:50050"  # the controller's operator API (loopback or management net)
    # the deployment's Prometheus metrics, served by the controller at /metrics (loopback or management net;
    # "" serves none)
    metrics_address: str = "127.0.0.1:9464"
    insert_rate: float = 50.0  # insertions per second an agent may make from hot-key reports
    insert_burst: int = 20
    server_rate: float = 0.0  # requests per second each storage server serves (its shim's token bucket); 0: no limit
    server_burst: int = 32
    server_queue: float = 0.1  # seconds a request may wait for its server's rate before it is dropped
    switch_rate: float = 0.0  # reads per second each cache switch answers from its cache (P4 meter); 0: no limit
    switch_burst: int = 64
    hybrid_rate: float = 0.0  # Hybrid replicates keys read more often than this per second; 0: switch_rate / 2
    link_mbps: float = 0.0  # bandwidth of every emulated link in Mbit/s (Mininet TCLink); 0: no limit
    # leaves' liveness (p4src/include/control/liveness.p4): a probed spine heard from by nothing for dead_after_ms
    # (more where it answers slowly, up to dead_after_max_ms) is left out until heard from liveness_hold_ms
    # after it was found dead; a leaf does not send a probe for a spine it heard from within probe_skip_ms (0: sends
    # every probe)
    dead_after_ms: float = p4names.DEAD_AFTER_US / 1000
    dead_after_max_ms: float = p4names.DEAD_AFTER_MAX_US / 1000
    liveness_hold_ms: float = p4names.HOLD_US / 1000
    probe_skip_ms: float = p4names.PROBE_SKIP_US / 1000
    redis_appendfsync: str = "always"  # storage durability: redis-server's append-only file fsync policy
    # a storage Redis's memory: maxmemory ("": no limit; e.g. "256mb") and what it does past it (noeviction: refuse
    # writes; an evicting policy: each shim invalidates the copies of what Redis evicts, docs/protocol.md)
    redis_maxmemory: str = ""
    redis_maxmemory_policy: str = "noeviction"
    description: str = ""  # free text: what this topology is for
    # the deployment's key secret, hex (16-64 bytes): what keys' digests are keyed by (wire.key_digest), so nobody
    # without it can make two keys share a cache entry.  A deployment writes a fresh random one into its run's
    # cluster.json (new_key_secret); "" is the public DEV_KEY_SECRET, for tests and a topology file used by hand
    key_secret: str = ""

    # integer fields: (low, high, why); the limits come from where they are defined (switch id plan
    # above, p4src/include/size.p4 and the P4 field widths as mirrored in distcache/p4names.py)
    _INTS: ClassVar[dict[str, tuple[int, int | None, str]]] = {
        "spines": (1, MAX_SPINES, " (spines are switch ids 1..63)"),
        "storage_racks": (1, MAX_STORAGE_RACKS, " (storage leaves are switch ids 64..127)"),
        "servers_per_rack": (1, MAX_HOSTS_PER_RACK, " (hosts .1-.250 of the rack's /24)"),
        "client_racks": (1, MAX_CLIENT_RACKS, " (client leaves are switch ids 128..254)"),
        "clients_per_rack": (1, MAX_HOSTS_PER_RACK, " (hosts .1-.250 of the rack's /24)"),
        "cache_slots": (1, p4names.CACHE_SLOTS, " (the cache table holds CACHE_SLOTS entries, p4src size.p4)"),
        "hh_threshold": (
            1,
            (1 << p4names.HH_THRESHOLD_BITS) - 1,
            f" (the detector's threshold is a {p4names.HH_THRESHOLD_BITS}-bit field)",
        ),
        "hh_window_shift": (
            0,
            min(p4names.TIMESTAMP_BITS, 1 << p4names.HH_WINDOW_SHIFT_BITS) - 1,
            f" (windows of 2^shift us cut from the {p4names.TIMESTAMP_BITS}-bit timestamp)",
        ),
        "grpc_base_port": (0, MAX_PORT, " (switch P4Runtime ports are grpc_base_port + switch id)"),
        "agent_base_port": (0, MAX_PORT, " (agent ports are agent_base_port + switch id)"),
        "insert_burst": (1, None, ""),
        "server_burst": (1, None, ""),
        "switch_burst": (1, None, ""),
    }
    # number fields: (low, high, why)
    _NUMBERS: ClassVar[dict[str, tuple[float, float | None, str]]] = {
        "server_rate": (0, None, " (requests/s; 0: no limit)"),
        "server_queue": (0, 10, " (seconds)"),
        "switch_rate": (0, None, " (reads/s; 0: no limit)"),
        "hybrid_rate": (0, None, " (reads/s; 0: half of switch_rate)"),
        "link_mbps": (0, None, " (Mbit/s; 0: no limit)"),
        "dead_after_ms": (1, 60_000, " (ms; a leaf's 32-bit microsecond field, kept under a minute)"),
        "dead_after_max_ms": (1, 60_000, " (ms; at least dead_after_ms)"),
        "liveness_hold_ms": (0, 60_000, " (ms)"),
        "probe_skip_ms": (0, 60_000, " (ms; 0: every probe is sent)"),
    }

    def __post_init__(self) -> None:
        """Refuse what no part could run with, naming the field and what it must be (ClusterError).

        Types are checked too (JSON ``true`` is not a number here, ``2.5`` not a count), so a
        description that loads is one every part can use as it is.
        """
        for name, (lo, hi, why) in self._INTS.items():
            _check_int(name, getattr(self, name), lo, hi, why)
        for name, (low, high, why) in self._NUMBERS.items():
            _check_number(name, getattr(self, name), low, high, why)
        if self.dead_after_max_ms < self.dead_after_ms:
            raise ClusterError(
                f"dead_after_max_ms: expected at least dead_after_ms ({self.dead_after_ms:g}; "
                f"the leaves' threshold grows from one to the other), "
                f"got {_show(self.dead_after_max_ms)}"
            )
        ok_rate = (
            isinstance(self.insert_rate, (int, float))
            and not isinstance(self.insert_rate, bool)
            and math.isfinite(self.insert_rate)
            and self.insert_rate > 0
        )
        if not ok_rate:
            raise ClusterError(
                f"insert_rate: expected a number > 0 (insertions/s an agent may make), got {_show(self.insert_rate)}"
            )
        if float(self.switch_rate) != int(self.switch_rate):
            raise ClusterError(
                f"switch_rate: expected a whole number of reads/s (the P4 meter's rate is an "
                f"integer), got {_show(self.switch_rate)}"
            )
        mbps = _mininet_max_mbps() if self.link_mbps else None
        if mbps is not None and self.link_mbps > mbps:
            raise ClusterError(
                f"link_mbps: expected at most {mbps:g} (Mininet's TCLink ignores larger limits), "
                f"got {_show(self.link_mbps)}"
            )
        if isinstance(self.mechanism, bool) or not isinstance(self.mechanism, int):
            raise ClusterError(
                f"mechanism: expected one of {[m.name.lower() for m in Mechanism]}, got {_show(self.mechanism)}"
            )
        try:
            self.mechanism = Mechanism(self.mechanism)
        except ValueError:
            raise ClusterError(
                f"mechanism: unknown mechanism {_show(self.mechanism)}; expected one of "
                f"{[m.name.lower() for m in Mechanism]}"
            ) from None
        if self.redis_appendfsync not in REDIS_APPENDFSYNC:
            raise ClusterError(
                f"redis_appendfsync: expected one of {list(REDIS_APPENDFSYNC)}, got {_show(self.redis_appendfsync)}"
            )
        if self.redis_maxmemory_policy not in REDIS_POLICIES:
            raise ClusterError(
                f"redis_maxmemory_policy: expected one of {list(REDIS_POLICIES)}, "
                f"got {_show(self.redis_maxmemory_policy)}"
            )
        if not isinstance(self.redis_maxmemory, str) or not re.fullmatch(r"(\d+(kb|mb|gb)?)?", self.redis_maxmemory):
            raise ClusterError(
                f'redis_maxmemory: expected "" (no limit) or a size such as "256mb", got {_show(self.redis_maxmemory)}'
            )
        if not isinstance(self.description, str):
            raise ClusterError(f"description: expected a string, got {_show(self.description)}")
        if not isinstance(self.key_secret, str) or secret_of(self.key_secret) is None:
            raise ClusterError(
                f"key_secret: expected 32-128 hex digits (16-64 bytes; a deployment writes one, "
                f'new_key_secret()), or "" for the public development secret, got {_show(self.key_secret)}'
            )
        self.listening_ports()

    def listening_ports(self) -> dict[int, str]:
        """Every loopback port this cluster's services listen on, with what listens there: the controller,
        its metrics, switches' P4Runtime servers and cache switches' agents.  Each gets its own port in
        1..65535 (ClusterError if not); a deployment reserves them (harness.ports)."""
        _, controller_port = service_address(self.controller_address, "controller_address")
        used = {controller_port: "the controller (controller_address)"}
        if not isinstance(self.metrics_address, str):
            raise ClusterError(
                f'metrics_address: expected "HOST:PORT" or "" (no metrics), got {_show(self.metrics_address)}'
            )
        if self.metrics_address:
            _, metrics_port = service_address(self.metrics_address, "metrics_address")
            if metrics_port == controller_port:
                raise ClusterError(
                    f"metrics_address: port {metrics_port} is also the controller's (controller_address); "
                    "give the metrics another port"
                )
            used[metrics_port] = "the metrics exporter (metrics_address)"
        for sw in self.switches():
            listeners = [("grpc_base_port", self.grpc_base_port, "P4Runtime server")]
            if sw.role in (Role.SPINE, Role.STORAGE_LEAF):
                listeners.append(("agent_base_port", self.agent_base_port, "agent"))
            for field_name, base, what in listeners:
                port = base + sw.switch_id
                if port > MAX_PORT:
                    raise ClusterError(
                        f"{field_name}: {base} + switch id {sw.switch_id} ({sw.name}) is port {port}, "
                        f"over {MAX_PORT}; use a smaller {field_name}"
                    )
                if port in used:
                    raise ClusterError(
                        f"{field_name}: port {port} of {sw.name}'s {what} is also used by {used[port]}; "
                        "move grpc_base_port, agent_base_port, controller_address or metrics_address apart"
                    )
                used[port] = f"{sw.name}'s {what}"
        return used

    def check_deployable(self) -> None:
        """What a running deployment needs beyond a valid description: every switch's ports fit its
        ``port_kind`` table (MAX_PORTS entries, p4src size.p4).  The simulator's paper-scale clusters
        need not fit, so this is checked where switches are programmed, not in every Cluster."""
        for sw in self.switches():
            ports = self.ports(sw.name)
            if len(ports) > p4names.MAX_PORTS:
                raise ClusterError(
                    f"{sw.name} would have {len(ports)} ports, over the {p4names.MAX_PORTS} its "
                    "port_kind table holds (leaf: hosts per rack + spines; spine: racks)"
                )

    # -- switches -----------------------------------------------------------------
    def spine(self, i: int) -> Switch:
        return self._switch(f"sp{i}", ID_BASE[Role.SPINE] + i, Role.SPINE)

    def storage_leaf(self, r: int) -> Switch:
        return self._switch(f"sl{r}", ID_BASE[Role.STORAGE_LEAF] + r, Role.STORAGE_LEAF)

    def client_leaf(self, c: int) -> Switch:
        return self._switch(f"cl{c}", ID_BASE[Role.CLIENT_LEAF] + c, Role.CLIENT_LEAF)

    def switch_ids(self, role: Role) -> list[int]:
        """The ids of every switch of ``role``, in order (spines: the partition's candidates)."""
        return [sw.switch_id for sw in self.switches() if sw.role == role]

    # -- the addressing plan ------------------------------------------------------------------
    @staticmethod
    def rack_index(leaf: Switch) -> int:
        """Which rack of its role a leaf serves (``sl3`` -> 3)."""
        if leaf.role not in RACK_NETS:
            raise ValueError(f"{leaf.name} is not a leaf: only leaves have a rack")
        return leaf.switch_id - ID_BASE[leaf.role]

    @staticmethod
    def host_address(leaf: Switch, host: int) -> str:
        """Address ``host`` (1..250, or GATEWAY_HOST) of ``leaf``'s rack."""
        return f"{RACK_NETS[leaf.role]}.{Cluster.rack_index(leaf)}.{host}"

    @staticmethod
    def rack_prefix(leaf: Switch) -> str:
        """``leaf``'s rack's /24, e.g. ``10.1.3.0/24``."""
        return f"{Cluster.host_address(leaf, 0)}/24"

    @staticmethod
    def rack_gateway(leaf: Switch) -> str:
        """The address a leaf answers for in its rack (its hosts' gateway) and sends its probes from."""
        return Cluster.host_address(leaf, GATEWAY_HOST)

    def _switch(self, name: str, sid: int, role: Role) -> Switch:
        return Switch(
            name=name,
            switch_id=sid,
            role=role,
            mac=_mac(0xFF, 0, 0, 0, sid),
            grpc_port=self.grpc_base_port + sid,
            device_id=sid,
        )

    def switches(self) -> list[Switch]:
        return (
            [self.spine(i) for i in range(self.spines)]
            + [self.storage_leaf(r) for r in range(self.storage_racks)]
            + [self.client_leaf(c) for c in range(self.client_racks)]
        )

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
        """Where coherence packets for spine ``spine_id`` go (they pass the storage leaf up and back)."""
        return f"{SPINE_NET}.{spine_id}"

    # -- hosts --------------------------------------------------------------------
    def server(self, r: int, s: int) -> Host:
        leaf = self.storage_leaf(r)
        return Host(
            name=f"r{r}s{s}",
            ip=self.host_address(leaf, s + 1),
            mac=_mac(0x01, r, s, 0, 1),
            gateway=self.rack_gateway(leaf),
            gateway_mac=leaf.mac,
            switch=leaf.name,
            port=s + 1,
            rack=r,
            index=s,
        )

    def client(self, c: int, n: int) -> Host:
        leaf = self.client_leaf(c)
        return Host(
            name=f"c{c}h{n}",
            ip=self.host_address(leaf, n + 1),
            mac=_mac(0x02, c, n, 0, 1),
            gateway=self.rack_gateway(leaf),
            gateway_mac=leaf.mac,
            switch=leaf.name,
            port=n + 1,
            rack=c,
            index=n,
        )

    def servers(self) -> list[Host]:
        return [self.server(r, s) for r in range(self.storage_racks) for s in range(self.servers_per_rack)]

    def clients(self) -> list[Host]:
        return [self.client(c, n) for c in range(self.client_racks) for n in range(self.clients_per_rack)]

    def hosts(self) -> list[Host]:
        return self.servers() + self.clients()

    def server_names(self) -> tuple[str, ...]:
        """Names of the storage servers in global index order (rack-major): what h1 places keys over."""
        return _shape_servers(self.storage_racks, self.servers_per_rack)[1]

    def digest(self, key: str | bytes) -> bytes:
        """The 16-byte digest switches index ``key`` by (keyed by this deployment's key_secret); InvalidKeyError
        for what is no key (hashing.key_bytes)."""
        return key_digest(key_bytes(key), secret_of(self.key_secret))  # type: ignore[arg-type]

    def server_for_key(self, digest: bytes) -> Host:
        """The storage server that owns the key of ``digest`` (h1: rendezvous over the servers' names)."""
        servers, names = _shape_servers(self.storage_racks, self.servers_per_rack)
        return servers[h1_memo(bytes(digest), names)]

    # -- links --------------------------------------------------------------------
    def links(self) -> list[Link]:
        out = [Link(h.name, 0, h.switch, h.port) for h in self.hosts()]
        for i in range(self.spines):
            sp = self.spine(i)
            for r in range(self.storage_racks):
                out.append(Link(self.storage_leaf(r).name, self.servers_per_rack + 1 + i, sp.name, 1 + r))
            for c in range(self.client_racks):
                out.append(
                    Link(self.client_leaf(c).name, self.clients_per_rack + 1 + i, sp.name, 1 + self.storage_racks + c)
                )
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
        """Parse and validate a description; ClusterError (one line) says what is wrong."""
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ClusterError(f"not JSON: {e}") from None
        if not isinstance(d, dict):
            raise ClusterError(f"a cluster description is a JSON object of fields, not {type(d).__name__}")
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise ClusterError(f"unknown cluster field(s) {unknown}; known: {sorted(f.name for f in fields(cls))}")
        if isinstance(d.get("mechanism"), str):
            try:
                d["mechanism"] = Mechanism[d["mechanism"].upper()]
            except KeyError:
                raise ClusterError(
                    f"mechanism: unknown mechanism {_show(d['mechanism'])}; expected one of "
                    f"{[m.name.lower() for m in Mechanism]}"
                ) from None
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path) -> Cluster:
        """Read a cluster file; ClusterError (one line, naming the file) if it cannot be read or used."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ClusterError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise ClusterError(
                f"{path}: is a directory, not a cluster file (e.g. runs/<run>/cluster.json or topologies/<name>.json)"
            ) from None
        except OSError as e:
            raise ClusterError(f"{path}: cannot read it ({e.strerror or e})") from None
        except UnicodeDecodeError:
            raise ClusterError(f"{path}: not a text (UTF-8) file") from None
        try:
            return cls.from_json(text)
        except ClusterError as e:
            raise ClusterError(f"{path}: {e}") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")
