"""The shim benchmark's fixed facts, shared by its modules."""

from __future__ import annotations

from pathlib import Path

HOST = "127.0.0.1"
#: the load generator and coherence peer (tools/storagebench, Go, built by make build)
STORAGEBENCH = Path(__file__).resolve().parents[2] / "build" / "storagebench"
CACHED_KEYS = 1000  # keys populated on spine 1, which the put-cached rows write (both coherence phases)
