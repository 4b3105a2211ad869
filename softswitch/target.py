"""What softswitch's P4Runtime server needs of the data plane it serves, and nothing more.

The server (softswitch/server/) types against these protocols, never against a
data plane's classes, so another data plane could be served by the same server:
one whose state offers tables and their default entries
(:class:`TableTarget`), counters (:class:`CounterTarget`), meters
(:class:`MeterTarget`) and pipeline install (:class:`PipelineTarget`: clear it
for a new config, an empty one for the shadow of VERIFY_AND_SAVE, one lock for
each write).  softswitch.state's :class:`~softswitch.state.SwitchState` is the
one softswitch runs (mypy holds it to :class:`PipelineTarget`).

The other direction is the server's own API, called by the runtime that runs
packets (softswitch/switch.py): packet-ins (``P4RuntimeService.send_packet_in``),
the digest messages a packet emitted (``P4RuntimeService.digests.submit``), and
packet-outs, handed to the runtime's ``P4RuntimeService.packet_out_handler``.

Names are the P4Info's fully qualified names; numeric ids are the server's
business.  Table entries are kept in a canonical form per match field, a pair
of ints whose meaning depends on the match kind:

========== ===================== =========================
kind       pair                  "don't care"
========== ===================== =========================
exact      (value, full mask)    (never)
lpm        (value, prefix mask)  (0, 0)
ternary    (value, mask)         (0, 0)
optional   (value, full mask)    (0, 0)
range      (low, high)           (0, 2**bitwidth - 1)
========== ===================== =========================

so two entries are the same entry exactly when their canonical matches and
priorities are equal, which is P4Runtime's definition of an entry's key.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from softswitch.program import Program

CanonicalMatch = tuple[tuple[int, int], ...]
"""A table entry's match, one canonical pair per key field (see above)."""


class TableError(Exception):
    """Base of the errors a table update can raise (the server maps them to P4Runtime codes)."""


class EntryExistsError(TableError):
    """INSERT of an entry whose match key and priority are already in the table."""


class EntryNotFoundError(TableError):
    """MODIFY or DELETE of an entry that is not in the table."""


class TableFullError(TableError):
    """INSERT into a table that already holds ``table.size`` entries."""


@dataclass(frozen=True, slots=True)
class MeterConfig:
    """A two-rate three-colour meter's configuration, as P4Runtime gives it.

    Rates in units (packets or bytes, the meter's unit) per second, bursts in units.
    """

    cir: int
    cburst: int
    pir: int
    pburst: int


class InstalledEntry(Protocol):
    """One installed table entry, as the server reads it back."""

    @property
    def match(self) -> CanonicalMatch: ...
    @property
    def priority(self) -> int: ...
    @property
    def action(self) -> str: ...
    @property
    def params(self) -> dict[str, int]:
        """Shared with look-ups: read-only."""
        ...

    @property
    def controller_metadata(self) -> int: ...
    @property
    def metadata(self) -> bytes: ...


class TableTarget(Protocol):
    """One match-action table: entries by canonical match and priority, and its default entry.

    Inputs are validated by the server (its error codes); the target raises :class:`TableError`
    for what only it can know (an entry already there or missing, the table full).
    """

    @property
    def default_action(self) -> str: ...
    @property
    def default_params(self) -> Mapping[str, int]: ...
    @property
    def default_modified(self) -> bool:
        """Whether the default entry differs from the program's (a saved config's default is installed then)."""
        ...

    def get(self, match: CanonicalMatch, priority: int = 0) -> InstalledEntry | None: ...
    def entries(self) -> Iterator[InstalledEntry]: ...
    def insert_canonical(
        self,
        match: CanonicalMatch,
        action: str,
        params: dict[str, int],
        priority: int = 0,
        *,
        controller_metadata: int = 0,
        metadata: bytes = b"",
    ) -> InstalledEntry: ...
    def modify_canonical(
        self,
        match: CanonicalMatch,
        action: str,
        params: dict[str, int],
        priority: int = 0,
        *,
        controller_metadata: int = 0,
        metadata: bytes = b"",
    ) -> InstalledEntry: ...
    def delete_canonical(self, match: CanonicalMatch, priority: int = 0) -> InstalledEntry: ...
    def set_default(self, action: str, params: Mapping[str, int] | None = None) -> None: ...
    def reset_default(self) -> None:
        """Back to the program's default action (P4Runtime: MODIFY of the default entry with no action)."""
        ...


class CounterTarget(Protocol):
    """An indexed counter: (packets, bytes) per cell, read and written by index below ``size``."""

    @property
    def size(self) -> int: ...
    def read(self, index: int) -> tuple[int, int]: ...
    def write(self, index: int, packets: int, nbytes: int) -> None: ...


class MeterTarget(Protocol):
    """An indirect meter: one :class:`MeterConfig` per cell below ``size``, None while unconfigured."""

    @property
    def size(self) -> int: ...
    def configure(self, index: int, config: MeterConfig | None) -> None: ...
    def config(self, index: int) -> MeterConfig | None: ...


class PipelineTarget(Protocol):
    """A data plane's state for one program, as the P4Runtime server writes and reads it.

    The server holds :attr:`lock` around every item it writes or reads, so a packet (processed under
    the same lock) sees each update whole.
    """

    @property
    def program(self) -> Program: ...
    @property
    def lock(self) -> AbstractContextManager[object]: ...
    @property
    def tables(self) -> Mapping[str, TableTarget]: ...
    @property
    def counters(self) -> Mapping[str, CounterTarget]: ...
    @property
    def meters(self) -> Mapping[str, MeterTarget]: ...

    def reset(self) -> None:
        """Forget everything: entries, defaults, counters, meters, registers (a new config committed)."""
        ...

    def empty(self) -> PipelineTarget:
        """A new state of the same program with nothing installed (the shadow VERIFY_AND_SAVE writes into)."""
        ...
