"""`make run`'s per-second rows: a header with units before the first row and every 20 rows, as vmstat
prints its own, with each value under its column's name."""

from __future__ import annotations

from dcnet.demo import Progress


def row(t: int) -> list[str]:
    return [str(t), "1,234", "0.52", "98.7", "100", "7", str(40 + t)]


def test_a_header_comes_before_the_first_row_and_every_twenty_rows() -> None:
    p = Progress(["sl0", "sp0"])
    printed = [line for t in range(1, 46) for line in p.lines(row(t))]
    headers = [i for i, line in enumerate(printed) if line.split()[0] == "sec"]
    assert headers == [0, 21, 42], headers
    assert len(printed) == 45 + 3
    assert printed[0].split() == ["sec", "ops/s", "hit", "ratio", "read", "p99", "ms", "sl0", "keys", "sp0", "keys",
                                  "auto-cached"]  # fmt: skip


def test_each_value_ends_where_its_columns_name_ends() -> None:
    p = Progress(["sl0", "sp0"])
    header, first = p.lines(row(1))
    names = ["sec", "ops/s", "hit ratio", "read p99 ms", "sl0 keys", "sp0 keys", "auto-cached"]
    ends = [header.index(n) + len(n) for n in names]
    pos = 0
    for value, end in zip(row(1), ends, strict=True):
        pos = first.index(value, pos)
        assert pos + len(value) == end, (value, header, first)
        pos += len(value)
