"""py-spy for the benchmarks' ``--profile``: where it is, and the one ``record`` command line both use (raw
collapsed stacks of every thread, which harness.profile sums up for the main thread)."""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path


def py_spy() -> str | None:
    """The py-spy beside this interpreter (the venv's), else the one on PATH, else None."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def record_argv(spy: str, pid: int, out: Path, rate: int, seconds: float, *, nonblocking: bool = False) -> list[str]:
    """Sample process ``pid`` at ``rate`` Hz into ``out`` (raw format).  The caller stops it with SIGINT when
    its window closes (py-spy then writes what it sampled); ``-d`` (``seconds`` + 10) is only a backstop.
    ``nonblocking``: read the stacks without stopping the process (cheaper, some stacks come out torn)."""
    return [
        spy,
        "record",
        "--threads",
        *(["--nonblocking"] if nonblocking else []),
        "-r",
        str(rate),
        "-f",
        "raw",
        "-d",
        str(math.ceil(seconds) + 10),
        "-o",
        str(out),
        "-p",
        str(pid),
    ]
