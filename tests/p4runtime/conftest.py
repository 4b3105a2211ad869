"""P4Runtime tests: softswitch and BMv2 processes on loopback, spoken to over P4Runtime (conformance,
the controller's and agents' clients, digests, packet I/O)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.common.marks import mark_folder


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, Path(__file__).parent, "p4runtime")
