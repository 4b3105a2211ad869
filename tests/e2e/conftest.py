"""End-to-end tests: Mininet deployments of switches, agents, shims, Redis and the controller (root)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.common.marks import mark_folder


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, Path(__file__).parent, "e2e", needs_root=True)
