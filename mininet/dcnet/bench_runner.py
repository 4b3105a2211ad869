"""Run the workload generator inside a client host, reporting as JSON lines.

``python -m dcnet.bench_runner --cluster runs/<run>/cluster.json --config '{"keys": 2000, ...}'``

The launcher runs this in a client host's network namespace (the workload's
UDP requests must enter the fabric at a client-rack switch) and reads its
stdout: one ``{"type": "load", "done": n, "total": n}`` line now and then while
keys are loaded, one ``{"type": "second", ...}`` line per second of the timed
phase, and a last ``{"type": "report", ...}`` line with the whole report
(loadgen.workload.Report).

``--serve``: run one workload per JSON config line read from stdin, each ending
with its ``report`` line, until stdin closes (a saturation search runs many
short workloads; this spares a process start and the imports per step).  The
staleness oracle judges each workload against every one before it in the
session (loadgen.workload.Judge): a read of a value an earlier step's
acknowledged write superseded is stale too.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from loadgen.workload import BenchConfig, Judge, Second, run_bench


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dcnet.bench_runner", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--config", default="{}", help="BenchConfig fields as a JSON object")
    ap.add_argument("--timeout", type=float, default=0.5)
    ap.add_argument("--retries", type=int, default=3)
    ap.add_argument("--serve", action="store_true", help="run the configs read from stdin, one per line")
    args = ap.parse_args(argv)

    def emit(obj: dict) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def on_second(s: Second) -> None:
        emit({"type": "second", **asdict(s), "hit_ratio": round(s.hit_ratio, 4)})

    def on_load(done: int, total: int) -> None:
        emit({"type": "load", "done": done, "total": total})

    judge = Judge()  # one per process: a session's workloads are judged together

    def run(cfg: BenchConfig) -> None:
        report = run_bench(
            args.cluster,
            cfg,
            timeout=args.timeout,
            retries=args.retries,
            on_second=on_second,
            on_load=on_load,
            judge=judge,
        )
        emit({"type": "report", **report.to_dict()})

    if not args.serve:
        run(BenchConfig(**json.loads(args.config)))
        return 0
    for line in sys.stdin:
        if line.strip():
            run(BenchConfig(**json.loads(line)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
