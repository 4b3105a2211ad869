"""Run client-library calls inside a client host's namespace, driven over stdin.

The launcher (root namespace) starts ``python -m dcnet.client_runner`` in a
Mininet client host and writes one JSON request per line::

    {"op": "put", "key": "k1", "value": "v1"}
    {"op": "get", "key": "k1"}
    {"op": "delete", "key": "k1"}
    {"op": "exec", "args": ["INCR", "n"]}          (any single-key command; "key" where not the first argument)
    {"op": "put", "key_hex": "00ff", "hex": "..."}  (a binary key or value, in hex)

and reads one JSON answer per line: ``{"ok": true, ...}`` with the value (as
text or hex), whether a switch cache served it, which switch, the status and
the latency; or ``{"ok": false, "error": "<exception type>", "message": ...}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from client_lib import Client, DistCacheError


def handle(client: Client, req: dict) -> dict:
    op, key = req.get("op"), bytes.fromhex(req["key_hex"]) if "key_hex" in req else req.get("key")
    start = time.perf_counter()
    if op == "get":
        r = client.get_reply(key)
        return {
            "ok": True,
            "found": r.value is not None,
            "value": _text(r.value),
            "cached": r.cached,
            "served_by": r.served_by,
            "status": r.status.name,
            "latency_us": round(r.latency * 1e6),
            "attempts": r.attempts,
        }
    if op == "put":
        client.put(key, req["value"].encode() if isinstance(req.get("value"), str) else bytes.fromhex(req["hex"]))
    elif op == "delete":
        return {"ok": True, "deleted": client.delete(key), "latency_us": round((time.perf_counter() - start) * 1e6)}
    elif op == "exec":
        reply = client.execute(*req["args"], key=key)
        return {"ok": True, "reply": _json(reply), "latency_us": round((time.perf_counter() - start) * 1e6)}
    else:
        return {"ok": False, "error": "ValueError", "message": f"unknown op {op!r}; use get, put, delete or exec"}
    return {"ok": True, "latency_us": round((time.perf_counter() - start) * 1e6)}


def _json(reply: object) -> object:
    """A command's reply as JSON: bytes as text (or hex:...), lists item by item."""
    if isinstance(reply, list):
        return [_json(x) for x in reply]
    return _text(reply) if isinstance(reply, (bytes, type(None))) else reply


def _text(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return "hex:" + value.hex()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--timeout", type=float, default=1.0)
    ap.add_argument("--retries", type=int, default=3)
    args = ap.parse_args()
    client = Client(args.cluster, timeout=args.timeout, retries=args.retries)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            out = handle(client, json.loads(line))
        except DistCacheError as e:
            out = {"ok": False, "error": type(e).__name__, "message": str(e)}
        except (ValueError, KeyError, TypeError) as e:
            out = {"ok": False, "error": type(e).__name__, "message": str(e)}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
