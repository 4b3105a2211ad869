"""What the controller must remember across its own restarts, kept in one JSON file.

The partition itself is derived (consistent hashing over the spines in
service), so the file holds what it is derived from: which switches are out
of service and why, the mechanism if the operator changed it, and the
counters operators read (failovers, epoch).  Every change is written to a
temporary file, flushed to disk and renamed over the old one, so a crash
leaves either the old state or the new one, never half of each.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass
class Failure:
    admin: bool  # failed by the operator (only `recover` brings it back) rather than detected
    since: float  # time.time() when declared
    reason: str = ""
    stopped: bool = False  # the controller stopped its process (recover starts it again)


@dataclass
class ControllerState:
    failed: dict[str, Failure] = field(default_factory=dict)
    mechanism: str | None = None  # the operator's choice, overriding the cluster file's
    epoch: int = 0  # +1 at every partition change; shims report the epoch they hold
    failovers: int = 0
    recoveries: int = 0
    last_detection_s: float = 0.0
    last_failover_s: float = 0.0
    replicated: list[str] = field(default_factory=list)  # Hybrid: keys replicated in every spine (hex wire keys)

    @classmethod
    def load(cls, path: Path | None) -> ControllerState:
        if path is None or not path.exists():
            return cls()
        try:
            d = json.loads(path.read_text())
            d["failed"] = {k: Failure(**v) for k, v in d.get("failed", {}).items()}
            return cls(**d)
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"controller state file {path} is unreadable ({e}); move it away to start from the "
                             "cluster file alone (every switch in service)") from None

    def save(self, path: Path | None) -> None:
        if path is None:
            return
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(asdict(self), f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
