"""A byte relay from a Unix socket to a TCP address, run inside a Mininet host's namespace: a test in the root
namespace reaches a server that listens only on the host's address (its gateway) through the relay's socket file,
which both namespaces see.  Bytes pass as they are, both ways, one TCP connection per connection to the socket.

    python -m tests.common.relay SOCKET HOST PORT
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def main(path: str, host: str, port: int) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    print("relay ready", flush=True)
    while True:
        client, _ = server.accept()
        upstream = socket.create_connection((host, port))
        threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
