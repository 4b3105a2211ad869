"""What the P4Runtime server's parts share: its constants, its error (a gRPC status code and a message)
and the P4Runtime integers (the byte strings are p4rt.codec's, shared with the P4Runtime client)."""

from __future__ import annotations

import logging
from typing import NoReturn

import grpc
from finsy.proto import p4i, p4r

from p4rt.codec import P4RuntimeError

log = logging.getLogger("softswitch.server")

P4RUNTIME_API_VERSION = "1.4.0"
DEFAULT_GRPC_ADDR = "127.0.0.1:9559"
READ_CHUNK = 1000  # entities per ReadResponse message
MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # P4Info + BMv2 JSON can be large
PACKET_IN_BACKLOG = 4096  # per stream; further packet-ins are dropped

SC = grpc.StatusCode
_MATCH_KIND = {
    p4i.MatchField.EXACT: "exact",
    p4i.MatchField.LPM: "lpm",
    p4i.MatchField.TERNARY: "ternary",
    p4i.MatchField.RANGE: "range",
    p4i.MatchField.OPTIONAL: "optional",
}
_SCOPE_TABLE_ONLY = p4i.ActionRef.TABLE_ONLY
_SCOPE_DEFAULT_ONLY = p4i.ActionRef.DEFAULT_ONLY
_UNSUPPORTED_P4INFO = ("action_profiles", "direct_counters", "direct_meters", "value_sets", "externs")
_METER_UNIT = {p4i.MeterSpec.PACKETS: "packets", p4i.MeterSpec.BYTES: "bytes"}
MAX_METER_BURST = 0xFFFFFFFF  # BMv2 (PI) keeps bursts in 32 bits and refuses more with UNIMPLEMENTED; so do we
_CFG = p4r.SetForwardingPipelineConfigRequest
_GET = p4r.GetForwardingPipelineConfigRequest
_UPD = p4r.Update


def _err(code: grpc.StatusCode, message: str) -> NoReturn:
    raise P4RuntimeError(message, code.name)


def _abort(context: grpc.ServicerContext, e: P4RuntimeError) -> NoReturn:
    """End a unary RPC with ``e``'s code and message (grpc's ``abort`` raises; typed here as never returning)."""
    context.abort(e.status, e.message)
    raise AssertionError("unreachable")  # abort raises


def _code_int(code: grpc.StatusCode) -> int:
    return int(code.value[0])


def _u128(v: p4r.Uint128) -> int:
    return (v.high << 64) | v.low


def _to_u128(value: int) -> p4r.Uint128:
    return p4r.Uint128(high=value >> 64, low=value & 0xFFFFFFFFFFFFFFFF)
