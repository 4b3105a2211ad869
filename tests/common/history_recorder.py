"""A client process's operations as a history, for the staleness oracle and lincheck (tests that play an
interleaving step by step)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from loadgen.history import get_line, put_line
from loadgen.oracle import check_history


class Recorder:
    """Operations of one client process (``dep.client()``) in loadgen.history's format, timed in this
    process: the same CLOCK_MONOTONIC as every namespace, each interval around the whole call (wider than
    the request: never too narrow).  A put that failed has an unknown outcome (it may have been applied)."""

    def __init__(self, client: object) -> None:
        self.client, self.lines = client, list[dict]()

    def put(self, key: str, value: str) -> bool:
        call = time.monotonic_ns()
        ok = bool(self.client.call("put", key, value)["ok"])  # type: ignore[attr-defined]
        self.lines.append(put_line(key, value, call, time.monotonic_ns(), "ok" if ok else "unknown"))
        return ok

    def get(self, key: str) -> dict:
        call = time.monotonic_ns()
        r = self.client.call("get", key)  # type: ignore[attr-defined]
        if r["ok"]:
            self.lines.append(get_line(key, r["value"], call, time.monotonic_ns(), r["served_by"]))
        return r

    def reads(self, key: str, n: int) -> list[dict]:
        return [self.get(key) for _ in range(n)]

    def judged(self, path: Path) -> tuple[int, int]:
        """(stale + wrong by the oracle, lincheck's violations) of the history so far, written to ``path``."""
        from dcnet.matrix_result import check  # needs build/lincheck

        path.write_text("".join(json.dumps(line) + "\n" for line in self.lines))
        verdict = check_history([path])
        _, violations, _ = check(path, path.with_suffix(".html"))
        return verdict.stale + verdict.wrong, violations
