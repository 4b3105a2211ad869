"""Which deployments are running on this machine, and what each started: what ``make clean`` may stop.

``make clean`` is for a run whose launcher was killed (SIGKILL, a closed terminal) before its teardown.  It
used to kill every process whose command line matched a pattern and to run Mininet's global cleanup, which
took down any run going on beside it (a second ``make run``, a test session).  Now a run says what it
started, and clean stops only that:

* a deployment registers itself while it runs (:func:`register`: a file under :data:`REGISTRY` naming its
  launcher's pid, start time and run folder, removed by its teardown);
* every process it starts is recorded in its run folder (:func:`record`: ``pids/<name>.<pid>``, pid and
  start time; a switch's own pid file counts too);
* :func:`sweep` stops the recorded processes of every registered run whose launcher is gone (and that
  are still the processes recorded: same start time), and leaves the live runs alone.  The caller runs
  the machine-wide cleanups (Mininet's, leftover links and pins) only when no run is live.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from harness.processes import read_pid_file, start_time, still_the_same, write_pid_file

REGISTRY = Path("/run/distcache/runs")  # tmpfs: a reboot forgets every run, as it ends every process


@dataclass(frozen=True)
class Run:
    """A registered run: its launcher's pid and start time, its run folder, whether the launcher still runs."""

    entry: Path
    pid: int
    run_dir: Path
    live: bool


def register(run_dir: Path, registry: Path = REGISTRY) -> Path:
    """Register the run in ``run_dir``, launched by this process; returns the entry (see :func:`unregister`)."""
    registry.mkdir(parents=True, exist_ok=True)
    entry = registry / str(os.getpid())
    entry.write_text(f"{os.getpid()} {start_time(os.getpid())}\n{run_dir.resolve()}\n")
    return entry


def unregister(entry: Path) -> None:
    entry.unlink(missing_ok=True)


def record(run_dir: Path, name: str, pid: int) -> None:
    """Record a process the run in ``run_dir`` started (``name``: what it is, e.g. ``shim-s0``)."""
    pids = run_dir / "pids"
    pids.mkdir(exist_ok=True)
    write_pid_file(pids / f"{name}.{pid}", pid)


def _same(record_: tuple[int, int | None] | None) -> bool:
    """Whether a recorded process is still the one recorded: its start time is always recorded here, so a
    record without one is not trusted."""
    return record_ is not None and record_[1] is not None and still_the_same(record_)


def runs(registry: Path = REGISTRY) -> list[Run]:
    """Every registered run, live or not (an unreadable entry counts as a run that is gone)."""
    out = []
    for entry in sorted(registry.glob("*")) if registry.is_dir() else []:
        try:
            head, folder = entry.read_text().splitlines()[:2]
            pid, started = (int(x) for x in head.split())
        except (OSError, ValueError):
            out.append(Run(entry, 0, Path(), False))
            continue
        out.append(Run(entry, pid, Path(folder), _same((pid, started))))
    return out


def recorded(run_dir: Path) -> list[tuple[str, int]]:
    """(name, pid) of every process the run in ``run_dir`` recorded that is still the process recorded."""
    files = [*sorted((run_dir / "pids").glob("*")), *sorted(run_dir.glob("*.pid"))]
    out = []
    for f in files:
        rec = read_pid_file(f)
        if _same(rec):
            assert rec is not None
            out.append((f.name.split(".")[0], rec[0]))
    return out


def stop(pid: int) -> None:
    """SIGKILL ``pid``'s process group if it leads one, else the process."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)


def sweep(registry: Path = REGISTRY) -> tuple[list[Run], list[str]]:
    """Stop what every registered run whose launcher is gone recorded, and forget those runs; returns the
    live runs (left alone) and one line per process stopped."""
    live, stopped = [], []
    for run in runs(registry):
        if run.live:
            live.append(run)
            continue
        for name, pid in recorded(run.run_dir) if run.run_dir != Path() else []:
            stop(pid)
            stopped.append(f"{name} (pid {pid}) of {run.run_dir}")
        unregister(run.entry)
    return live, stopped
