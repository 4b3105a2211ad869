"""py-spy's collapsed stacks of a process's main thread, summed up: where its time goes (the benchmarks'
``--profile``)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")  # "func (file.py:123)"

#: (category, whether a frame (function, file) belongs to it); a sample counts for its first category
#: whose predicate a frame of its stack satisfies, else "other"
Categories = Sequence[tuple[str, Callable[[str, str], bool]]]


def summarize_profile(raw: Path, top: int = 15, categories: Categories = ()) -> dict:
    """Own and inclusive % per function, own % per file (and per category, when ``categories`` are given) of
    the main thread's samples in ``raw`` (py-spy record --format raw).

    Own: the sample's innermost frame.  Inclusive: every function on the stack, once; functions on (nearly)
    every stack (the loop itself, runpy) are left out of the inclusive list: they say nothing.  Other
    threads (gRPC's, a digest engine's) are left out.  A sample whose outermost frame is not the main
    thread's usual one is a stack torn while py-spy read it without stopping the process (--nonblocking):
    counted apart ("torn_samples") and left out.  Whether idle time is in the % depends on py-spy's options
    (by default it leaves out idle samples; --idle keeps an event loop's wait).
    """
    samples: list[tuple[list[tuple[str, str]], int]] = []
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not count.isdigit() or (frames[0].startswith("thread ") and "MainThread" not in frames[0]):
            continue
        names = [(m["func"], m["file"]) for m in map(FRAME.match, frames) if m]
        if names:
            samples.append((names, int(count)))
    roots: Counter[tuple[str, str]] = Counter()
    for names, k in samples:
        roots[names[0]] += k
    root = roots.most_common(1)[0][0] if roots else None
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    files: Counter[str] = Counter()
    cats: Counter[str] = Counter()
    total = torn = 0
    for names, k in samples:
        if names[0] != root:
            torn += k
            continue
        total += k
        own[f"{names[-1][0]} ({names[-1][1]})"] += k
        files[names[-1][1]] += k
        for name in {f"{f} ({p})" for f, p in names}:
            incl[name] += k
        if categories:
            cats[next((c for c, pred in categories if any(pred(*fp) for fp in names)), "other")] += k
    incl = Counter({name: v for name, v in incl.items() if v < 0.99 * total})

    def pct(c: Counter[str], n: int | None = top) -> dict[str, float]:
        return {name: round(100 * v / max(total, 1), 1) for name, v in c.most_common(n)}

    out = {
        "samples": total,
        "torn_samples": torn,
        "own_percent": pct(own),
        "inclusive_percent": pct(incl),
        "own_percent_by_file": pct(files),
    }
    if categories:
        out["category_percent"] = pct(cats, None)
    return out
