"""Keep the kernel from lending a service's fixed port to an outgoing connection.

The switches, agents and controller listen on fixed loopback ports (50050, 50051 + switch id, 51051 +
switch id) that lie inside Linux's ephemeral range (32768-60999).  Any outgoing connection may take one of
them as its local port, and when it closes first it holds the port in TIME_WAIT for 60 s: a switch started
then cannot bind it ("softswitch sp2 exited with code 1", "bmv2 sp2 did not open 127.0.0.1:50054").  A run
that opens thousands of short connections (the clients, Redis, P4Runtime) hits one now and then.  Listing
the ports in ``net.ipv4.ip_local_reserved_ports`` keeps them out of the kernel's choice while they are
reserved; explicit binds (our listeners) are not affected.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

RESERVED = Path("/proc/sys/net/ipv4/ip_local_reserved_ports")  # per network namespace


def port_list(ports: Iterable[int]) -> str:
    """``ports`` in the sysctl's syntax, runs folded into ranges: ``9464,50050-50056``."""
    runs: list[list[int]] = []
    for p in sorted(set(ports)):
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


class ReservedPorts:
    """``ports`` reserved (added to what is reserved already) from :meth:`reserve` to :meth:`restore`, or
    while entered as a context manager; the old list after.  As root only: without the right to write the
    sysctl it changes nothing, and the run keeps the (small) chance of a port taken by a connection."""

    def __init__(self, ports: Iterable[int], sysctl: Path = RESERVED) -> None:
        self.ports = sorted(set(ports))
        self._sysctl = sysctl
        self._old: str | None = None

    def reserve(self) -> None:
        if self._old is not None or not self.ports:
            return
        with contextlib.suppress(OSError):
            old = self._sysctl.read_text().strip()
            self._sysctl.write_text(",".join(filter(None, [old, port_list(self.ports)])) + "\n")
            self._old = old

    def restore(self) -> None:
        """Give back the list found at :meth:`reserve` (nothing to do when not reserved)."""
        if self._old is not None:
            with contextlib.suppress(OSError):
                self._sysctl.write_text(self._old + "\n")
            self._old = None

    def __enter__(self) -> ReservedPorts:
        self.reserve()
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()
