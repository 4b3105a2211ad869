"""The shim benchmark's fixed facts, shared by its modules."""

from __future__ import annotations

from pathlib import Path

HOST = "127.0.0.1"
#: the load generator and coherence peer (tools/storagebench, Go, built by make build)
STORAGEBENCH = Path(__file__).resolve().parents[2] / "build" / "storagebench"
#: the shim's dedup table: every write is remembered for its 30 s retry span, and the rows write ~50 000/s (the
#: default 64 MB holds 200 000: past it writes are refused BUSY, which a deployment at this rate would size away)
DEDUP_MEMORY = "2gb"
CACHED_KEYS = 1000  # keys populated on spine 1, which the put-cached rows write (both coherence phases)
