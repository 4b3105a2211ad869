"""The DistCache controller: pipelines, routes, partitions and cache placement.

Client-rack leaves have no agent: the controller is their P4Runtime primary,
pushes their pipeline and installs the entries :mod:`controller.entries`
derives from the cluster, including the spine partition (``spine_partition``).
Each cache switch (spine, storage-rack leaf) has its own agent process
(:mod:`controller.agent`), its P4Runtime primary: the controller gives it the
cluster and the partition over the agent API and the agent installs its
entries and manages its cache.  The shims get the partition too (they address
coherence packets by it).  The controller is off the query path: once entries
are in, the data plane serves without it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from controller.agent import AgentClient
from controller.entries import plan
from controller.p4rt import SwitchConnection, load_p4info
from controller.partition import spine_buckets
from controller.shim_link import ShimLink
from distcache import p4names as n
from distcache.api import agent_pb2
from distcache.cluster import Cluster, Host, Mechanism, Role, Switch
from distcache.hashing import h0, wire_key

log = logging.getLogger(__name__)


class Controller:
    def __init__(self, cluster: Cluster, p4info_path: str | Path, shim_address: Callable[[Host], str],
                 device_config: bytes = b"", grpc_host: str = "127.0.0.1") -> None:
        self.cluster = cluster
        self.p4info = load_p4info(p4info_path)
        self.device_config = device_config
        self.shim_address = shim_address
        self.grpc_host = grpc_host
        self.conns: dict[str, SwitchConnection] = {}  # client-rack leaves: primary; cache switches: read only
        self.agents: dict[str, AgentClient] = {}
        self.alive_spines = {cluster.spine(i).switch_id for i in range(cluster.spines)}
        self.buckets = self._buckets()

    def _buckets(self) -> list[int]:
        ids = [self.cluster.spine(i).switch_id for i in range(self.cluster.spines)]
        return spine_buckets(ids, self.alive_spines)

    @staticmethod
    def is_cache_switch(sw: Switch) -> bool:
        return sw.role in (Role.SPINE, Role.STORAGE_LEAF)

    # -- bring-up -----------------------------------------------------------------------
    def connect(self, timeout: float = 15.0) -> None:
        for sw in self.cluster.switches():
            conn = SwitchConnection(f"{self.grpc_host}:{sw.grpc_port}", sw.device_id, name=sw.name)
            if self.is_cache_switch(sw):
                conn.wait_ready(timeout)  # its agent is the primary; the controller only reads
                self.agents[sw.name] = AgentClient(self.cluster.agent_address(sw))
                self.agents[sw.name].wait_ready(timeout)
            else:
                conn.connect(timeout)
            self.conns[sw.name] = conn

    def setup(self) -> None:
        """Push client-rack pipelines and entries; configure every agent; tell shims the partition."""
        for sw in self.cluster.switches():
            conn = self.conns[sw.name]
            if self.is_cache_switch(sw):
                st = self.agents[sw.name].configure(self.cluster, self.buckets)
                conn.use_p4info(self.p4info)
                log.info("%s: configured by its agent (%d cached keys)", sw.name, st.occupied)
                continue
            conn.set_pipeline(self.p4info, self.device_config)
            p = plan(self.cluster, sw, self.buckets)
            conn.set_default(n.SWITCH_CONFIG, n.SET_CONFIG, p.config)
            for e in p.defaults:
                conn.set_default(e.table, e.action, e.params_dict)
            for e in p.entries:
                conn.insert(e.table, e.match_dict, e.action, e.params_dict)
            log.info("%s: pipeline pushed, %d entries", sw.name, len(p.entries))
        self.push_partitions_to_shims()

    def push_partitions_to_shims(self) -> None:
        for host in self.cluster.servers():
            ShimLink(self.shim_address(host)).call("partition", buckets=self.buckets)

    def shim_for_key(self, wkey: bytes) -> ShimLink:
        return ShimLink(self.shim_address(self.cluster.server_for_key(wkey)))

    # -- cache placement ----------------------------------------------------------------
    def cache_switches(self, wkey: bytes) -> list[Switch]:
        """Where a hot key is cached under the cluster's mechanism."""
        mech = self.cluster.mechanism
        if mech == Mechanism.NOCACHE:
            return []
        leaf = self.cluster.storage_leaf(self.cluster.server_for_key(wkey).rack)
        spine_id = self.buckets[h0(wkey)]
        spine = [self.cluster.switch_by_id(spine_id)] if spine_id else []
        if mech == Mechanism.DISTCACHE:
            return spine + [leaf]
        if mech == Mechanism.PARTITION:
            return spine
        return [self.cluster.spine(i) for i in range(self.cluster.spines) if self.cluster.spine(i).switch_id
                in self.alive_spines]

    def cache(self, key: str | bytes) -> dict[str, agent_pb2.CachedKey]:
        """Insert ``key`` by hand into every cache switch that should hold it."""
        wkey = wire_key(key)
        return {sw.name: self.agents[sw.name].cache(wkey) for sw in self.cache_switches(wkey)}

    def evict(self, key: str | bytes) -> list[str]:
        wkey = wire_key(key)
        return [name for name, agent in self.agents.items() if agent.evict(wkey)]

    # -- observation --------------------------------------------------------------------
    def counters(self, switch: str) -> dict[str, dict[int, tuple[int, int]]]:
        conn = self.conns[switch]
        return {c: conn.read_counter(c) for c in (n.DC_STATS, n.DC_DROPS)}

    def agent_status(self, with_keys: bool = False) -> dict[str, agent_pb2.AgentStatus]:
        return {name: a.status(with_keys) for name, a in self.agents.items()}

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()
        for a in self.agents.values():
            a.close()
        self.agents.clear()
