"""``make bench-switch``'s harness (bench/switch/) runs end to end, reports its figures and cleans up.

Why: the harness builds a network namespace with veth pairs, starts a switch
in it, configures it over P4Runtime and checks every path against the switch's
own counters; a short run catches a broken path (a hit that stopped being
answered, a miss no longer counted), a summary line that changed shape, and a
teardown that leaves a namespace or a switch process behind.  No speed
threshold is asserted: the machine is shared and figures are only comparable
as ratios on one machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.switch import BMV2_JSON, BMV2_P4INFO, py_spy

ROOT = Path(__file__).resolve().parents[2]
SOFTSWITCH_LINE = re.compile(r"hit_pps=(\d+) miss_pps=(\d+) fwd_pps=(\d+)")
BMV2_LINE = re.compile(r"bmv2_hit_pps=(\d+) bmv2_miss_pps=(\d+) bmv2_fwd_pps=(\d+)")

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the harness creates a network namespace"),
]


def bench_switch_processes() -> list[str]:
    """Command lines of switches attached to the harness's interfaces (bsw<N>: no other part uses the name)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "@bsw" in cmd:
                found.append(f"{d.name}: {cmd}")
    return found


def run_harness(*args: str, timeout: float = 100) -> tuple[subprocess.CompletedProcess, int]:
    """Run the harness; (result, its pid: the namespace is dcbench-<pid>)."""
    assert not bench_switch_processes(), "another bench-switch run is under way"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.switch", "--seconds", "1", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # the harness tears down on SIGTERM
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"bench.switch took more than {timeout}s:\n{err[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def assert_cleaned_up(pid: int) -> None:
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"dcbench-{pid}" not in namespaces, namespaces
    assert not bench_switch_processes(), bench_switch_processes()


def test_softswitch_paths_measured_and_torn_down(tmp_path: Path) -> None:
    profile = ["--profile", str(tmp_path / "profile")] if py_spy() else []
    res, pid = run_harness("--target", "softswitch", *profile)
    assert_cleaned_up(pid)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1, res.stdout  # only the summary on stdout; tables and progress go to stderr
    m = SOFTSWITCH_LINE.fullmatch(lines[0])
    assert m, lines[0]
    assert all(int(x) > 0 for x in m.groups()), lines[0]
    assert "softswitch / BMv2" not in res.stderr  # one target: no ratio column
    if profile:
        summary = json.loads((tmp_path / "profile" / "summary.json").read_text())
        assert summary["samples"] > 0 and summary["own_percent"] and summary["inclusive_percent"]
        assert (tmp_path / "profile" / "softswitch-hit.raw.txt").stat().st_size > 0


@pytest.mark.bmv2
@pytest.mark.skipif(
    shutil.which("simple_switch_grpc") is None or shutil.which("p4c-bm2-ss") is None,
    reason="needs simple_switch_grpc and p4c-bm2-ss on PATH",
)
@pytest.mark.skipif(not (BMV2_JSON.exists() and BMV2_P4INFO.exists()), reason="needs make build (BMv2 JSON)")
def test_both_targets_side_by_side() -> None:
    res, pid = run_harness("--target", "both", "--json")
    assert_cleaned_up(pid)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1, res.stdout  # --json: one object, nothing else
    fig = json.loads(lines[0])
    soft, bmv2 = fig["summary"]
    assert SOFTSWITCH_LINE.fullmatch(soft) and BMV2_LINE.fullmatch(bmv2), fig["summary"]
    for path in ("hit", "miss", "fwd"):
        assert fig[f"{path}_pps"] > 0 and fig[f"bmv2_{path}_pps"] > 0, path
        assert fig["ratio"][path] > 0, path
        for target in ("softswitch", "bmv2"):
            r = fig["targets"][target]["paths"][path]
            assert r["offered_pps"] > 0 and r["delivered_total"] > 0, (target, path, r)
    assert fig["targets"]["softswitch"]["paths"]["hit"]["counter_deltas"]["READ_HIT"] > 0
    assert fig["targets"]["bmv2"]["paths"]["miss"]["counter_deltas"]["READ_MISS"] > 0
