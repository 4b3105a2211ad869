"""One workload on every client host of a deployment at once, on one timeline, judged as one history.

Each client host runs a workload generator (:mod:`dcnet.bench_runner` ``--serve``).  The first loads the
keys; then all start the timed phase at the same ``CLOCK_MONOTONIC`` instant (every network namespace of
the machine shares that clock), each writing values under a run tag of its own and recording its history;
the launcher merges the seconds as they come and, at the end, judges the merged histories with the
staleness oracle (:func:`loadgen.workload.merge_reports`): a read on one host of a value another
host's acknowledged write superseded is stale, whichever client rack's leaf each went through.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from dcnet.errors import DeploymentError
from dcnet.sessions import WorkloadSession
from distcache.cluster import Host
from loadgen.merge import merge_reports, merge_seconds

START_DELAY_S = 0.5  # from sending the timed phase to its common start: every generator has read its line by then


def bench_everywhere(dep: object, config: dict, hosts: list[Host] | None = None) -> Iterator[dict]:
    """Yield what :meth:`Deployment.bench` yields (``load``, ``second`` and a last ``report`` message), for
    the workload ``config`` on every client host (``hosts``: a subset) at once; each ``second`` is every
    host's, summed, and the report is the merged one, its reads judged over every host's history."""
    hosts = hosts or dep.cluster.clients()  # type: ignore[attr-defined]
    run_dir: Path = dep.run_dir  # type: ignore[attr-defined]
    tag = config.get("run_tag") or os.urandom(3).hex()
    sessions: list[WorkloadSession] = [dep.workload_session(h) for h in hosts]  # type: ignore[attr-defined]
    histories = [run_dir / f"history-{h.name}.jsonl" for h in hosts]
    tags = [f"{tag}{i}" for i in range(len(hosts))]
    load_tag = f"{tag}L"
    try:
        if config.get("load", True):
            load_history = run_dir / "history-load.jsonl"
            events: queue.Queue = queue.Queue()
            loading = {"ops": 0, "duration": None, "run_tag": load_tag, "record": str(load_history), "verify": False}
            sessions[0].run(
                {**config, **loading},
                on_line=events.put,
            )
            while not events.empty():
                if (msg := events.get())["type"] == "load":
                    yield msg
            histories.append(load_history)
        timed = {**config, "load": False, "verify": False, "start_at": time.monotonic_ns() + int(START_DELAY_S * 1e9)}
        lines: queue.Queue = queue.Queue()
        reports: list[dict | None] = [None] * len(hosts)
        failures: list[str] = []

        def one(i: int) -> None:
            try:
                reports[i] = sessions[i].run(
                    {**timed, "run_tag": tags[i], "record": str(histories[i])}, on_second=lambda s: lines.put((i, s))
                )
            except DeploymentError as e:
                failures.append(f"{hosts[i].name}: {e}")
            finally:
                lines.put((i, None))

        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(hosts))]
        for t in threads:
            t.start()
        pending: dict[int, dict[int, dict]] = {}  # t -> host -> that host's second
        running = set(range(len(hosts)))
        while running:
            i, msg = lines.get()
            if msg is None:
                running.discard(i)
            else:
                pending.setdefault(msg["t"], {})[i] = msg
            for t in sorted(pending):  # a second is complete once every host still running has reported it
                if not running <= set(pending[t]):
                    break
                yield merge_seconds(list(pending.pop(t).values()))
        for t in threads:
            t.join()
        if failures or any(r is None for r in reports):
            raise DeploymentError("; ".join(failures) or "a workload generator ended without a report")
        yield {"type": "report", **merge_reports(reports, histories, [*tags, load_tag])}  # type: ignore[arg-type]
    finally:
        for s in sessions:
            s.close()
