"""docs/protocol.md must list exactly the fields, ops and statuses the code uses."""

from __future__ import annotations

import re
from pathlib import Path

from distcache.wire import HEADER_FIELDS, HEADER_LEN, Op, Status

DOC = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()


def table(heading: str) -> list[list[str]]:
    section = DOC.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows[2:]]


def test_header_table_matches_wire_fields() -> None:
    rows = table("Header")
    assert [(r[0], int(r[1])) for r in rows] == list(HEADER_FIELDS)
    offset = 0
    for r in rows:
        assert int(r[2]) == offset, r[0]
        offset += int(r[1]) // 8
    assert offset == HEADER_LEN
    assert f"header is **{HEADER_LEN} bytes**" in DOC


def test_op_and_status_tables_match_enums() -> None:
    assert {r[0]: int(r[1], 16) for r in table("Operation codes")} == {o.name: o.value for o in Op}
    assert {r[0]: int(r[1]) for r in table("Status codes")} == {s.name: s.value for s in Status}


def test_documented_sizes() -> None:
    assert re.search(r"UDP\s+port 8888", DOC)
    assert "**128 bytes**" in DOC and "**1024 bytes**" in DOC
