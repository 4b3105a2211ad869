"""The agent API (distcache/proto/agent.proto) over a SwitchAgent."""

from __future__ import annotations

import grpc

from agent.agent import SwitchAgent
from agent.slots import CacheFullError
from agent.status import cached_pb
from distcache import p4names
from distcache.cluster import Cluster
from distcache.rpc.protos import abort, agent_grpc, agent_pb2
from distcache.wire import DIGEST_LEN
from p4rt.client import P4RuntimeError


class AgentService(agent_grpc.AgentServicer):
    """The agent API (distcache/proto/agent.proto) over one :class:`SwitchAgent`."""

    def __init__(self, agent: SwitchAgent) -> None:
        self.agent = agent

    def Configure(self, request, context):  # noqa: ANN001, ANN201, N802
        try:
            cluster = Cluster.from_json(request.cluster_json)
            buckets = list(request.buckets)
            if len(buckets) != p4names.SPINE_BUCKETS:
                abort(
                    context,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"buckets: expected {p4names.SPINE_BUCKETS} spine ids, got {len(buckets)}",
                )
            self.agent.configure(cluster, buckets, set(request.live_spines), [bytes(k) for k in request.replicated])
        except (ValueError, TypeError) as e:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"bad cluster: {e}")
        except P4RuntimeError as e:
            abort(context, grpc.StatusCode.UNAVAILABLE, str(e))
        return self.agent.status()

    def Status(self, request, context):  # noqa: ANN001, ANN201, N802, ARG002
        return self.agent.status(request.with_keys)

    def Cache(self, request, context):  # noqa: ANN001, ANN201, N802
        if len(request.key) != DIGEST_LEN:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"key: a {DIGEST_LEN}-byte key digest (Cluster.digest)")
        try:
            e = self.agent.insert(bytes(request.key), name=bytes(request.name))
        except CacheFullError as err:
            abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(err))
        except P4RuntimeError as err:
            abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(err))
        if e is None:
            abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "the cache is full of keys inserted in the last two "
                "hit windows (not evictable yet); evict one (Evict) or try again in a few seconds",
            )
        return cached_pb(bytes(request.key), e)

    def Evict(self, request, context):  # noqa: ANN001, ANN201, N802
        try:
            return agent_pb2.EvictReply(evicted=self.agent.evict(bytes(request.key)))
        except P4RuntimeError as err:
            abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(err))

    def Flush(self, request, context):  # noqa: ANN001, ANN201, N802, ARG002
        try:
            self.agent.flush()
        except P4RuntimeError as err:
            abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(err))
        return self.agent.status()
