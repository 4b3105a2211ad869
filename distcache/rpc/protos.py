"""The gRPC control APIs of DistCache's own services, loaded from their .proto files.

The .proto files in distcache/proto/ are the one definition; the message and
service classes are generated from them when this module is imported
(``grpc.protos_and_services``, from grpcio-tools), so no generated code is
kept in the repository.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import grpc
from google.protobuf.message import Message

_ROOT = Path(__file__).resolve().parents[2]  # the folder holding distcache/
if str(_ROOT) not in sys.path:  # protos_and_services resolves the .proto against sys.path
    sys.path.append(str(_ROOT))

agent_pb2, agent_grpc = grpc.protos_and_services("distcache/proto/agent.proto")
controller_pb2, controller_grpc = grpc.protos_and_services("distcache/proto/controller.proto")
shim_pb2, shim_grpc = grpc.protos_and_services("distcache/proto/shim.proto")

# a restarted peer (switch, shim) must be found within a fraction of a second, not after gRPC's default
# reconnect backoff (up to 2 min); and a new channel must make a new connection: from gRPC's global
# subchannel pool it would share the old channel's subchannel, still backing off after a refused connect,
# and its first call would fail at once without trying (the controller's probe of a switch whose port
# listens again read as refused)
FAST_RECONNECT = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
    ("grpc.use_local_subchannel_pool", 1),
]

# A message of the services above: its classes are built from the .proto at run time, so no static
# type knows their fields.
Reply = Any


def abort(context: grpc.ServicerContext, code: grpc.StatusCode, details: str) -> NoReturn:
    """End the RPC with ``code``: ``context.abort`` raises; this says so to the type checker."""
    context.abort(code, details)
    raise RuntimeError("grpc ServicerContext.abort returned")  # it never does


__all__ = [
    "FAST_RECONNECT",
    "Reply",
    "abort",
    "agent_grpc",
    "agent_pb2",
    "controller_grpc",
    "controller_pb2",
    "message_dict",
    "shim_grpc",
    "shim_pb2",
]


def message_dict(msg: Message) -> dict:
    """Every field of ``msg``, defaults included, under its proto name, as plain JSON-ready values:
    64-bit integers stay numbers (MessageToDict would make them strings) and bytes become hex."""
    d: dict[str, object] = {}
    for f in msg.DESCRIPTOR.fields:
        v = getattr(msg, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            d[f.name] = {k: _scalar(x) for k, x in v.items()}
        elif f.is_repeated:
            d[f.name] = [message_dict(x) if f.message_type is not None else _scalar(x) for x in v]
        elif f.message_type is not None:
            d[f.name] = message_dict(v)
        else:
            d[f.name] = _scalar(v)
    return d


def _scalar(v: object) -> object:
    return v.hex() if isinstance(v, bytes) else v
