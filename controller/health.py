"""What the controller last saw of each switch, and how it says a call failed."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from distcache.rpc.protos import agent_pb2


class ControllerError(RuntimeError):
    """An operator request the controller cannot carry out; the message says what to do instead."""


def failure_reason(e: BaseException) -> str:
    """One line saying why a call to a switch, agent or shim failed."""
    if isinstance(e, grpc.RpcError):
        code = e.code()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return "no answer in time (DEADLINE_EXCEEDED)"
        return f"{code.name}: {e.details()}"
    return str(e)


@dataclass
class Health:
    """What the monitor last saw of one switch (written by its probe thread and the health poll, read by
    the Status API without any lock: each field is replaced whole)."""

    alive: bool = True
    misses: int = 0
    first_miss: float = 0.0
    detected: tuple[float, float] | None = None  # probes declared it dead: (stopped answering, decided)
    dp_detected: tuple[float, float] | None = None  # its data plane stopped answering the leaves' probes
    agent_alive: bool | None = None  # its agent answered its last Status (None: not asked yet)
    agent_error: str = ""  # why it did not
    agent: agent_pb2.AgentStatus | None = None
    stats: dict[int, tuple[int, int]] = field(default_factory=dict)  # dc_stats as last read
    drops: dict[int, tuple[int, int]] = field(default_factory=dict)  # dc_drops as last read
    samples: list[tuple[float, int]] = field(default_factory=list)  # (time, reads) for the load
    recover_tried: float = 0.0  # last automatic recovery attempt (monotonic)
    restart_checked: float = 0.0  # last look whether a switch failed for its data plane restarted (monotonic)
