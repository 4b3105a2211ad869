"""docs/tutorial.md, run as written: every ``mininet>`` command in order, against a deployment.

The deployment is the one the tutorial's ``make up ...`` line starts: the test expands that line with
``make -n`` and parses the resulting ``python -m dcnet.up`` arguments with dcnet.up's own parser, then
starts what it would (the deployment, Prometheus, captures) and gives the commands the environment the
Mininet prompt gives them (dcnet.up.operator_env).  A command runs as Mininet's CLI runs it: ``sh …`` in
the root namespace, ``<host> …`` inside that host's.  Each must exit 0, and the output the tutorial
shows under it must appear, line by line in order (``…`` stands for anything; whitespace runs match any
whitespace).  Commands of the tutorial's own steps that are not Mininet's (``$ make deps``...) are checked
only for existing: each ``make`` target it names must be one the Makefile has.
"""

from __future__ import annotations

import io
import logging
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from dcnet.deploy import Deployment
from dcnet.prometheus import Prometheus
from dcnet.up import operator_env, parser, prompt
from mininet.log import lg

from distcache.cmdline import load_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "docs" / "tutorial.md"
PROMPT = "mininet> "


@dataclass
class Step:
    command: str
    shown: list[str] = field(default_factory=list)  # the output the tutorial shows under it
    line: int = 0


def blocks(text: str) -> Iterator[list[tuple[int, str]]]:
    """The ```console blocks of the markdown: their (line number, line) pairs."""
    block: list[tuple[int, str]] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if block is None and line.strip() == "```console":
            block = []
        elif block is not None and line.strip() == "```":
            yield block
            block = None
        elif block is not None:
            block.append((number, line))


def steps(text: str) -> tuple[list[str], list[Step]]:
    """The shell commands (``$ …``) and the Mininet steps, in order."""
    shell, mininet = [], []
    current: Step | None = None
    for block in blocks(text):
        current = None
        for number, line in block:
            if line.startswith("$ "):
                shell.append(line[2:].split("#")[0].strip())
                current = None
            elif line.startswith(PROMPT):
                current = Step(line[len(PROMPT) :].strip(), line=number) if line.strip() != PROMPT.strip() else None
                if current is not None:
                    mininet.append(current)
            elif current is not None and line.strip():
                current.shown.append(line.strip())
    return shell, mininet


def pattern(shown: str) -> re.Pattern[str]:
    parts = [r"\s+".join(re.escape(w) for w in chunk.split()) for chunk in shown.split("…")]
    return re.compile(".*".join(parts))


def missing(shown: list[str], output: str) -> list[str]:
    """The shown lines (in order) that the output lacks; a line that is only ``…`` matches nothing."""
    lines, i, absent = output.splitlines(), 0, []
    for want in shown:
        if want == "…":
            continue
        pat = pattern(want)
        j = next((k for k in range(i, len(lines)) if pat.search(lines[k])), None)
        if j is None:
            absent.append(want)
        else:
            i = j + 1
    return absent


def test_the_tutorial_parses_into_commands() -> None:
    shell, mininet = steps(TUTORIAL.read_text())
    assert [c for c in shell if c.startswith("make up")] == ["make up PROMETHEUS=1 PCAP=1"]
    assert len(mininet) >= 15 and mininet[-1].command == "exit"
    assert pattern("deployment up — logs in runs/… ($DISTCACHE_RUN)").search(
        "deployment up — logs in runs/20261127-0500 ($DISTCACHE_RUN); controller"
    )
    assert missing(["a", "…", "c …"], "a\nb\nc d") == [] and missing(["c", "a"], "a\nc") == ["a"]
    targets = set(re.findall(r"^([a-z][\w-]*):", (REPO / "Makefile").read_text(), re.M))
    for cmd in shell:
        if cmd.startswith("make "):
            assert set(cmd.split()[1:2]) <= targets, cmd


def up_arguments(make_line: str) -> list[str]:
    """The arguments ``make up …`` gives ``python -m dcnet.up`` (``make -n``: nothing runs)."""
    res = subprocess.run(["make", "-n", *shlex.split(make_line)[1:]], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if "-m dcnet.up" in ln)
    return shlex.split(line.split("-m dcnet.up", 1)[1])


def test_every_command_works_as_written(tmp_path: Path) -> None:
    shell, mininet = steps(TUTORIAL.read_text())
    ap = parser()
    args = ap.parse_args(up_arguments(next(c for c in shell if c.startswith("make up"))))
    assert args.prometheus and args.pcap
    cluster = load_cluster(ap, REPO / args.topo if not args.topo.is_absolute() else args.topo)
    saved = dict(os.environ)
    try:
        dep = Deployment(
            cluster, target=args.target, run_dir=tmp_path / "run", pcap=args.pcap, switch_log=args.switch_log
        )
        os.environ.update(operator_env(dep, None))  # before the hosts start, as make up does: they inherit it
        with dep, Prometheus(cluster, dep.run_dir) as prom:
            os.environ.update(operator_env(dep, prom))
            os.environ["COLUMNS"] = "160"  # a terminal's width: rich fits its tables to it (80 without one)
            assert dep.net is not None
            for step in mininet:
                if step.command == "exit":
                    break
                node, _, cmd = step.command.partition(" ")
                if node == "sh":
                    res = subprocess.run(["bash", "-c", cmd], cwd=REPO, capture_output=True, text=True, timeout=120)
                else:
                    proc = dep.net[node].popen(
                        ["bash", "-c", cmd], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                    )
                    out, err = proc.communicate(timeout=120)
                    res = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
                with open(dep.run_dir / "tutorial.transcript", "a") as t:  # what each command printed
                    printed = res.stdout + res.stderr
                    t.write(f"{PROMPT}{step.command}\n{printed}{'' if printed.endswith(chr(10)) else chr(10)}")
                where = f"docs/tutorial.md line {step.line}: {step.command}"
                assert res.returncode == 0, f"{where}\nexit {res.returncode}\n{res.stdout[-2000:]}{res.stderr[-2000:]}"
                absent = missing(step.shown, res.stdout)
                assert not absent, f"{where}\nnot in its output: {absent}\n--- output:\n{res.stdout[-4000:]}"
            # and the prompt itself shows what a host's command prints (make up's CLI, in batch mode)
            step = next(s for s in mininet if s.command == "c0h0 distcache get hello")
            (tmp_path / "cli").write_text(step.command + "\n")
            shown = io.StringIO()  # what Mininet's log shows the user (its own handler writes to the terminal)
            handler = logging.StreamHandler(shown)
            lg.addHandler(handler)
            r, w = os.pipe()  # a stdin with nothing to read: the CLI waits on the host's output only
            try:
                with open(r) as idle:
                    prompt(dep.net, script=str(tmp_path / "cli"), stdin=idle)
            finally:
                os.close(w)
                lg.removeHandler(handler)
            assert not missing(step.shown, shown.getvalue()), shown.getvalue()
    finally:
        os.environ.clear()
        os.environ.update(saved)
