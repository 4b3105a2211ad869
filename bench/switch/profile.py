"""Where softswitch's time goes during cache hits (``--profile DIR``): py-spy samples it, without stopping
it (``--nonblocking``: stopping it for each sample cut its rate by two thirds), during one more hit run after
the measured one, so the figures stay unperturbed; torn stacks are left out (harness.profile)."""

from __future__ import annotations

import argparse
import json
import subprocess

from bench.pyspy import py_spy, record_argv
from bench.switch.bed import SwitchBed
from bench.switch.config import PROFILE_RATE, PROFILE_SECONDS, START_RATE, err
from bench.switch.frames import Frames
from bench.switch.measure import PathResult, run_path
from harness.profile import summarize_profile


def profile_text(prof: dict) -> str:
    """summary.txt: the profile's figures as plain text."""
    lines = [
        f"softswitch main thread during cache hits: {prof['samples']} py-spy samples "
        f"({prof['rate']} Hz, --nonblocking; {prof['torn_samples']} torn stacks left out; "
        f"{prof['pps']:,.0f} pkt/s while sampled)",
        "",
    ]
    for title, key in (
        ("own %", "own_percent"),
        ("inclusive %", "inclusive_percent"),
        ("own % by file", "own_percent_by_file"),
    ):
        lines.append(f"{title}:")
        lines += [f"  {v:5.1f}  {k}" for k, v in prof[key].items()]
        lines.append("")
    return "\n".join(lines)


def profile_hits(bed: SwitchBed, frames: Frames, args: argparse.Namespace, hit: PathResult) -> dict | None:
    """One more hit run with py-spy sampling softswitch (``--profile``): raw stacks and a summary to the
    profile folder; the summary, or None when py-spy is missing or wrote nothing."""
    spy = py_spy()
    if spy is None:
        err.log("[yellow]--profile needs py-spy (.venv/bin/pip install py-spy); no profile[/]")
        return None
    assert bed.proc is not None
    pid = bed.proc.pid
    args.profile.mkdir(parents=True, exist_ok=True)
    raw = args.profile / "softswitch-hit.raw.txt"
    raw.unlink(missing_ok=True)
    spy_out = bed.workdir / "py-spy.out"
    seconds = max(args.seconds, PROFILE_SECONDS)

    def start() -> subprocess.Popen:
        with open(spy_out, "wb") as f:
            return subprocess.Popen(
                record_argv(spy, pid, raw, PROFILE_RATE, seconds, nonblocking=True),
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    # one more hit run, sampled: the measured one stays unperturbed (py-spy takes CPU beside the switch)
    res, _ = run_path(bed, "hit", frames, seconds, max(START_RATE, hit.pps / 2), during=start)
    if not raw.exists() or not raw.stat().st_size:
        err.log(f"[yellow]py-spy wrote no profile: {spy_out.read_text(errors='replace')[-500:]}[/]")
        return None
    prof = summarize_profile(raw, top=20) | {"raw": str(raw), "rate": PROFILE_RATE, "pps": res.pps}
    (args.profile / "summary.json").write_text(json.dumps(prof, indent=2) + "\n")
    (args.profile / "summary.txt").write_text(profile_text(prof))
    err.log(f"profile of softswitch hits: {raw} and {args.profile / 'summary.txt'}")
    return prof
