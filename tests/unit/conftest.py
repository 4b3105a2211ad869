"""Unit tests: no switch process, no namespace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.common.marks import mark_folder


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, Path(__file__).parent, "unit")
