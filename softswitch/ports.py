"""Packet I/O of the softswitch: raw Ethernet frames on named interfaces.

Like BMv2's ``-i PORT@IFACE``: each switch port is an AF_PACKET socket bound
to one interface, in promiscuous mode, non-blocking.  Frames the host itself
sends on the interface (including the switch's own transmissions) are
ignored, with PACKET_IGNORE_OUTGOING where the kernel has it and by checking
the packet type otherwise, so a switch never processes its own output.

Optional capture writes classic pcap files per port and direction, named like
BMv2's (``<iface>_in.pcap``, ``<iface>_out.pcap``), for debugging with
tcpdump/wireshark.

Each frame comes with the time the kernel received it (SO_TIMESTAMPNS), the
way a hardware switch stamps a frame at its MAC: the pipeline's ingress
timestamp then says when the frame reached the switch, not when this process
got round to it, so a switch that stalls for a moment (a busy host) does not
see the frames that waited meanwhile as late (liveness.p4 would take their
sender for dead).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import operator
import os
import random
import select
import socket
import struct
import sys
import termios
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger("softswitch.ports")

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_OUTGOING = 4  # sll_pkttype of frames this host sent
PACKET_IGNORE_OUTGOING = 23  # Linux >= 4.20
MAX_FRAME = 65536
RCVBUF = 4 * 1024 * 1024
BATCH = 64  # frames read from one port before looking at the others (fairness)
# the kernel's receive time of each frame (struct timespec, CLOCK_REALTIME) as ancillary data
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@qq")
_TIMESPEC_SIZE, _timespec, _SOL_SOCKET = _TIMESPEC.size, _TIMESPEC.unpack_from, socket.SOL_SOCKET
_ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size)
_FIONREAD = b"\0\0\0\0"  # ioctl(FIONREAD) argument: on a packet socket, the length of the next frame (0: none)


class PcapWriter:
    """Classic libpcap file (microsecond timestamps, Ethernet), flushed per frame.

    Written by hand because it is 30 lines and keeps scapy out of the switch process.
    """

    def __init__(self, path: str | Path, snaplen: int = MAX_FRAME) -> None:
        self.path = Path(path)
        self._f: BinaryIO = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self._snaplen = snaplen
        self._f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1))
        self._f.flush()

    def write(self, frame: bytes, ts: float | None = None) -> None:
        t = time.time() if ts is None else ts
        sec = int(t)
        usec = int((t - sec) * 1_000_000)
        data = frame[: self._snaplen]
        self._f.write(struct.pack("<IIII", sec, usec, len(data), len(frame)))
        self._f.write(data)
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def read_pcap(path: str | Path) -> list[bytes]:
    """Frames of a classic pcap file (as :class:`PcapWriter` writes them); for tests and tools."""
    data = Path(path).read_bytes()
    magic = struct.unpack_from("<I", data, 0)[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    frames: list[bytes] = []
    off = 24
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack_from(endian + "IIII", data, off)
        off += 16
        frames.append(data[off : off + incl])
        off += incl
    return frames


@dataclass
class PortStats:
    rx: int = 0
    tx: int = 0
    tx_errors: int = 0
    tx_lost: int = 0  # dropped on purpose by the emulated link loss (--egress-loss)


@dataclass
class Port:
    """One switch port: number, interface, socket, optional captures, counters."""

    number: int
    iface: str
    sock: socket.socket | None = None
    pcap_in: PcapWriter | None = None
    pcap_out: PcapWriter | None = None
    stats: PortStats | None = None


def open_packet_socket(iface: str) -> socket.socket:
    """A non-blocking, promiscuous AF_PACKET socket on ``iface`` that skips outgoing frames."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    try:
        with contextlib.suppress(OSError):  # older kernel: the pkttype check in receive() does the job
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.bind((iface, ETH_P_ALL))
        ifindex = socket.if_nametoindex(iface)
        mreq = struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b"")
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _received_ns(ancillary: list[tuple[int, int, bytes]]) -> int:
    """The kernel's receive timestamp of a frame (ns, CLOCK_REALTIME); now if the kernel gave none."""
    for level, kind, data in ancillary:
        if kind == SO_TIMESTAMPNS and level == _SOL_SOCKET and len(data) >= _TIMESPEC_SIZE:
            sec, nsec = _timespec(data)
            return sec * 1_000_000_000 + nsec
    return time.time_ns()


def _next_len(sock: socket.socket) -> int:
    """The length of the next frame queued on a packet socket, 0 if none (FIONREAD: one cheap syscall,
    no exception)."""
    return int.from_bytes(fcntl.ioctl(sock.fileno(), termios.FIONREAD, _FIONREAD), sys.byteorder)


_RECEIVED = operator.itemgetter(2)  # a frame's receive time in poll()'s tuples


class PortSet:
    """The ports of one switch and the single receive loop over them.

    ``poll`` waits on every port socket plus a self-pipe, so :meth:`wakeup`
    (safe in a signal handler) ends a wait at once.
    """

    def __init__(self, ports: Mapping[int, str], pcap_dir: str | Path | None = None, egress_loss: float = 0.0) -> None:
        self.ports: dict[int, Port] = {n: Port(n, iface, stats=PortStats()) for n, iface in sorted(ports.items())}
        # fraction of transmitted frames lost on purpose, as `tc netem loss` would on the link (for fault
        # injection where the kernel has no netem); 0 in normal operation
        self.egress_loss = egress_loss
        self._rng = random.Random()
        self.pcap_dir = Path(pcap_dir) if pcap_dir else None
        self.tx_no_port = 0
        self._epoll = select.epoll()
        self._by_fd: dict[int, Port] = {}  # the ready sockets epoll reports, by file descriptor
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._epoll.register(self._wake_r, select.EPOLLIN)
        self._opened = False

    def open(self) -> None:
        """Open every port; raises OSError naming the interface that failed."""
        if self.pcap_dir:
            self.pcap_dir.mkdir(parents=True, exist_ok=True)
        try:
            for p in self.ports.values():
                try:
                    p.sock = open_packet_socket(p.iface)
                except OSError as e:
                    raise OSError(e.errno, f"port {p.number}: cannot open interface {p.iface!r}: {e.strerror}") from e
                self._epoll.register(p.sock, select.EPOLLIN)
                self._by_fd[p.sock.fileno()] = p
                if self.pcap_dir:
                    p.pcap_in = PcapWriter(self.pcap_dir / f"{p.iface}_in.pcap")
                    p.pcap_out = PcapWriter(self.pcap_dir / f"{p.iface}_out.pcap")
        except Exception:
            self.close()
            raise
        self._opened = True

    def close(self) -> None:
        """Close sockets, captures and the wake-up pipe (idempotent)."""
        for p in self.ports.values():
            if p.sock is not None:
                self._by_fd.pop(p.sock.fileno(), None)
                with contextlib.suppress(OSError, ValueError):
                    self._epoll.unregister(p.sock)
                p.sock.close()
                p.sock = None
            for w in (p.pcap_in, p.pcap_out):
                if w is not None:
                    w.close()
            p.pcap_in = p.pcap_out = None
        if self._wake_r >= 0:
            self._epoll.close()
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._wake_r = self._wake_w = -1

    def wakeup(self) -> None:
        """Make a blocked :meth:`poll` return now (async-signal-safe)."""
        with contextlib.suppress(OSError):  # pipe full or closed: a wake-up is already pending or nobody waits
            os.write(self._wake_w, b"\0")

    def poll(self, timeout: float | None) -> list[tuple[int, bytes, int]]:
        """Frames received within ``timeout`` seconds, as (port, frame, when the kernel received it: ns
        of CLOCK_REALTIME), outgoing ones skipped, in the order the kernel received them.

        Up to BATCH frames of each ready port, merged by receive time: the pipeline's timestamps never go
        backwards (SoftSwitch.stamp), so a frame processed after a later one of another port would be
        stamped late -- a spine's answer that waited behind 40 ms of a busy leaf's client traffic read as
        40 ms of silence, and liveness.p4 took the spine for dead.

        The epoll object is used as is (not through ``selectors``, whose per-call bookkeeping in Python
        costs a few microseconds per wake-up, and at a few thousand frames a second every wake-up
        carries one frame)."""
        frames: list[tuple[int, bytes, int]] = []
        by_fd = self._by_fd
        for fd, _ in self._epoll.poll(-1 if timeout is None else timeout):
            port = by_fd.get(fd)
            if port is None:
                if fd == self._wake_r:
                    try:
                        while os.read(self._wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                continue
            self._receive(port, frames)
        if len(frames) > 1:
            frames.sort(key=_RECEIVED)  # stable, as before: a C key function, not a lambda
        return frames

    def _receive(self, port: Port, frames: list[tuple[int, bytes, int]]) -> None:
        """Append up to BATCH frames waiting on ``port`` to ``frames``.

        After the first frame, FIONREAD says whether another is queued: at low rates (one frame per
        wake-up, the common case in the emulated cluster) that ioctl is cheaper than the failing
        receive (an EAGAIN raised as BlockingIOError) that would otherwise end the loop; once a second
        frame is there the loop receives until EAGAIN as before, so a burst costs one ioctl more."""
        sock = port.sock
        if sock is None:
            return
        stats, pcap, number = port.stats, port.pcap_in, port.number
        assert stats is not None
        recvmsg = sock.recvmsg
        for got in range(1, BATCH + 1):
            try:
                frame, ancillary, _, addr = recvmsg(MAX_FRAME, _ANCILLARY)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:  # e.g. ENETDOWN when the link goes away: keep serving the others
                if e.errno not in (errno.ENETDOWN, errno.ENXIO):
                    log.warning("port %d (%s): receive error: %s", port.number, port.iface, e)
                break
            if addr[2] != PACKET_OUTGOING:
                stats.rx += 1
                received = _received_ns(ancillary)
                if pcap is not None:
                    pcap.write(frame, received / 1e9)
                frames.append((number, frame, received))
            if got == 1 and not _next_len(sock):
                break

    def send(self, port: int, frame: bytes) -> bool:
        """Transmit a frame on a port; False (and counted) if it could not be sent."""
        p = self.ports.get(port)
        if p is None or p.sock is None:
            self.tx_no_port += 1
            return False
        assert p.stats is not None
        if self.egress_loss and self._rng.random() < self.egress_loss:
            p.stats.tx_lost += 1
            return True  # it left the switch; the link lost it
        try:
            p.sock.send(frame)
        except OSError as e:  # EAGAIN/ENOBUFS under load, ENETDOWN, EMSGSIZE: a drop, not a crash
            p.stats.tx_errors += 1
            if p.stats.tx_errors in (1, 10, 100, 1000) or p.stats.tx_errors % 10000 == 0:
                log.warning("port %d (%s): send failed (%d so far): %s", port, p.iface, p.stats.tx_errors, e)
            return False
        p.stats.tx += 1
        if p.pcap_out is not None:
            p.pcap_out.write(frame)
        return True

    def summary(self) -> str:
        """One line of per-port counters for the exit log."""
        parts = []
        for p in self.ports.values():
            s = p.stats or PortStats()
            parts.append(f"{p.number}@{p.iface} rx={s.rx} tx={s.tx} tx_err={s.tx_errors}")
        return "; ".join(parts) + f"; tx_no_port={self.tx_no_port}"
