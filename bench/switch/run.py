"""The switch benchmark's run and command line: the targets there are to measure, the namespace, each target in
turn (start, configure, measure every path, profile), the teardown that runs whatever happens (Ctrl-C and
SIGTERM included), the summary."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from bench.switch import limit
from bench.switch.bed import SwitchBed
from bench.switch.config import (
    BMV2_JSON,
    BMV2_P4INFO,
    IN_PORT,
    LEAF,
    LIMIT,
    OFFER_FACTOR,
    PORTS,
    REPO,
    SENDER_CPU,
    SERVER,
    SERVER_PORT,
    SPINE_PORTS,
    START_RATE,
    VALUE,
    WARMUP,
    SetupError,
    err,
)
from bench.switch.frames import Frames, build_frames
from bench.switch.measure import PathResult, run_path, shared
from bench.switch.namespace import Namespace
from bench.switch.profile import profile_hits
from bench.switch.report import figures, render, summary_lines
from harness.switch import BMV2_COMPILER, BMV2_FAST_SWITCH, BMV2_SWITCH, TARGETS, bmv2_binary, how_to_get


def bench_target(
    target: str, ns: Namespace, frames: Frames, args: argparse.Namespace, workdir: Path, progress: Progress
) -> dict:
    """Start, configure and measure one target: its figures per path (and its profile with --profile)."""
    bed = limit.Turnaround(progress) if target == LIMIT else SwitchBed(target, ns, workdir, progress)
    try:
        t0 = time.monotonic()
        bar = progress.add_task(f"{target}: start and configure", total=None)
        bed.start()
        bed.configure(frames)
        progress.update(bar, total=1, completed=1)
        err.log(
            f"{target} (pid {bed.proc.pid}) up and configured as sl0 in {time.monotonic() - t0:.1f} s"
            if bed.proc
            else f"{target}: the turnaround program on bsw{IN_PORT}'s ingress, turning reads out of bsw{SPINE_PORTS[0]}"
        )
        results: dict[str, PathResult] = {}
        rate = START_RATE
        for path in bed.paths:
            results[path], cap = run_path(bed, path, frames, args.seconds, rate)
            rate = max(START_RATE, cap / 2)
            r = results[path]
            err.log(
                f"{target} {path}: {r.pps:,.0f} pkt/s delivered of {r.offered_pps:,.0f} offered, "
                f"{r.refused_pps:,.0f} refused (CPU %: switch "
                + ("-" if r.switch_cpu_percent is None else f"{r.switch_cpu_percent:.0f}")
                + f", sender {r.sender_cpu_percent:.0f}, kernel "
                f"{r.softirq_cpu_percent:.0f}, others {r.others_cpu_percent:.0f}, steal {r.steal_cpu_percent:.0f})"
                + (" [yellow]the machine is shared: this figure is low[/]" if shared(asdict(r)) else "")
            )
        out: dict = {"pid": bed.proc.pid if bed.proc else None, "paths": {k: asdict(v) for k, v in results.items()}}
        if args.profile and target == "softswitch":
            out["profile"] = profile_hits(bed, frames, args, results["hit"])
        return out
    except Exception as e:
        if isinstance(e, SetupError) or bed.proc is None or bed.proc.poll() is None:
            raise
        # a P4Runtime call failed because the switch is gone: say that
        raise SetupError(
            f"{target} exited with code {bed.proc.returncode} during the run (`make clean` and "
            "dcnet.cleanup stop every softswitch and simple_switch_grpc on the machine)\n" + bed.logs()
        ) from e
    finally:
        bed.close()


def _sigterm(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """A second Ctrl-C or SIGTERM must not cut the teardown short."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old[0])
        signal.signal(signal.SIGTERM, old[1])


def run(args: argparse.Namespace, targets: list[str]) -> dict:
    """The whole run in its own namespace, deleted at the end whatever happens: the figure of every target."""
    frames = build_frames()
    ns = Namespace(PORTS)
    fig: dict = {"targets": {}}
    steering = ""
    with tempfile.TemporaryDirectory(prefix="bench-switch-") as tmp:
        try:
            ns.create()
            ns.enter()  # before any thread: gRPC's and rich's threads are created inside
            steering = ns.steer_rx(SENDER_CPU)
            err.log(
                f"namespace {ns.name}: veth pairs "
                + ", ".join(f"bsw{p}/bpt{p}" for p in PORTS)
                + f"; the switch plays {LEAF.name} (id {LEAF.switch_id}): port {SERVER_PORT} server "
                f"{SERVER.ip}, ports {SPINE_PORTS[0]}, {SPINE_PORTS[1]} spines; load offered on port {IN_PORT} "
                "by build/pktsend" + (f" on core {SENDER_CPU}; {steering} (RPS)" if steering else "")
            )
            with Progress(
                TextColumn("{task.description:<60}"), BarColumn(), TimeElapsedColumn(), console=err, transient=False
            ) as progress:
                for target in targets:
                    try:
                        fig["targets"][target] = bench_target(target, ns, frames, args, Path(tmp), progress)
                    except SetupError as e:
                        raise SetupError(f"{target}: {e}") from None
        finally:
            with interrupts_deferred():
                ns.delete()
            if args.keep_logs:
                shutil.copytree(tmp, args.keep_logs, dirs_exist_ok=True)
    figures(fig)
    fig["config"] = {
        "seconds": args.seconds,
        "cpus": os.cpu_count(),
        "warmup_seconds": WARMUP,
        "offer_factor": OFFER_FACTOR,
        "loadavg_before": [round(x, 2) for x in args.loadavg],
        "hit_value_bytes": len(VALUE),
        "frame_bytes": {p: len(f) for p, f in frames.paths.items()},
        "bmv2_binary": bmv2_binary(None),  # the fast build where installed (harness.switch.bmv2_binary)
        "sender": "build/pktsend",
        "rx_steering": steering,
    }
    if "softswitch" in fig["targets"] and "profile" in fig["targets"]["softswitch"]:
        fig["profile"] = fig["targets"]["softswitch"].pop("profile")  # None: py-spy missing or wrote nothing
    return fig


def check_targets(choice: str | None) -> list[str]:
    """The targets to measure for ``--target``.  By default (``all``) every one whose tools are here, in order
    softswitch, BMv2, ebpf, the limit; each one missing is skipped with one line saying why.  Named, a target
    missing its tools is an error (SetupError, one line)."""
    if choice == "softswitch":
        return ["softswitch"]
    if choice in (None, "all"):
        targets = ["softswitch"]
        for target in ("bmv2", "ebpf", LIMIT):
            if why := _missing(target):
                err.log(f"[yellow]{target} skipped: {why}[/]")
            else:
                targets.append(target)
    else:
        targets = ["softswitch", "bmv2"] if choice == "both" else [choice]
        for target in targets:
            if why := _missing(target):
                raise SetupError(f"--target {choice}" + (f": {target} " if target != choice else " ") + why)
    if "bmv2" in targets and bmv2_binary(None) != BMV2_FAST_SWITCH:
        err.log(
            f"[yellow]{BMV2_FAST_SWITCH} is not on PATH: BMv2 is measured as its logging build {BMV2_SWITCH}, "
            "several times slower (a build without its logging macros, where installed, is the fast one)[/]"
        )
    return targets


def _missing(target: str) -> str | None:
    """What ``target`` needs that is not here ("needs ...", one line), or None."""
    if target == "bmv2":
        if not all(shutil.which(b) for b in (BMV2_SWITCH, BMV2_COMPILER)):
            return how_to_get([b for b in (BMV2_SWITCH, BMV2_COMPILER) if not shutil.which(b)])
        if not (BMV2_JSON.exists() and BMV2_P4INFO.exists()):
            return f"needs {BMV2_JSON.relative_to(REPO)} and {BMV2_P4INFO.relative_to(REPO)}: run make build"
    elif target == "ebpf":
        from softswitch.ebpf.build import missing_tools

        if missing := missing_tools():
            return how_to_get(missing)
    elif target == LIMIT:
        return limit.missing()
    return None


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.switch``: the exit status (0 done, 1 failed, 130 interrupted)."""
    ap = argparse.ArgumentParser(
        prog="python -m bench.switch", description=(sys.modules["bench.switch"].__doc__ or "").splitlines()[0]
    )
    ap.add_argument("--seconds", type=float, default=3.0, help="measured window per path (default 3)")
    ap.add_argument(
        "--target",
        choices=[*TARGETS, LIMIT, "both", "all"],
        default=None,
        help="what to measure: one target; both = softswitch and BMv2; limit = the veths' ceiling alone "
        "(default: all = softswitch, BMv2, ebpf and the limit, each one whose tools are here)",
    )
    ap.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="sample softswitch with py-spy during one more hit run; raw stacks and summary to DIR",
    )
    ap.add_argument("--keep-logs", type=Path, metavar="DIR", help="copy the switches' logs here")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout instead of the lines")
    args = ap.parse_args(argv)
    if args.seconds <= 0:
        ap.error("--seconds must be > 0")
    args.loadavg = os.getloadavg()
    signal.signal(signal.SIGTERM, _sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started in the background (SIG_IGN)
    try:
        if os.geteuid() != 0:
            raise SetupError("run as root: the harness creates a network namespace and veth pairs")
        for tool in ("ip", "ethtool", "sysctl"):
            if shutil.which(tool) is None:
                raise SetupError(f"{tool} is not installed")
        fig = run(args, check_targets(args.target))
    except KeyboardInterrupt:
        err.print("[red]interrupted: switch stopped, namespace deleted[/]")
        return 130
    except (SetupError, OSError, EOFError, subprocess.SubprocessError) as e:  # EOFError: the sender died
        err.print(f"[red]bench-switch failed:[/] {e}")
        return 1
    except Exception as e:  # a P4Runtime error, say: the teardown ran, say what went wrong
        if type(e).__name__ != "P4RuntimeError":
            raise
        err.print(f"[red]bench-switch failed:[/] {e}")
        return 1
    lines = summary_lines(fig)
    if args.json:
        print(json.dumps(fig | {"summary": lines}))
    else:
        render(fig, Console(stderr=True, width=max(160, err.width)))
        for line in lines:
            print(line)
    return 0
