"""The agent's state file: the per-slot version tags it handed out and the cache epoch they count in.

Written (atomically, fsync'd) before an entry with a new tag is written to the switch, so an agent that
restarts with its file never hands out a tag the switch's registers may still hold; one without it raises
the switch's cache epoch instead.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from agent.slots import SlotAllocator

log = logging.getLogger("agent")


class StateFileError(ValueError):
    """The agent's state file exists but cannot be used."""


def load_state(path: Path | None, switch: str) -> tuple[list[int], int | None] | None:
    """(per-slot versions, epoch) from ``switch``'s state file; None without one.

    A file that exists but cannot be used is refused (StateFileError), never silently
    ignored: the operator removes it (the agent then raises the switch's cache epoch) or
    points at the right one.
    """
    if path is None or not path.exists():
        log.info("%s: no state file: the switch's cache epoch will be raised", switch)
        return None
    where = f"agent state file {path}"
    try:
        d = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise StateFileError(f"{where} is unreadable ({e}); remove it to start afresh") from None
    owner = d.get("switch") if isinstance(d, dict) else None
    if owner != switch:
        raise StateFileError(
            f"{where} is not {switch}'s (it names {owner!r}); pass this switch's file, or remove it to start afresh"
        )
    versions, epoch = d.get("last_versions"), d.get("epoch")
    if (
        not isinstance(versions, list)
        or not all(type(v) is int and 0 <= v <= SlotAllocator.MAX_VERSION for v in versions)
        or not (epoch is None or (type(epoch) is int and 0 <= epoch <= 0xFFFFFFFF))
    ):
        raise StateFileError(
            f"{where} is malformed (expected last_versions: [0..65535], epoch: 0..2^32-1); remove it to start afresh"
        )
    return versions, epoch


def save_state(path: Path | None, switch: str, epoch: int | None, versions: list[int]) -> None:
    if path is None:
        return
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump({"switch": switch, "epoch": epoch, "last_versions": versions}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
