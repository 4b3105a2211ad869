"""The gRPC control APIs of DistCache's own services, loaded from their .proto files.

The .proto files in distcache/proto/ are the one definition; the message and
service classes are generated from them when this module is imported
(``grpc.protos_and_services``, from grpcio-tools), so no generated code is
kept in the repository.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grpc

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # protos_and_services resolves the .proto against sys.path
    sys.path.append(str(_ROOT))

agent_pb2, agent_grpc = grpc.protos_and_services("distcache/proto/agent.proto")
controller_pb2, controller_grpc = grpc.protos_and_services("distcache/proto/controller.proto")

__all__ = ["agent_grpc", "agent_pb2", "controller_grpc", "controller_pb2"]
