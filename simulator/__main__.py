"""``python -m simulator figures [--out DIR]`` or ``python -m simulator point [options]``."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from distcache.cluster import Cluster
from simulator.model import MECHANISMS, Model, paper_config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulator", description="DistCache throughput simulator")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("figures", help="all figures (PNG + CSV) and the summary line")
    f.add_argument("--out", type=Path, default=Path("docs/figures"))
    p = sub.add_parser("point", help="one configuration, every mechanism")
    p.add_argument("--cluster", type=Path, help="cluster.json (default: the paper's 32x32x32)")
    p.add_argument("--keys", type=int, default=100_000_000)
    p.add_argument("--alpha", type=float, default=0.99)
    p.add_argument("--cache-per-switch", type=int, default=100)
    p.add_argument("--write-ratio", type=float, default=0.0)
    p.add_argument("--telemetry-batch", type=int, default=256)
    args = ap.parse_args(argv)
    if args.cmd == "figures":
        from simulator.figures import all_figures

        print(all_figures(args.out))
        return 0
    cfg = paper_config(
        n_keys=args.keys,
        alpha=args.alpha,
        cache_per_switch=args.cache_per_switch,
        write_ratio=args.write_ratio,
        telemetry_batch=args.telemetry_batch,
    )
    if args.cluster:
        cfg = replace(cfg, cluster=Cluster.load(args.cluster))
    model = Model(cfg)
    for m in MECHANISMS:
        r = model.evaluate(m)
        print(f"{m:<12} throughput={r.throughput:9.1f}  bottleneck={r.bottleneck}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
