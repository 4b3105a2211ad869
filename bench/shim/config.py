"""The shim benchmark's fixed facts, shared by its modules: where the shim listens, the values and keys of the
load phases, the warm-up and timeouts."""

from __future__ import annotations

import multiprocessing as mp

from rich.console import Console

HOST = "127.0.0.1"
VALUE = b"v" * 32  # the value size redis-benchmark is run with (-d 32)
GET_KEYS = 1000  # keys preloaded for the GET phase
WARMUP = 0.5  # seconds of load before each measured window (Redis connection pool, caches), not counted
REPLY_TIMEOUT = 1.0  # a generator's request timeout; a lost request is counted and its task moves on
LATENCY_OPS = 500  # sequential PUTs per latency figure
PROFILE_RATE = 200  # py-spy samples per second
CTX = mp.get_context("spawn")  # fresh interpreters: no inherited event loop, gRPC channel or rich thread
err = Console(stderr=True, log_path=False)
