"""The README is what a newcomer reads first: short, with no line too long to read, and everything it names real --
each make target it mentions exists, each path it names is in the checkout, and `make help` lists every target."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PROSE_WIDTH = 120
MAX_BYTES = 12 * 1024
OUTPUTS = {"build/", "runs/"}  # folders a run creates, named as where to look afterwards


def makefile_targets() -> set[str]:
    """The targets the Makefile defines by name (not its file targets)."""
    text = (REPO / "Makefile").read_text()
    return {m.group(1) for m in re.finditer(r"^([a-z][a-z-]*):(?!=)", text, re.M)}


def code_spans(text: str) -> list[str]:
    """Every `inline code` span and every line of a fenced block."""
    fenced = re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M)
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))
    return inline + [line for block in fenced for line in block.splitlines()]


def test_the_readme_is_short_and_no_prose_line_is_too_long() -> None:
    text = README.read_text()
    assert len(text.encode()) < MAX_BYTES, f"README.md is {len(text.encode())} bytes: move detail to docs/"
    fenced = set(re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M))
    in_blocks = {line for block in fenced for line in block.splitlines()}
    long = [line for line in text.splitlines() if len(line) > PROSE_WIDTH and line not in in_blocks]
    assert long == [], long


def test_every_make_target_the_readme_names_exists() -> None:
    named = {m for span in code_spans(README.read_text()) for m in re.findall(r"\bmake ([a-z][a-z-]*)", span)}
    assert {"run", "test", "help"} <= named
    assert named - makefile_targets() == set(), f"README names targets the Makefile lacks: {named - makefile_targets()}"


def test_every_path_the_readme_names_exists() -> None:
    text = README.read_text()
    candidates = set(re.findall(r"(?<![\w./<-])((?:[\w.-]+/)+[\w.<>-]*)", text))
    candidates |= set(re.findall(r"\]\(\s*([^)\s]+)\)", text))  # link and image targets
    paths = {c.rstrip(".,:;") for c in candidates if not c.startswith(("http", "//")) and "<" not in c}
    paths = {p for p in paths if not re.fullmatch(r"[a-z]+/s", p)} - OUTPUTS  # not units (ops/s)
    assert len(paths) >= 20, sorted(paths)  # the reader found the README's paths, not nothing
    missing = sorted(p for p in paths if not (REPO / p.rstrip("/")).exists())
    assert missing == [], f"README names paths that do not exist: {missing}"


def test_make_help_lists_every_target_with_one_line() -> None:
    out = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, timeout=30, check=True)
    listed = re.findall(r"^  make ([a-z][a-z-]*) +\S", out.stdout, re.M)
    assert len(listed) == len(set(listed)), listed
    assert set(listed) == makefile_targets(), f"not in make help: {makefile_targets() - set(listed)}"
    variables = re.findall(r"^  ([A-Z_0-9]+) +\S", out.stdout, re.M)
    assert {"TARGET", "TOPO", "SWITCH_LOG", "PCAP", "SEED"} <= set(variables), variables
    assert "(default softswitch)" in out.stdout
