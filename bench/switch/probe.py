"""One frame through the switch and what came out of which port, and the check that it is the frame the path
should produce (port, operation, value): before each path is measured, so a figure never counts wrong output."""

from __future__ import annotations

import contextlib
import socket
import time

from bench.switch.config import IN_PORT, LEAF, PLAIN_DPORT, PORTS, SERVER_PORT, SPINE_PORTS, VALUE, SetupError
from bench.switch.frames import Frames, udp_payload
from distcache.wire import Flag, Op, WireError, decode

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4  # sll_pkttype of a frame the interface sent, not one it received


def _rx_socket(iface: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((iface, ETH_P_ALL))
    s.setblocking(False)
    return s


def probe(frame: bytes, in_port: int = IN_PORT, timeout: float = 2.0, settle: float = 0.2) -> list[tuple[int, bytes]]:
    """Send ``frame`` on the switch's port ``in_port`` and return what came out of any port within ``timeout``
    (and ``settle`` seconds after the first frame), as (switch port, frame)."""
    socks = {p: _rx_socket(f"bpt{p}") for p in PORTS}
    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        tx.bind((f"bpt{in_port}", 0))
        for s in socks.values():  # anything queued before
            with contextlib.suppress(BlockingIOError):
                while s.recv(65536):
                    pass
        tx.send(frame)
        got: list[tuple[int, bytes]] = []
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for p, s in socks.items():
                with contextlib.suppress(BlockingIOError):
                    while True:
                        data, addr = s.recvfrom(65536)
                        if addr[2] != PACKET_OUTGOING:
                            got.append((p, data))
            if got:
                end = min(end, time.monotonic() + settle)
            time.sleep(0.01)
        return got
    finally:
        tx.close()
        for s in socks.values():
            s.close()


def check_path(path: str, frames: Frames, out: list[tuple[int, bytes]]) -> int:
    """The port ``path``'s frame left on, after checking it is the one frame expected; raises SetupError."""
    if len(out) != 1:
        raise SetupError(f"{path}: expected one frame out of the switch, got {len(out)} (ports {[p for p, _ in out]})")
    port, data = out[0]
    parsed = udp_payload(data)
    if parsed is None:
        raise SetupError(f"{path}: the frame out of port {port} is not IPv4/UDP")
    ttl, dport, payload = parsed
    if path == "fwd":
        if port != SERVER_PORT or dport != PLAIN_DPORT or ttl != 63:
            raise SetupError(
                f"fwd: plain UDP came out of port {port} (dport {dport}, ttl {ttl}); expected port "
                f"{SERVER_PORT}, dport {PLAIN_DPORT}, ttl 63"
            )
        return port
    try:
        msg = decode(payload)
    except WireError as e:
        raise SetupError(f"{path}: the frame out of port {port} is not a DistCache message: {e}") from None
    if path == "hit":
        if (
            port not in SPINE_PORTS
            or msg.op != Op.GET_REPLY
            or msg.value != VALUE
            or msg.served_by != LEAF.switch_id
            or not msg.flags & Flag.CACHED
        ):
            raise SetupError(
                f"hit: expected a GET_REPLY served by {LEAF.switch_id} with the cached value on a "
                f"spine port; got {msg.op.name} on port {port} (served_by {msg.served_by}, "
                f"{len(msg.value)}-byte value)"
            )
    elif port != SERVER_PORT or msg.op != Op.GET or msg.key != frames.miss_key:
        raise SetupError(f"miss: expected the GET on the server port {SERVER_PORT}; got {msg.op.name} on port {port}")
    return port
