"""Record a linearizability history from inside a client host: ``python -m dcnet.history_runner``.

Prints one JSON line per second (progress) and a last one with the totals;
the history itself goes to ``--out`` (loadgen.history explains it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict
from pathlib import Path

from loadgen.history import HistoryConfig, HistoryStats, record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dcnet.history_runner", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--config", default="{}", help="HistoryConfig fields as a JSON object")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    cfg = HistoryConfig(**json.loads(args.config))

    def progress(s: HistoryStats) -> None:
        print(json.dumps({"type": "progress", **asdict(s)}), flush=True)

    stats = asyncio.run(record(args.cluster, cfg, args.out, on_progress=progress))
    print(json.dumps({"type": "done", **asdict(stats)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
