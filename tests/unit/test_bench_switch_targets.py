"""bench.switch's targets and summary: each ``--target`` name measures that target, never another one in its
place; by default every target whose tools are here, in a fixed order, each missing one skipped with one line
saying why; the stdout summary keeps its keys (``hit_pps``, ``bmv2_*``, ``ebpf_*``) and adds ``limit_pps``,
with the kernel target's ratios to softswitch and to the limit."""

from __future__ import annotations

import re

import pytest

from bench.switch import limit
from bench.switch.config import PATHS, REPO, SetupError
from bench.switch.measure import limited_by
from bench.switch.report import figures, ratio_line, summary_lines
from bench.switch.run import _missing, check_targets
from softswitch.ebpf import build

ORDER = ["softswitch", "bmv2", "ebpf", "limit"]


def test_softswitch_is_softswitch() -> None:
    assert check_targets("softswitch") == ["softswitch"]


def test_ebpf_is_the_kernel_target_or_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    if not build.missing_tools():
        assert check_targets("ebpf") == ["ebpf"]  # it measured BMv2 in its place before
    monkeypatch.setattr(build, "missing_tools", lambda: ["p4c-ebpf"])
    with pytest.raises(SetupError, match=r"--target ebpf missing from PATH: p4c-ebpf: install p4c as p4lang documents"):
        check_targets("ebpf")


def test_default_is_every_target_whose_tools_are_here_in_order() -> None:
    targets = check_targets(None)
    assert targets == [t for t in ORDER if t == "softswitch" or _missing(t) is None]
    assert ("ebpf" in targets) == (not build.missing_tools())
    assert ("limit" in targets) == (limit.missing() is None)
    assert check_targets("all") == targets


def test_a_missing_target_is_skipped_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(limit, "OBJECT", REPO / "build" / "no-such-turnaround.bpf.o")
    targets = check_targets(None)
    assert "limit" not in targets and targets[0] == "softswitch"
    said = [line for line in capsys.readouterr().err.splitlines() if "limit skipped" in line]
    assert len(said) == 1 and "needs build/no-such-turnaround.bpf.o: run make deps" in said[0], said
    with pytest.raises(SetupError, match=re.escape("--target limit needs build/no-such-turnaround.bpf.o")):
        check_targets("limit")


def _measured(targets: dict[str, dict[str, float]]) -> dict:
    """A run's figure as bench.switch.run assembles it, from delivered pkt/s per target and path."""
    fig = {"targets": {t: {"paths": {p: {"pps": v} for p, v in paths.items()}} for t, paths in targets.items()}}
    figures(fig)
    return fig


def test_summary_keys_of_all_targets_and_the_ratios() -> None:
    pps = {
        "softswitch": {"hit": 25_150.4, "miss": 22_000.6, "fwd": 30_000.0},
        "bmv2": {"hit": 16_000.0, "miss": 15_000.0, "fwd": 20_000.0},
        "ebpf": {"hit": 431_838.0, "miss": 339_945.0, "fwd": 545_540.0},
        "limit": {"hit": 700_000.0},
    }
    fig = _measured(pps)
    lines = summary_lines(fig)
    assert lines == [
        " ".join(f"{prefix}{p}_pps={round(pps[t][p])}" for p in PATHS)
        for t, prefix in (("softswitch", ""), ("bmv2", "bmv2_"), ("ebpf", "ebpf_"))
    ] + [f"limit_pps={round(pps['limit']['hit'])}"]
    assert lines[0].startswith("hit_pps=25150 miss_pps=22001 ")  # softswitch's keys unprefixed, as before
    hit = pps["ebpf"]["hit"]
    assert fig["ratios"] == {
        "ebpf_hit/softswitch_hit": round(hit / round(pps["softswitch"]["hit"]), 3),
        "ebpf_hit/limit": round(hit / pps["limit"]["hit"], 3),
    }
    assert fig["ratio"]["hit"] == round(round(pps["softswitch"]["hit"]) / pps["bmv2"]["hit"], 2)
    line = ratio_line(fig)
    assert line is not None and "ebpf_hit/softswitch_hit=" in line and "ebpf_hit/limit=" in line


def test_summary_of_softswitch_and_bmv2_has_no_kernel_keys() -> None:
    fig = _measured({t: dict.fromkeys(PATHS, 1000.0) for t in ("softswitch", "bmv2")})
    lines = summary_lines(fig)
    assert len(lines) == 2 and lines[1].startswith("bmv2_hit_pps=1000")
    assert fig["ratios"] == {} and "limit_pps" not in fig and "ebpf_hit_pps" not in fig


def test_who_limited_a_path() -> None:
    # the sender: it offered little more than came out, nothing was refused, the switch's core had time left
    assert limited_by(offered=100_000, refused=0, delivered=98_000, switch_core_busy=60.0) == "the sender"
    assert limited_by(offered=100_000, refused=0, delivered=98_000, switch_core_busy=None) == "the sender"
    # the switch: its input refused frames (its backlog was full), it delivered far less than it was offered, or
    # the core its receive work ran on was busy all the window
    assert limited_by(offered=100_000, refused=10_000, delivered=98_000, switch_core_busy=60.0).startswith("switch")
    assert limited_by(offered=300_000, refused=0, delivered=100_000, switch_core_busy=60.0).startswith("switch")
    assert limited_by(offered=100_000, refused=0, delivered=98_000, switch_core_busy=99.0).startswith("switch")
