"""P4Runtime's byte strings and its one error, shared by the P4Runtime client (p4rt.client) and softswitch's
P4Runtime server: both sides of the wire encode a value the same way and fail with the same exception."""

from __future__ import annotations

import grpc


class P4RuntimeError(RuntimeError):
    """A P4Runtime call, or one item of a batch, failed: ``code`` is the gRPC status code's name
    (``"NOT_FOUND"``), ``status`` the code itself, ``message`` what went wrong."""

    def __init__(self, message: str, code: str = "UNKNOWN") -> None:
        super().__init__(message)
        self.message, self.code = message, code

    @property
    def status(self) -> grpc.StatusCode:
        return grpc.StatusCode[self.code]


def encode(value: int, bitwidth: int | None = None) -> bytes:
    """The canonical (shortest) big-endian byte string of an unsigned int, at least one byte (0 is one zero
    byte); with ``bitwidth``, ValueError unless the value fits in it."""
    if value < 0 or (bitwidth is not None and value >= 1 << bitwidth):
        raise ValueError(f"value {value} does not fit in {bitwidth} bits")
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def decode(data: bytes) -> int:
    """A byte string as the unsigned int it holds (a switch's answer: trusted)."""
    return int.from_bytes(data, "big")


def decode_checked(data: bytes, bitwidth: int, what: str) -> int:
    """A byte string a client sent for a ``bitwidth``-bit field, as an unsigned int: leading zero bytes allowed.

    Empty or too wide -> INVALID_ARGUMENT: the spec's Bytestrings section says OUT_OF_RANGE, but its
    table-entry sections (Match Format, Action Specification) say INVALID_ARGUMENT for a match or parameter
    value that does not conform, and that is what BMv2 answers for a too-wide value.  (BMv2 accepts an empty
    value; the spec rejects it, and so do we.)
    """
    if not data:
        raise P4RuntimeError(f"{what}: empty bytestring", "INVALID_ARGUMENT")
    value = int.from_bytes(data, "big")
    if value >> bitwidth:
        raise P4RuntimeError(f"{what}: value {value:#x} does not fit in {bitwidth} bits", "INVALID_ARGUMENT")
    return value
