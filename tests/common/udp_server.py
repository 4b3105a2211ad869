"""A UDP server on 127.0.0.1 for client tests: a thread hands every request to ``serve``."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from distcache.wire import Message, decode


class LoopbackServer:
    """Subclasses say how to answer one decoded request (``serve``); ``resolve()`` points a client here."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self._stop = False
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def serve(self, req: Message, client: tuple[str, int]) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop:
            try:
                data, client = self.sock.recvfrom(2048)
            except TimeoutError:
                continue
            self.serve(decode(data), client)

    def resolve(self) -> Callable[[object], tuple[str, int]]:
        return lambda _host: ("127.0.0.1", self.port)

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        self.sock.close()
