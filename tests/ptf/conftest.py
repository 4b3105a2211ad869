"""PTF tests: packets through one switch in a private network namespace (root).

The PTF tests under tests/ptf/tests run only under ptf (``python -m tests.ptf.run``), never under pytest:
they need ptf's dataplane and test params.  tests/ptf/test_ptf.py runs them from pytest, once per target.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.common.marks import mark_folder

collect_ignore = ["tests"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, Path(__file__).parent, "ptf", needs_root=True)
