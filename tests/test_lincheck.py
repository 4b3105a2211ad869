"""tools/lincheck: the Go linearizability checker, run as a binary on small JSON Lines histories.

The binary is built with `go build` into a temporary directory; without `go` on PATH the one
`make deps` left in build/lincheck is used, and the module is skipped when neither exists.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "tools" / "lincheck"
PREBUILT = REPO / "build" / "lincheck"


@pytest.fixture(scope="module")
def lincheck(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None:
        if PREBUILT.is_file():
            return PREBUILT
        pytest.skip("no `go` on PATH and no build/lincheck: install golang-go (make deps) to test tools/lincheck")
    out = tmp_path_factory.mktemp("lincheck") / "lincheck"
    proc = subprocess.run([go, "build", "-buildvcs=false", "-o", str(out), "."], cwd=SRC, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, f"go build failed:\n{proc.stderr}"
    return out


def op(client: int, key: str, kind: str, value: str | None, call: int, ret: int | None) -> dict[str, object]:
    return {"client": client, "key": key, "op": kind, "value": value, "call": call, "return": ret}


def check(lincheck: Path, tmp_path: Path, lines: list[dict[str, object] | str]) -> subprocess.CompletedProcess[str]:
    """Write `lines` (dicts as JSON, strings verbatim) as a history and run lincheck on it."""
    history = tmp_path / "history.jsonl"
    history.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return subprocess.run([str(lincheck), "--history", str(history), "--timeout", "60s"],
                          capture_output=True, text=True, timeout=90)


def test_linearizable_history(lincheck: Path, tmp_path: Path) -> None:
    proc = check(lincheck, tmp_path, [
        op(0, "k", "put", "a", 0, 100),
        op(1, "k", "get", None, 10, 20),     # overlaps the put: may still see the key absent
        op(2, "k", "get", "a", 50, 60),      # overlaps the put: may already see it
        op(1, "k", "get", "a", 150, 160),
        op(0, "k", "put", "b", 200, None),   # timed out: may take effect later, or never
        op(2, "k", "get", "a", 300, 310),
        op(1, "k", "get", "b", 400, 410),
    ])
    assert (proc.returncode, proc.stdout) == (0, "ops=7 violations=0\n"), proc.stderr
    assert proc.stderr == ""


def test_stale_read_after_acknowledged_write(lincheck: Path, tmp_path: Path) -> None:
    proc = check(lincheck, tmp_path, [
        op(0, "k", "put", "a", 0, 10),
        op(0, "k", "put", "b", 20, 30),      # acknowledged before the read below began
        op(1, "k", "get", "a", 40, 50),
    ])
    assert (proc.returncode, proc.stdout) == (1, "ops=3 violations=1\n"), proc.stderr
    assert proc.stderr == "violation key=k ops=3\n"


def test_two_keys_one_bad(lincheck: Path, tmp_path: Path) -> None:
    proc = check(lincheck, tmp_path, [
        op(0, "good", "put", "1", 0, 10),
        op(1, "good", "get", "1", 20, 30),
        op(0, "bad", "put", "1", 0, 10),
        op(0, "bad", "delete", None, 20, 30),
        op(1, "bad", "get", "1", 40, 50),    # deleted before the read began
        op(2, "good", "get", None, 5, None),  # unknown outcome get: skipped, not counted
    ])
    assert (proc.returncode, proc.stdout) == (1, "ops=5 violations=1\n"), proc.stderr
    assert proc.stderr == "violation key=bad ops=3\n"


def test_malformed_line(lincheck: Path, tmp_path: Path) -> None:
    proc = check(lincheck, tmp_path, [op(0, "k", "put", "a", 0, 10), "", '{"client": 1, "key": "k", "op": "get"'])
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "line 3" in proc.stderr
