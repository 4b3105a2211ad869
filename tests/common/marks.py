"""How each test folder marks what it collects: one kind per folder, set by the folder's conftest.

The kinds are ``unit`` (no switch, no namespace), ``p4runtime`` (switch processes on loopback, spoken to
over P4Runtime), ``ptf`` (packets through one switch in a private namespace) and ``e2e`` (a Mininet
deployment).  The last two need root and network namespaces, hence also ``mininet``, which ``make
test-fast`` leaves out; without root they are skipped with the reason, not failed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def mark_folder(items: list[pytest.Item], folder: Path, kind: str, needs_root: bool = False) -> None:
    """Give every test collected under ``folder`` the marker ``kind`` (and ``mininet`` if it needs root)."""
    for item in items:
        if not item.path.is_relative_to(folder):
            continue
        item.add_marker(getattr(pytest.mark, kind))
        if needs_root:
            item.add_marker(pytest.mark.mininet)
            if os.geteuid() != 0:
                item.add_marker(pytest.mark.skip(reason=f"{kind} tests need root (network namespaces)"))
