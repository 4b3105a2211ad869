"""The client library takes a reply only from where its request went (issue 15, defect 8).

Real UDP sockets on loopback.  A test server at 127.0.0.1:P answers each request, but first a
forger sends a GET_REPLY with the right seq, key and op from another port of the same address
and from another address (127.0.0.2, the port of the server itself): replies that any other
host of a client rack could send as plain UDP.  The client must ignore both, count them, and
return the server's value; it must also ignore replies from the right source whose op or key
do not match.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest

from client_lib.client import AsyncClient, Client
from distcache.cluster import Cluster
from distcache.wire import Message, Op, Status, encode
from tests.common.keys import digest
from tests.common.udp_server import LoopbackServer

pytestmark = pytest.mark.timeout(60)

CLUSTER = Cluster()
GENUINE, FORGED = b"genuine value", b"forged value"


def _forgeries(req: Message, port: int) -> list[tuple[tuple[str, int], Message]]:
    """(source address, reply) of every forged reply sent before the genuine one."""
    reply = req.reply(Status.OK, FORGED)
    return [
        (("127.0.0.1", 0), reply),  # same address, another port
        (("127.0.0.2", port), reply),  # another address, the server's port
        (("127.0.0.1", port), Message(Op.PUT_REPLY, req.key, req.digest, req.seq)),  # right source, wrong op
        (("127.0.0.1", port), Message(req.op.reply(), b"other", digest("other"), req.seq, FORGED)),  # another key
        (("127.0.0.1", port), Message(req.op.reply(), b"other", req.digest, req.seq, FORGED)),  # its digest, a key not
    ]


class Server(LoopbackServer):
    """A UDP server on 127.0.0.1 that has every request answered by forgers first, then answers it."""

    def __init__(self) -> None:
        self.forged = 0
        super().__init__()

    def serve(self, req: Message, client: tuple[str, int]) -> None:
        for src, msg in _forgeries(req, self.port):
            if src == ("127.0.0.1", self.port):
                self.sock.sendto(encode(msg), client)
            else:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as forger:
                    forger.bind(src)
                    forger.sendto(encode(msg), client)
            self.forged += 1
        time.sleep(0.05)  # the forgeries are all in the client's socket before the genuine reply
        self.sock.sendto(
            encode(req.reply(Status.OK, GENUINE if req.op == Op.GET else b"")),
            client,
        )


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


def test_sync_client_takes_only_the_reply_from_where_the_request_went(server: Server) -> None:
    with Client(CLUSTER, resolve=server.resolve(), timeout=2.0, retries=0) as c:
        r = c.get_reply("k")
        assert r.value == GENUINE and r.attempts == 1
        assert c.ignored == 5 == server.forged
        assert c.mget(["a", "b"]) == [GENUINE, GENUINE]
        assert c.ignored == 15


def test_async_client_takes_only_the_reply_from_where_the_request_went(server: Server) -> None:
    async def go() -> None:
        async with AsyncClient(CLUSTER, resolve=server.resolve(), timeout=2.0, retries=0) as c:
            assert await c.get("k") == GENUINE
            assert c.ignored == 5 == server.forged
            assert await c.mget(["a", "b"]) == [GENUINE, GENUINE]
            assert c.ignored == 15

    asyncio.run(go())


def test_a_name_is_held_to_the_address_it_resolves_to(server: Server) -> None:
    """``localhost`` is resolved once: replies come from 127.0.0.1, and are held to it."""
    with Client(CLUSTER, resolve=lambda _h: ("localhost", server.port), timeout=2.0, retries=0) as c:
        assert c.get("k") == GENUINE and c.ignored == 5
