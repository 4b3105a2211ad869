"""p4src/'s v1model top compiled by p4c-bm2-ss for BMv2 -- once per content of p4src/, not once per caller.

Every BMv2 deployment, PTF run and P4Runtime test compiles what p4src/ holds now (never a stale build), and
p4c-bm2-ss takes ~3 s a time: ``make test`` compiled the same program twenty-odd times.  The output is kept
under ``build/p4c/<digest>/``, the digest taken over every P4 file of p4src/ and the compiler's version, so an
edit anywhere in p4src/ (or another p4c) compiles again and nothing stale is ever handed out.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.switch import BMV2_COMPILER, P4_V1MODEL, REPO, how_to_get

P4SRC = REPO / "p4src"
CACHE = REPO / "build" / "p4c"


class CompileError(RuntimeError):
    """p4c-bm2-ss is missing or refused the program; the message ends with what it said."""


@dataclass(frozen=True)
class V1modelBuild:
    p4info: Path  # text-format P4Info
    json: Path  # BMv2's JSON


def _digest(compiler: str, source: Path) -> str:
    h = hashlib.sha256()
    h.update(str(source.resolve()).encode() + b"\0" + source.read_bytes() + b"\0")
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False).stdout
    h.update(version.encode())
    for f in sorted(P4SRC.rglob("*.p4")):
        h.update(str(f.relative_to(P4SRC)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def compile_v1model(source: Path = P4_V1MODEL) -> V1modelBuild:
    """The BMv2 build of ``source`` (default: p4src/'s v1model top) and p4src/ as they are now (compiled if
    this content never was)."""
    compiler = shutil.which(BMV2_COMPILER)
    if compiler is None:
        raise CompileError(how_to_get([BMV2_COMPILER]))
    out = CACHE / _digest(compiler, source)
    build = V1modelBuild(out / "distcache.p4info.txtpb", out / "distcache.json")
    if build.p4info.exists() and build.json.exists():
        return build
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=CACHE, prefix=".tmp-"))  # compiled aside, renamed whole: racers see all or none
    res = subprocess.run(
        [compiler, "--std", "p4-16", "--arch", "v1model", "-o", str(tmp / build.json.name),
         "--p4runtime-files", str(tmp / build.p4info.name), str(source)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    if res.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CompileError(f"{BMV2_COMPILER} failed on {source}:\n{res.stderr or res.stdout}")
    try:
        os.rename(tmp, out)
    except OSError:  # another process put the same build there first
        shutil.rmtree(tmp, ignore_errors=True)
    return build
