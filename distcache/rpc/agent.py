"""The client of a switch agent's API (distcache/proto/agent.proto), used by the controller and dcnet."""

from __future__ import annotations

from collections.abc import Iterable

import grpc

from distcache.cluster import Cluster
from distcache.rpc.channel import channel_ready
from distcache.rpc.protos import FAST_RECONNECT, agent_grpc, agent_pb2


class AgentClient:
    """The controller's side of the agent API."""

    def __init__(self, address: str, timeout: float = 30.0) -> None:
        self.address, self.timeout = address, timeout
        self.channel = grpc.insecure_channel(address, options=FAST_RECONNECT)
        self.stub = agent_grpc.AgentStub(self.channel)

    def wait_ready(self, timeout: float = 15.0) -> None:
        if not channel_ready(self.channel, timeout):
            raise ConnectionError(f"no agent answers at {self.address}; is it running (python -m agent --help)?")

    def configure(
        self, cluster: Cluster, buckets: list[int], live: set[int] | None = None, replicated: Iterable[bytes] = ()
    ) -> agent_pb2.AgentStatus:
        return self.stub.Configure(
            agent_pb2.ConfigureRequest(
                cluster_json=cluster.to_json(),
                buckets=buckets,
                live_spines=sorted(live or ()),
                replicated=sorted(replicated),
            ),
            timeout=self.timeout,
        )

    def flush(self) -> agent_pb2.AgentStatus:
        return self.stub.Flush(agent_pb2.StatusRequest(), timeout=self.timeout)

    def status(self, with_keys: bool = False) -> agent_pb2.AgentStatus:
        return self.stub.Status(agent_pb2.StatusRequest(with_keys=with_keys), timeout=self.timeout)

    def cache(self, key: bytes, name: bytes = b"") -> agent_pb2.CachedKey:
        """Insert digest ``key`` (``name``: the key itself, if known: the shim learns it)."""
        return self.stub.Cache(agent_pb2.KeyRequest(key=key, name=name), timeout=self.timeout)

    def evict(self, key: bytes) -> bool:
        return self.stub.Evict(agent_pb2.KeyRequest(key=key), timeout=self.timeout).evicted

    def close(self) -> None:
        self.channel.close()
