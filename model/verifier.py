"""One configuration's verifier: ``rumur`` generates it, ``cc`` compiles it (cached by content under
build/model/), it runs, and its output is read back as a :class:`Result`."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from model.config import Config
from model.render import render

CACHE = Path(__file__).resolve().parent.parent / "build" / "model"


@dataclass
class Result:
    name: str
    result: str  # ok | violation | cover-missed | error
    states: int = 0
    rules: int = 0
    seconds: float = 0.0
    invariant: str = ""
    message: str = ""
    trace: str = ""
    covers_missed: list[str] = field(default_factory=list)
    covers: dict[str, int] = field(default_factory=dict)
    output: str = ""

    def passed(self, cfg: Config) -> bool:
        if cfg.expect == "ok":
            return self.result == "ok"
        return self.result == "violation" and self.invariant == cfg.expect

    def line(self) -> str:
        s = (
            f"model={self.name} states={self.states} rules_fired={self.rules} result={self.result} "
            f"seconds={self.seconds:.1f}"
        )
        if self.invariant:
            s += f" invariant={self.invariant}"
        if self.covers_missed:
            s += " covers_missed=" + ";".join(c.replace(" ", "_") for c in self.covers_missed)
        return s


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"model/run.py: {name} not found on PATH (make deps installs Debian's rumur and a C compiler)")
    return path


def build(cfg: Config, threads: int, opt: str = "-O3") -> Path:
    """Generate and compile the verifier; cached by content, so a re-run skips both steps.  Two processes may
    build the same one at once (make test builds ahead in the background): each writes its own files and
    the finished executable is renamed into place."""
    text = render(cfg)
    flags = [
        "--deadlock-detection",
        "off",
        "--threads",
        str(threads),
        "--counterexample-trace",
        "diff",
        "--pack-state",
        "off",
    ]
    cflags = ["-std=c11", opt, "-march=native", "-mcx16"]
    digest = hashlib.sha256("\0".join([text, *flags, *cflags]).encode()).hexdigest()[:16]
    CACHE.mkdir(parents=True, exist_ok=True)
    exe = CACHE / f"{cfg.name}-{digest}"
    if exe.exists():
        return exe
    src, csrc, tmp = (CACHE / f"{exe.name}.{os.getpid()}{ext}" for ext in (".m", ".c", ".tmp"))  # this build's own
    try:
        src.write_text(text)
        r = subprocess.run(
            [tool("rumur"), "--quiet", *flags, "--output", str(csrc), str(src)], capture_output=True, text=True
        )
        if r.returncode != 0:
            raise SystemExit(f"model/run.py: rumur rejected {cfg.name}:\n{r.stderr.strip()}")
        r = subprocess.run(
            [tool("cc"), *cflags, "-o", str(tmp), str(csrc), "-lpthread"], capture_output=True, text=True
        )
        if r.returncode != 0:
            raise SystemExit(f"model/run.py: cc failed on {csrc}:\n{r.stderr.strip()[:2000]}")
        tmp.rename(exe)
    finally:
        for f in (csrc, tmp):
            f.unlink(missing_ok=True)
        if exe.exists():
            src.replace(exe.with_suffix(".m"))  # kept beside it: the model text the verifier checks
        else:
            src.unlink(missing_ok=True)
    return exe


_EXPLORED = re.compile(r"(\d+) states, (\d+) rules fired in")
_PROGRESS = re.compile(r"(\d+) states explored in \d+s, with (\d+) rules fired and (\d+) states in the queue")
_VIOLATION = re.compile(r'Assertion failed: \S+: (.*)|invariant "([^"]*)" failed')
_HIT = re.compile(r'cover "([^"]+)" hit (\d+) times')
_NOT_HIT = re.compile(r'cover "([^"]+)" not hit')


def parse(name: str, out: str, seconds: float) -> Result:
    """The verifier's human-readable output, read back."""
    res = Result(name=name, result="error", seconds=seconds, output=out)
    m = _EXPLORED.search(out)
    if m:
        res.states, res.rules = int(m.group(1)), int(m.group(2))
    else:
        prog = _PROGRESS.findall(out)
        if prog:  # cut short: how far it got
            res.states, res.rules = int(prog[-1][0]), int(prog[-1][1])
            res.message = f"{prog[-1][2]} states still queued"
    res.covers = {c: int(n) for c, n in _HIT.findall(out)}
    v = _VIOLATION.search(out)
    missed = _NOT_HIT.findall(out)
    if v:
        res.result = "violation"
        res.message = (v.group(1) or v.group(2)).strip()
        res.invariant = res.message.split(":", 1)[0]
        start = out.find("The following is the error trace")
        end = out.find("End of the error trace.")
        if start >= 0:
            res.trace = out[start : end + len("End of the error trace.")]
    elif missed:
        res.result = "cover-missed"
        res.covers_missed = missed
    elif "No error found." in out:
        res.result = "ok"
    return res


def check(cfg: Config, threads: int = 1, timeout: float | None = None, opt: str = "-O3") -> Result:
    """Build (or reuse) and run the verifier of one configuration."""
    exe = build(cfg, threads, opt)
    t0 = time.monotonic()
    try:
        r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=timeout)
        out = r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        raw = e.stdout or b""
        out = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        res = parse(cfg.name, out, time.monotonic() - t0)
        res.result, res.message = "error", f"stopped after {timeout:.0f} s ({res.message})"
        return res
    return parse(cfg.name, out, time.monotonic() - t0)
