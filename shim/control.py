"""The shim's control channel: JSON lines over a Unix (or TCP) stream socket.

One request per line, one answer per line (docs/protocol.md lists them):

* ``{"cmd": "ping"}`` -> ``{"ok": true}``
* ``{"cmd": "partition", "buckets": [spine id x 1024], "down": [ids], "epoch": n}`` -> ``{"ok": true}``
  (``down`` and ``epoch`` optional: switches declared down, the controller's partition epoch)
* ``{"cmd": "view", "cached": {"<hex wire key>": [switch ids]}}`` -> ``{"ok": true}``: which
  switches cache which of this server's keys, from the controller (merged, never replacing)
* ``{"cmd": "populate", "key": "<hex wire key>", "switch": id}`` -> ``{"ok": true, "state": ...}``
  with state ``valid`` | ``absent`` | ``too_large`` | ``failed`` | ``down``
* ``{"cmd": "evict", "key": "<hex>", "switch": id}`` -> ``{"ok": true, "evicted": bool}``
* ``{"cmd": "stats"}`` -> ``{"ok": true, ...counters}``

Anything else gets ``{"ok": false, "error": "..."}`` and the connection stays usable.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os

from distcache.wire import KEY_LEN
from shim.server import Shim

log = logging.getLogger(__name__)


def _key(args: dict) -> bytes:
    try:
        key = bytes.fromhex(str(args["key"]))
    except (KeyError, ValueError):
        raise ValueError("'key' must be the hex of a 16-byte wire key") from None
    if len(key) != KEY_LEN:
        raise ValueError(f"'key' must be {KEY_LEN} bytes, got {len(key)}")
    return key


def _switch(args: dict) -> int:
    sw = args.get("switch")
    if not isinstance(sw, int) or not 0 < sw < 256:
        raise ValueError("'switch' must be a switch id (1..255)")
    return sw


async def dispatch(shim: Shim, req: object) -> dict:
    if not isinstance(req, dict):
        raise ValueError("a request is a JSON object with a 'cmd'")
    cmd = req.get("cmd")
    if cmd == "ping":
        return {"ok": True}
    if cmd == "stats":
        return {"ok": True, **shim.stats()}
    if cmd == "partition":
        shim.set_partition(req.get("buckets"), req.get("down"), req.get("epoch"))  # type: ignore[arg-type]
        return {"ok": True}
    if cmd == "view":
        cached = req.get("cached")
        if not isinstance(cached, dict):
            raise ValueError("'cached' must map hex wire keys to lists of switch ids")
        if not all(isinstance(v, list) for v in cached.values()):
            raise ValueError("'cached' must map hex wire keys to lists of switch ids")
        shim.add_view({_key({"key": k}): [_switch({"switch": s}) for s in v] for k, v in cached.items()})
        return {"ok": True}
    if cmd == "populate":
        return {"ok": True, "state": await shim.populate(_key(req), _switch(req))}
    if cmd == "evict":
        return {"ok": True, "evicted": shim.evict(_key(req), _switch(req))}
    raise ValueError(f"unknown cmd {cmd!r}; use ping, stats, partition, view, populate or evict")


async def serve_control(shim: Shim, address: str) -> asyncio.AbstractServer:
    """Listen on ``unix:/path`` or ``tcp:host:port``."""

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    answer = await dispatch(shim, json.loads(line))
                except (ValueError, TypeError) as e:
                    answer = {"ok": False, "error": str(e)}
                writer.write(json.dumps(answer).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    kind, _, rest = address.partition(":")
    if kind == "unix":
        if os.path.exists(rest):
            os.unlink(rest)
        return await asyncio.start_unix_server(client, path=rest)
    if kind == "tcp":
        host, _, port = rest.rpartition(":")
        return await asyncio.start_server(client, host, int(port))
    raise ValueError(f"bad control address {address!r}; use unix:/path or tcp:host:port")
