"""Data-plane state of one softswitch: tables, registers, counters, meters.

The pipeline (softswitch/dataplane/) reads and writes this state while it
processes a packet; the P4Runtime server (softswitch/server/) writes tables
and reads counters and meters, through the interface of softswitch/target.py,
which :class:`SwitchState` implements.  Both hold :attr:`SwitchState.lock` while
they do, so a packet sees every control-plane update either entirely or not at
all (the atomicity P4Runtime asks of a target).  The objects themselves do not
lock: taking one lock per packet is cheaper than one per access.

One module per kind of object: match-action tables (``tables.py``), registers and
counters (``arrays.py``), meters (``meters.py``).  Names are the fully qualified
P4Info names (``DcIngress.ipv4_lpm``); numeric P4Runtime ids are the server's
business, because a client may push a P4Info whose ids differ from softswitch's own.
"""

from __future__ import annotations

import threading
from typing import Protocol

from softswitch.program import Counter, Meter, Program, Register
from softswitch.state.arrays import CounterArray, RegisterArray
from softswitch.state.meters import GREEN, RED, YELLOW, MeterArray
from softswitch.state.tables import FieldSpec, TableEntry, TableState
from softswitch.target import (
    CanonicalMatch,
    EntryExistsError,
    EntryNotFoundError,
    MeterConfig,
    TableError,
    TableFullError,
)


class SwitchState:
    """All data-plane state of one switch for one :class:`Program`."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.tables: dict[str, TableState] = {t.name: TableState(t) for t in program.tables}
        self.registers: dict[str, RegisterArray] = {
            r.name: RegisterArray(r.name, r.bitwidth, r.size) for r in program.registers
        }
        self.counters: dict[str, CounterArray] = {
            c.name: CounterArray(c.name, c.size, c.unit) for c in program.counters
        }
        self.meters: dict[str, MeterArray] = {m.name: MeterArray(m.name, m.size, m.unit) for m in program.meters}
        self.lock = threading.RLock()
        self.pending_digests: list[tuple[str, tuple[int, ...]]] = []

    def empty(self) -> SwitchState:
        """A new state of the same program with nothing installed (the server's shadow config)."""
        return SwitchState(self.program)

    def emit_digest(self, name: str, values: tuple[int, ...]) -> None:
        """v1model ``digest(receiver, data)``: queue one digest message (struct field values in order).

        The runtime drains :attr:`pending_digests` after each packet and hands the messages to
        the P4Runtime server, which batches them into DigestLists for the primary controller.
        """
        self.pending_digests.append((name, values))

    def reset(self) -> None:
        """Forget everything (a new pipeline config was committed).

        Clears in place, so objects a pipeline looked up once (``state.tables[...]``)
        stay valid.
        """
        with self.lock:
            for t in self.tables.values():
                t.clear()
            for r in self.registers.values():
                r.clear()
            for c in self.counters.values():
                c.clear()
            for m in self.meters.values():
                m.clear()


class Pipeline(Protocol):
    """What the runtime needs of a packet-processing pipeline.

    ``process`` runs with ``state.lock`` held, gets the ingress port, the frame
    and the microseconds since the switch started (BMv2's
    ``ingress_global_timestamp``), and returns the frames to send as
    (egress port, bytes); an empty list drops the packet.  An exception drops
    the packet too: the runtime logs and counts it and goes on.
    """

    program: Program

    def process(self, state: SwitchState, ingress_port: int, packet: bytes, now_us: int) -> list[tuple[int, bytes]]: ...


__all__ = [
    "GREEN",
    "RED",
    "YELLOW",
    "CanonicalMatch",
    "Counter",
    "CounterArray",
    "EntryExistsError",
    "EntryNotFoundError",
    "FieldSpec",
    "Meter",
    "MeterArray",
    "MeterConfig",
    "Pipeline",
    "Register",
    "RegisterArray",
    "SwitchState",
    "TableEntry",
    "TableError",
    "TableFullError",
    "TableState",
]
