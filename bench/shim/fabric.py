"""Read latency through the fabric as a Mininet host sees it (root; ``--no-switch`` skips it): a small
deployment (dcnet.deploy) warms its caches with a Zipf-0.99 workload, then one client reads sequentially, so
a hit (answered by a switch) and a miss (the shim and Redis) are round trips, not queueing."""

from __future__ import annotations

import tempfile
from pathlib import Path

from rich.progress import Progress

from bench.shim.latency import Latency
from distcache.cluster import Cluster

# The switch phase's deployment: small enough for 2 cores, big enough that hits and misses both happen.
SWITCH_CLUSTER = Cluster(
    spines=2, storage_racks=2, client_racks=1, cache_slots=16, hh_threshold=4, insert_rate=20.0, insert_burst=20
)
SWITCH_KEYS = 2000


def switch_latency(seconds: float, progress: Progress) -> dict[str, Latency]:
    """Read latency of cache hits and misses as a client in a Mininet host sees them (module docstring)."""
    from dcnet.deploy import Deployment  # Mininet: imported only when this phase runs

    base = {"keys": SWITCH_KEYS, "zipf": 0.99, "read_ratio": 1.0, "value_size": 32, "load_keys": SWITCH_KEYS}
    bar = progress.add_task("switch path: hits vs misses", total=2)
    with (
        tempfile.TemporaryDirectory(prefix="bench-shim-net-") as run_dir,
        Deployment(SWITCH_CLUSTER, run_dir=Path(run_dir)) as dep,
    ):
        client = SWITCH_CLUSTER.client(0, 0)
        for _ in dep.bench(client, {**base, "concurrency": 8, "duration": 6}):  # fills the caches
            pass
        progress.update(bar, completed=1)
        report = None
        for msg in dep.bench(client, {**base, "concurrency": 1, "duration": seconds, "load": False}):
            report = msg if msg["type"] == "report" else report
        progress.update(bar, completed=2)
    if report is None or report["error_count"]:
        raise RuntimeError(f"the switch-path workload failed: {report and report['errors']}")
    lat = report["latency_us"]
    if not lat["hit"]["count"] or not lat["miss"]["count"]:
        raise RuntimeError(f"the switch-path workload saw no {'hit' if not lat['hit']['count'] else 'miss'}")
    return {kind: Latency(lat[kind]["p50"], lat[kind]["p99"], lat[kind]["count"]) for kind in ("hit", "miss")}
