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
import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from distcache.cluster import Cluster, Mechanism
from distcache.wire import DIGEST_LEN as KEY_LEN

log = logging.getLogger(__name__)

_WHAT_TO_DO = (
    "; fix it, or move it away to start from the cluster file alone (every switch in service, the cluster's mechanism)"
)


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _wire_key_hex(k: object) -> bool:
    if not isinstance(k, str):
        return False
    try:
        return len(bytes.fromhex(k)) == KEY_LEN
    except ValueError:
        return False


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
    def load(cls, path: Path | None, cluster: Cluster | None = None) -> ControllerState:
        """The state in ``path`` (none there: a fresh start), checked against ``cluster``.

        A file that cannot be read or does not describe this cluster (a switch it does not have,
        a field of the wrong type) is refused with one line that says to fix it or move it away:
        starting anyway would either crash later or silently drop what the operator decided
        (a switch failed by hand coming back into service).
        """
        if path is None or not path.exists():
            return cls()
        try:
            d = json.loads(path.read_text())
        except OSError as e:
            raise ValueError(f"controller state file {path} is unreadable ({e.strerror or e}){_WHAT_TO_DO}") from None
        except ValueError as e:  # not JSON, or not UTF-8
            raise ValueError(f"controller state file {path} is unreadable (not JSON: {e}){_WHAT_TO_DO}") from None
        try:
            st = cls._from_dict(d)
            if cluster is not None:
                st._check(cluster)
        except ValueError as e:
            raise ValueError(f"controller state file {path} is invalid: {e}{_WHAT_TO_DO}") from None
        return st

    @classmethod
    def _from_dict(cls, d: object) -> ControllerState:
        """Build the state from a file's JSON, checking every field's type (ValueError names the field)."""
        if not isinstance(d, dict):
            raise ValueError(f"expected a JSON object of fields, not {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        if unknown := sorted(set(d) - known):
            raise ValueError(f"unknown field(s) {unknown}; known: {sorted(known)}")
        failed = d.get("failed", {})
        if not isinstance(failed, dict):
            raise ValueError("failed: expected an object of switch name -> failure")
        out: dict[str, Failure] = {}
        for name, f in failed.items():
            if not isinstance(f, dict) or not {"admin", "since"} <= set(f) <= {x.name for x in fields(Failure)}:
                raise ValueError(f"failed.{name}: expected an object with admin, since (reason, stopped), got {f!r}")
            if not (
                isinstance(f["admin"], bool)
                and isinstance(f.get("stopped", False), bool)
                and _number(f["since"])
                and isinstance(f.get("reason", ""), str)
            ):
                raise ValueError(
                    f"failed.{name}: admin and stopped are true/false, since a time, reason a string; got {f!r}"
                )
            out[name] = Failure(**f)
        mech = d.get("mechanism")
        if mech is not None and not (isinstance(mech, str) and mech.upper() in Mechanism.__members__):
            raise ValueError(f"mechanism: expected null or one of {[m.name.lower() for m in Mechanism]}, got {mech!r}")
        for name in ("epoch", "failovers", "recoveries"):
            v = d.get(name, 0)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name}: expected an integer >= 0, got {v!r}")
        for name in ("last_detection_s", "last_failover_s"):
            if not _number(d.get(name, 0.0)):
                raise ValueError(f"{name}: expected a number >= 0, got {d.get(name)!r}")
        replicated = d.get("replicated", [])
        if not isinstance(replicated, list) or not all(_wire_key_hex(k) for k in replicated):
            raise ValueError(f"replicated: expected a list of {KEY_LEN}-byte keys in hex, got {replicated!r}")
        return cls(**{**d, "failed": out})

    def replicated_keys(self) -> set[bytes]:
        """Hybrid's replicated keys, as wire keys."""
        return {bytes.fromhex(k) for k in self.replicated}

    def _check(self, cluster: Cluster) -> None:
        """Every switch the state names is one of ``cluster``'s."""
        names = {sw.name for sw in cluster.switches()}
        for name in self.failed:
            if name not in names:
                raise ValueError(
                    f"it names switch {name!r} (failed), which the cluster does not have "
                    f"(its switches: {', '.join(sorted(names))})"
                )

    def save(self, path: Path | None) -> None:
        if path is None:
            return
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(asdict(self), f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
