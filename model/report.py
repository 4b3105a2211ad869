"""What model/run.py prints and saves of a configuration's result: its line, its counterexample's steps."""

from __future__ import annotations

import re
from pathlib import Path

from model.config import Config
from model.verifier import Result

_RULE = re.compile(r'^Rule "(.*)"(?:, (.*))? fired\.$')


def brief_trace(trace: str) -> str:
    """A counterexample as numbered steps (the saved trace also shows every variable that changed)."""
    steps, n = [], 0
    for line in trace.splitlines():
        if line.startswith("Startstate"):
            steps.append("start")
        m = _RULE.match(line)
        if m:
            n += 1
            steps.append(f"{n:2}. {m.group(1)}" + (f"  [{m.group(2)}]" if m.group(2) else ""))
        elif "failed" in line and ("invariant" in line or "Assertion" in line):
            steps.insert(0, "broken: " + line.strip())
    return "\n".join(steps)


def report(cfg: Config, res: Result, show_trace: bool = False, save: Path | None = None) -> bool:
    """Print the result's line (and its counterexample or error), save its output and trace under ``save``;
    whether it is the result the configuration expects."""
    ok = res.passed(cfg)
    print(res.line() + f" expected={cfg.expect} {'PASS' if ok else 'FAIL'}", flush=True)
    if res.result == "violation":
        print(f"  counterexample ({cfg.doc}):")
        if show_trace:
            print("    " + brief_trace(res.trace).replace("\n", "\n    "), flush=True)
    elif res.result == "error":
        print("  " + (res.message or res.output[-1500:]).replace("\n", "\n  "))
    if save:
        save.mkdir(parents=True, exist_ok=True)
        (save / f"{cfg.name}.out").write_text(res.output)
        if res.trace:
            (save / f"{cfg.name}.trace").write_text(brief_trace(res.trace) + "\n\n" + res.trace + "\n")
    return ok
