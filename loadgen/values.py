"""The workload's keys and values: the key of a Zipf rank, and values that say which key, run and write they
are (``<key>#<run>#<n>#`` padded with ``.``), so that the staleness oracle can judge every read."""

from __future__ import annotations

from collections.abc import Collection

from loadgen.oracle import Initial


def key_of(rank: int, prefix: str = "key") -> str:
    return f"{prefix}{rank}"


def make_value(key: str, run: str, n: int, size: int) -> bytes:
    head = f"{key}#{run}#{n}#".encode()
    return head + b"." * (size - len(head)) if len(head) < size else head


def parse_value(value: bytes) -> tuple[str, str, int] | None:
    """(key, run, n) of a well-formed workload value, else None (padding is not checked here)."""
    parts = value.split(b"#", 3)
    if len(parts) != 4 or not parts[2].isdigit():
        return None
    try:
        return parts[0].decode(), parts[1].decode(), int(parts[2])
    except (UnicodeDecodeError, ValueError):
        return None


def earlier_runs(run_tags: Collection[str]) -> Initial:
    """What a key may hold before a run whose writers tag their values ``run_tags`` (read when judging, so
    tags added later count): nothing, or a well-formed value of the key from another run (any value size,
    padded with dots)."""

    def initial(key: object, value: object) -> bool:
        if value is None:
            return True
        raw = value.encode("latin-1") if isinstance(value, str) else value
        if not isinstance(raw, bytes):
            return False
        p = parse_value(raw)
        return p is not None and p[0] == key and p[1] not in run_tags and raw.rstrip(b".") == make_value(*p, 0)

    return initial


def history_value(value: bytes | None) -> str | None:
    """A value as a history line carries it (every byte one character, so it reads back unchanged)."""
    return None if value is None else value.decode("latin-1")
