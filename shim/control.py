"""The shim's control API (distcache/proto/shim.proto), served with gRPC's asyncio server.

It runs in the shim's event loop, so every call is serialized with the
datagrams the shim serves (a populate takes the key's write lock like a
write does).  Bad arguments get INVALID_ARGUMENT with a message that says
what was expected; the shim keeps serving.
"""

from __future__ import annotations

import logging
import os

import grpc

from distcache.rpc.protos import shim_grpc, shim_pb2
from distcache.rpc.shim import grpc_target
from distcache.wire import DIGEST_LEN
from shim.metrics import exposition
from shim.server import Shim
from shim.view import StaleViewError

log = logging.getLogger(__name__)


def _key(key: bytes) -> bytes:
    if len(key) != DIGEST_LEN:
        raise ValueError(f"'key' must be a {DIGEST_LEN}-byte key digest (Cluster.digest), got {len(key)} bytes")
    return bytes(key)


def _switch(sw: int) -> int:
    if not 0 < sw < 256:
        raise ValueError(f"'switch' must be a switch id (1..255), got {sw}")
    return sw


class ShimService(shim_grpc.ShimServicer):
    def __init__(self, shim: Shim) -> None:
        self.shim = shim

    async def Ping(self, request, context):  # noqa: ANN001, ANN201, N802, ARG002
        return shim_pb2.Empty()

    async def Stats(self, request, context):  # noqa: ANN001, ANN201, N802, ARG002
        return shim_pb2.ShimStats(**self.shim.stats())

    async def Metrics(self, request, context):  # noqa: ANN001, ANN201, N802, ARG002
        return shim_pb2.MetricsText(text=exposition(self.shim))

    async def SetPartition(self, request, context):  # noqa: ANN001, ANN201, N802
        try:
            await self.shim.set_partition_durably(list(request.buckets), list(request.down), request.epoch)
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return shim_pb2.Empty()

    async def AddView(self, request, context):  # noqa: ANN001, ANN201, N802
        try:
            self.shim.add_view(
                {_key(e.key): [_switch(s) for s in e.switches] for e in request.cached},
                [_switch(s) for s in request.complete],
                request.incarnation or None,
            )
        except StaleViewError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return shim_pb2.Empty()

    async def Populate(self, request, context):  # noqa: ANN001, ANN201, N802
        try:
            key, sw = _key(request.key), _switch(request.switch)
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        if not 0 < request.version <= 0xFFFF:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "version: the entry's version, 1..65535 (with cache_epoch, its tag)"
            )
        try:
            state = await self.shim.populate(key, sw, (request.cache_epoch, request.version), bytes(request.name))
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return shim_pb2.PopulateReply(state=state)

    async def Evict(self, request, context):  # noqa: ANN001, ANN201, N802
        try:
            key, sw = _key(request.key), _switch(request.switch)
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return shim_pb2.EvictReply(evicted=await self.shim.evict(key, sw))


async def serve_control(shim: Shim, address: str) -> grpc.aio.Server:
    """Serve the control API on ``unix:/path`` or ``tcp:host:port``; stop it with ``await server.stop(grace)``."""
    target = grpc_target(address)
    if target.startswith("unix:") and os.path.exists(target[5:]):
        os.unlink(target[5:])
    server = grpc.aio.server()
    shim_grpc.add_ShimServicer_to_server(ShimService(shim), server)
    if not server.add_insecure_port(target):
        raise OSError(f"cannot listen on {address}")
    await server.start()
    return server
