"""A control plane on loopback for tests: real softswitches, agents with their gRPC service, and the closers.

The P4Runtime tests that need a controller over several switches (the operator CLI, the metrics exporter)
start the same pieces the same way; each piece's stop goes into ``closers`` (stopped in reverse order).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc

from agent.agent import SwitchAgent
from agent.service import AgentService
from distcache.cluster import Cluster, Switch
from distcache.rpc.protos import agent_grpc
from distcache.rpc.shim import shim_links
from softswitch.dataplane import DistCachePipeline
from softswitch.switch import SoftSwitch


def start_switches(cluster: Cluster, closers: list[Callable[[], object]]) -> dict[str, SoftSwitch]:
    """One softswitch per switch of ``cluster``, serving P4Runtime on its loopback port."""
    switches = {}
    for sw in cluster.switches():
        s = SoftSwitch(DistCachePipeline(), device_id=sw.device_id, grpc_addr=f"127.0.0.1:{sw.grpc_port}")
        s.start()
        closers.append(s.close)
        switches[sw.name] = s
    return switches


def start_agent(
    cluster: Cluster,
    sw: Switch,
    p4info: Path,
    shim_dir: Path,
    closers: list[Callable[[], object]],
    state_file: Path | None = None,
) -> SwitchAgent:
    """The agent of cache switch ``sw`` with its gRPC service on the cluster's agent address."""
    agent = SwitchAgent(cluster, sw, p4info, b"", shim_links(cluster, shim_dir), state_file=state_file)
    agent.start()
    closers.append(agent.stop)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    agent_grpc.add_AgentServicer_to_server(AgentService(agent), server)
    assert server.add_insecure_port(cluster.agent_address(sw))
    server.start()
    closers.append(lambda: server.stop(0))
    return agent
