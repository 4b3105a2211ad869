"""A trivial DistCache echo server, to measure the load generator alone.

It answers every datagram by setting the reply bit of its op code and sending
it back unchanged (a GET comes back as an empty GET_REPLY, i.e. absent): no
Redis, no parsing, so the client side is the only thing being measured
(``distcache bench --echo``).  ``python -m loadgen.echo --port 0`` prints
``echo ready <port>`` once it listens.
"""

from __future__ import annotations

import argparse
import contextlib
import socket


def serve(host: str = "127.0.0.1", port: int = 0) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((host, port))
    print(f"echo ready {sock.getsockname()[1]}", flush=True)
    while True:
        data, addr = sock.recvfrom(2048)
        if len(data) >= 2:
            b = bytearray(data)
            b[1] |= 0x80
            sock.sendto(b, addr)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m loadgen.echo", description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        serve(args.host, args.port)


if __name__ == "__main__":
    main()
