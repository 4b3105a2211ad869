"""The two helper servers of the loopback phases, each its own process: the coherence peer that plays the
switches (reflects INVALIDATE/UPDATE as acks, like the tests' SwitchPeer) and the UDP echo server whose GETs
show the generators' own ceiling."""

from __future__ import annotations

import asyncio
import os
import socket
from multiprocessing.connection import Connection

from bench.shim.children import quiet_child
from bench.shim.config import HOST
from distcache.wire import COHERENCE_OPS, Status, WireError, decode, encode


def coherence_peer(conn: Connection) -> None:
    """Play the switches' end of coherence: reflect INVALIDATE/UPDATE as acks, keeping seq, key and target.

    A separate process, so an ack never waits for the harness's own work (one GIL); it exits when the
    harness goes away (its parent changes), so a killed harness leaves no peer behind.
    """
    quiet_child()
    parent = os.getppid()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((HOST, 0))
    sock.settimeout(0.5)
    conn.send(sock.getsockname()[1])
    while os.getppid() == parent:
        try:
            data, addr = sock.recvfrom(4096)
            msg = decode(data)
        except (TimeoutError, WireError):
            continue
        if msg.op in COHERENCE_OPS:
            msg.op = msg.op.reply()
            sock.sendto(encode(msg), addr)


class _Echo(asyncio.DatagramProtocol):
    """Answers every request with a valid reply (decode + encode, as the cheapest possible server does)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.DatagramTransport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            msg = decode(data)
        except WireError:
            return
        self.transport.sendto(encode(msg.reply(Status.OK, b"x")), addr)


async def _echo_main(conn: Connection) -> None:
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(_Echo, local_addr=(HOST, 0))
    conn.send(transport.get_extra_info("sockname")[1])
    parent = os.getppid()
    while os.getppid() == parent:
        await asyncio.sleep(0.5)


def echo_server(conn: Connection) -> None:
    """The reference server of the generator-ceiling phase (its own process, like the shim)."""
    quiet_child()
    asyncio.run(_echo_main(conn))
