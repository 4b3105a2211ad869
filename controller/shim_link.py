"""Client side of a shim's control channel (JSON lines, see docs/protocol.md).

Agents and the controller run in the root network namespace while each shim
runs inside its storage host's namespace; a Unix socket in the run folder
reaches across (sockets bound to a path live in the filesystem, not in a
network namespace).  ``tcp:HOST:PORT`` works too, for shims elsewhere.
"""

from __future__ import annotations

import json
import socket


class ShimUnavailable(ConnectionError):
    """The shim's control socket cannot be reached or answered garbage."""


class ShimLink:
    def __init__(self, address: str, timeout: float = 5.0) -> None:
        self.address, self.timeout = address, timeout

    def _connect(self) -> socket.socket:
        kind, _, rest = self.address.partition(":")
        try:
            if kind == "unix":
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(self.timeout)
                s.connect(rest)
            elif kind == "tcp":
                host, _, port = rest.rpartition(":")
                s = socket.create_connection((host, int(port)), timeout=self.timeout)
            else:
                raise ShimUnavailable(f"bad shim address {self.address!r}; use unix:/path or tcp:host:port")
        except OSError as e:
            raise ShimUnavailable(f"cannot reach shim at {self.address}: {e}") from e
        return s

    def call(self, cmd: str, **args: object) -> dict:
        """Send one command and return the shim's JSON answer."""
        with self._connect() as s:
            try:
                s.sendall(json.dumps({"cmd": cmd, **args}).encode() + b"\n")
                buf = b""
                while not buf.endswith(b"\n"):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
            except OSError as e:
                raise ShimUnavailable(f"shim at {self.address} failed during {cmd!r}: {e}") from e
        try:
            return json.loads(buf)
        except ValueError:
            raise ShimUnavailable(f"shim at {self.address} answered {cmd!r} with {buf[:80]!r}") from None
