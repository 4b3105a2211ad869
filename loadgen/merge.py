"""One workload run on several client hosts at once, on one timeline: each host's seconds and reports merged,
its reads judged over every host's history (docs/protocol.md, "Checking reads")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from pathlib import Path

from loadgen.oracle import Oracle, feed, read_history
from loadgen.values import earlier_runs
from loadgen.workload import percentiles

_SUMMED = ("ops", "reads", "writes", "hits", "misses", "absent", "failed_reads", "failed_writes", "other_run_values")


def merge_seconds(seconds: list[dict]) -> dict:
    """One second of several hosts' workloads (the same ``t``): counts summed, the highest host's p99s."""
    out = {k: sum(s[k] for s in seconds) for k in ("ops", "reads", "hits", "writes", "errors")}
    out.update(
        type="second",
        t=seconds[0]["t"],
        span=max(s["span"] for s in seconds),
        read_p99_us=max(s["read_p99_us"] for s in seconds),
        write_p99_us=max(s["write_p99_us"] for s in seconds),
    )
    out["hit_ratio"] = round(out["hits"] / out["reads"], 4) if out["reads"] else 0.0
    return out


def merge_reports(reports: list[dict], histories: list[Path], tags: Collection[str]) -> dict:
    """The report of one workload run on several client hosts at once (each with ``verify`` off and its
    history in ``histories``; ``tags``: every run tag of the run, a load's included): counts summed, reads
    judged by the oracle over the merged histories, latencies from them."""
    oracle = Oracle(earlier_runs(set(tags)))
    records: list[dict] = []
    for p in histories:
        records += read_history(p)
    feed(oracle, records)
    verdict = oracle.verdict()
    merged: dict = {k: sum(r[k] for r in reports) for k in _SUMMED}
    errors: Counter[str] = Counter()
    for r in reports:
        errors.update(r["errors"])
    for kind in ("stale", "wrong"):
        if getattr(verdict, kind):
            errors[kind] += getattr(verdict, kind)
    lat: dict[str, list[float]] = {"hit": [], "miss": [], "write": []}
    for rec in records:
        if rec["return"] is None or rec.get("error"):
            continue
        what = "write" if rec["op"] != "get" else "hit" if rec.get("served_by") else "miss"
        lat[what].append((rec["return"] - rec["call"]) / 1e9)
    seconds = max(r["seconds"] for r in reports)
    by_t: dict[int, list[dict]] = {}
    for r in reports:
        for s in r["per_second"]:
            by_t.setdefault(s["t"], []).append(s)
    merged.update(
        config=reports[0]["config"],
        run_tag=",".join(r["run_tag"] for r in reports),
        hosts=len(reports),
        loaded_keys=max(r["loaded_keys"] for r in reports),
        load_seconds=max(r["load_seconds"] for r in reports),
        seconds=seconds,
        stale=verdict.stale,
        wrong=verdict.wrong,
        throughput=round(sum(r["throughput"] for r in reports), 1),
        hit_ratio=round(merged["hits"] / merged["reads"], 4) if merged["reads"] else 0.0,
        latency_us={
            "all": percentiles(lat["hit"] + lat["miss"] + lat["write"]),
            **{k: percentiles(v) for k, v in lat.items()},
        },
        per_second=[merge_seconds(by_t[t]) for t in sorted(by_t)],
        errors=dict(errors),
        error_count=sum(errors.values()),
        findings=[str(f) for f in verdict.findings],
        top_keys=reports[0]["top_keys"],
    )
    return merged
