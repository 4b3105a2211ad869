"""What the demo and the tests inspect of a running deployment: the controller's API, the agents, and
read-only P4Runtime sessions with the switches."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from distcache.cluster import Cluster, Mechanism, is_cache_switch
from distcache.hashing import key_bytes
from distcache.placement import cache_switches
from distcache.rpc.agent import AgentClient
from distcache.rpc.controller import ControllerClient
from distcache.rpc.protos import agent_pb2
from p4rt.client import SwitchConnection
from p4rt.p4info import load_p4info


class Operator:
    """The controller's API plus direct reads of agents and switches: what the demo and tests inspect.

    Reads only (counters, tables, agent status) and manual cache insertions; every change of
    partitions or switch state goes through the controller.
    """

    def __init__(self, cluster: Cluster, p4info_path: Path, ctl: ControllerClient) -> None:
        self.cluster, self.ctl = cluster, ctl
        self.p4info = load_p4info(p4info_path)
        self.agents = {
            sw.name: AgentClient(cluster.agent_address(sw)) for sw in cluster.switches() if is_cache_switch(sw)
        }
        self.conns = _Readers(self)

    @property
    def buckets(self) -> list[int]:
        return list(self.ctl.partitions().owner)

    def agent_status(self, with_keys: bool = False) -> dict[str, agent_pb2.AgentStatus]:
        return {name: a.status(with_keys) for name, a in self.agents.items()}

    def caches_of(self, key: str | bytes) -> list[str]:
        """The cache switches that should hold ``key`` now (the controller's mechanism and partition)."""
        now = replace(self.cluster, mechanism=Mechanism[self.ctl.status().mechanism.upper()])  # the operator's
        return [sw.name for sw in cache_switches(now, self.buckets, self.cluster.digest(key))]

    def cache(self, key: str | bytes) -> dict[str, agent_pb2.CachedKey]:
        """Insert ``key`` by hand into every cache switch that should hold it."""
        name = key_bytes(key)
        digest = self.cluster.digest(name)
        return {sw: self.agents[sw].cache(digest, name) for sw in self.caches_of(key)}

    def close(self) -> None:
        for a in self.agents.values():
            a.close()
        for c in self.conns.values():
            c.close()
        self.ctl.close()


class _Readers(dict):
    """Read-only P4Runtime sessions by switch name, opened on first use."""

    def __init__(self, op: Operator) -> None:
        super().__init__()
        self.op = op

    def __missing__(self, name: str) -> SwitchConnection:
        sw = self.op.cluster.switch(name)
        conn = SwitchConnection(f"127.0.0.1:{sw.grpc_port}", sw.device_id, name=name)
        conn.use_p4info(self.op.p4info)
        self[name] = conn
        return conn
