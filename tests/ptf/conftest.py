"""The PTF tests under tests/ptf/tests run only under ptf (``python -m tests.ptf.run``), never under pytest:
they need ptf's dataplane and test params.  tests/test_ptf.py runs them from pytest."""

collect_ignore = ["tests"]
