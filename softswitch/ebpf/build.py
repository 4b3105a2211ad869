"""p4src/psa/distcache.p4 -> a BPF object, as p4c's backends/ebpf/runtime/kernel.mk builds one: p4c-ebpf
(PSA, kernel target) writes C and the P4Info, clang compiles the C to LLVM IR (with BTF, which libbpf reads
the maps' layouts from), llc lowers it to BPF.  Each step's failure is a :class:`BuildError` carrying the
tool's own message: a limit of the back end (a stack over 512 bytes, a computation over 64 bits) shows as
the compiler states it."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.switch import how_to_get

REPO = Path(__file__).resolve().parents[2]
P4_PSA = REPO / "p4src" / "psa" / "distcache.p4"
CACHE = REPO / "build" / "ebpf"  # cached(): one directory per distinct build
CACHE_KEEP = 48  # cached builds kept (the least recently used beyond these are removed)
P4C_EBPF = "p4c-ebpf"
CLANG, LLC = "clang", "llc"
# what kernel.mk passes clang (its warnings about p4c-ebpf's generated C silenced as it silences them)
CFLAGS = (
    "-O2", "-g", "-c", "-D__KERNEL__", "-D__ASM_SYSREG_H", "-DBTF", "-emit-llvm",
    "-Wno-unused-value", "-Wno-pointer-sign", "-Wno-compare-distinct-pointer-types",
    "-Wno-gnu-variable-sized-type-not-at-end", "-Wno-address-of-packed-member", "-Wno-tautological-compare",
    "-Wno-unknown-warning-option", "-Wno-parentheses-equality", "-Wno-implicit-function-declaration",
)  # fmt: skip
LLC_FLAGS = ("-march=bpf", "-mcpu=generic", "-filetype=obj")


class BuildError(RuntimeError):
    """A step of the build failed; the message names the step and ends with the tool's output."""


@dataclass(frozen=True)
class BpfBuild:
    """What :func:`build` wrote: p4c-ebpf's C, the BPF object, and the P4Info."""

    c_file: Path
    object_file: Path
    p4info: Path


def missing_tools() -> list[str]:
    """The tools of the build that are not on PATH (empty: it can run)."""
    return [t for t in (P4C_EBPF, CLANG, LLC) if shutil.which(t) is None]


def runtime_dir() -> Path:
    """p4c-ebpf's C runtime (psa.h, ebpf_kernel.h, its libbpf headers), beside the compiler's install:
    P4C_EBPF_RUNTIME if set, else <prefix>/share/p4c/ebpf/runtime of the p4c-ebpf on PATH."""
    if env := os.environ.get("P4C_EBPF_RUNTIME"):
        return Path(env)
    exe = shutil.which(P4C_EBPF)
    if exe is None:
        raise BuildError(how_to_get([P4C_EBPF]))
    return Path(exe).resolve().parents[1] / "share" / "p4c" / "ebpf" / "runtime"


def _run(step: str, cmd: list[str]) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except FileNotFoundError as e:
        raise BuildError(f"{step}: {cmd[0]} not found ({e})") from e
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-20:])
        raise BuildError(f"{step} failed (exit {done.returncode}): {' '.join(cmd)}\n{tail}")


# p4c-ebpf's TC program puts back the EtherType its XDP helper kept in XDP metadata wherever it finds metadata
_RESTORE = (
    "        struct internal_metadata *md = (struct internal_metadata *)(unsigned long)skb->data_meta;\n"
    "        if ((void *) ((struct internal_metadata *) md + 1) <= (void *)(long)skb->data) {\n"
)


def _restore_ether_type_only_where_xdp_ran(c_file: Path, defines: Mapping[str, int]) -> None:
    """Make the TC program put back a kept EtherType only for a frame that came in by the CPU or probe port,
    the two interfaces the switch gives the XDP helper (softswitch/ebpf/switch.py).

    Why: the kernel keeps an skb's XDP metadata when a TC program redirects it, and a veth hands the same skb
    to its peer, where generic XDP does not run again (the skb is marked redirected).  So a probe that came
    in by a leaf's probe port reached the spine still carrying the leaf's metadata, the spine's TC program
    "restored" an EtherType from it that was not the frame's, and dropped ~60% of the probes as NOT_IPV4
    (docs/ebpf.md).  A frame that came in by any other port never had its EtherType changed: nothing to put
    back.  The one change made to p4c-ebpf's output; the build fails if its code no longer reads so."""
    text = c_file.read_text()
    if text.count(_RESTORE) != 1:
        raise BuildError(
            f"{c_file}: p4c-ebpf's EtherType restore is not the code softswitch/ebpf/build.py expects "
            "(another p4c version?); the kernel target needs it restricted to the CPU and probe ports"
        )
    ports = " || ".join(f"skb->ifindex == {int(defines.get(k, 0))}" for k in ("DC_CPU_IFINDEX", "DC_PROBE_IFINDEX"))
    restricted = _RESTORE.replace("        if (", f"        if (({ports}) && ", 1)
    c_file.write_text(text.replace(_RESTORE, restricted))


def build(out_dir: Path, source: Path = P4_PSA, defines: Mapping[str, int] | None = None) -> BpfBuild:
    """Compile ``source`` (the PSA top) into ``out_dir``, with ``defines`` given to the P4 preprocessor
    (``DC_CPU_IFINDEX``: the interface packet-outs come in by); return the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = source.stem
    c_file, bc_file = out_dir / f"{stem}.c", out_dir / f"{stem}.bc"
    obj, p4info = out_dir / f"{stem}.o", out_dir / f"{stem}.p4info.txtpb"
    rt = runtime_dir()
    _run(
        "p4c-ebpf",
        [P4C_EBPF, "--arch", "psa", "--target", "kernel", "-o", str(c_file), "--p4runtime-files", str(p4info),
         *(f"-D{k}={v}" for k, v in sorted((defines or {}).items())), str(source)],
    )  # fmt: skip
    _restore_ether_type_only_where_xdp_ran(c_file, defines or {})
    includes = [
        f"-I{rt}",
        f"-I{rt / 'contrib' / 'libbpf' / 'include' / 'uapi'}",
        f"-I{rt / 'install' / 'libbpf' / 'include'}",
    ]
    _run("clang", [CLANG, *CFLAGS, *includes, "-o", str(bc_file), str(c_file)])
    _run("llc", [LLC, *LLC_FLAGS, "-o", str(obj), str(bc_file)])
    bc_file.unlink()
    return BpfBuild(c_file, obj, p4info)


def _cache_key(source: Path, defines: Mapping[str, int]) -> str:
    """What a build's output depends on: every P4 source beside ``source`` (its includes), the defines, this
    module (the patch it applies to p4c-ebpf's C), and the tools and runtime headers by path, size and mtime."""
    h = hashlib.sha256()
    p4_root = source.resolve().parents[1]  # p4src/: the PSA top includes the shared pieces from there
    for f in sorted(p4_root.rglob("*.p4")):
        h.update(str(f.relative_to(p4_root)).encode() + b"\0" + f.read_bytes() + b"\0")
    h.update(str(source.resolve()).encode() + b"\0" + Path(__file__).read_bytes())
    h.update(repr(sorted((k, int(v)) for k, v in defines.items())).encode())
    rt = runtime_dir()
    for tool in (*(shutil.which(t) for t in (P4C_EBPF, CLANG, LLC)), rt / "psa.h", rt / "ebpf_kernel.h"):
        path = Path(tool) if tool else None
        st = path.stat() if path is not None and path.exists() else None
        h.update(f"{path}:{st.st_size if st else 0}:{st.st_mtime_ns if st else 0}\n".encode())
    return h.hexdigest()[:20]


def cached(defines: Mapping[str, int], cache: Path = CACHE, source: Path = P4_PSA) -> BpfBuild:
    """The build of ``source`` with ``defines``, compiled once and then reused from ``cache``.

    Why: a compile takes seconds (p4c-ebpf, clang, llc: ~8 s on a slow 2-core machine), and a kernel switch
    that restarts (a crash in the fault matrix, ``distcache-ctl`` recovering a spine) was down for all of it
    -- so long that a fault schedule's later faults fell after its clients stopped.  A restarted switch
    keeps its defines (its CPU port's interface index is fixed, softswitch/ebpf/switch.py), so it loads the
    program it built before.  Builds go to a directory of their own and are renamed into place whole: two
    switches building the same key at once both succeed, and a killed build leaves no half entry behind."""
    key = _cache_key(source, defines)
    done = cache / key
    files = BpfBuild(done / f"{source.stem}.c", done / f"{source.stem}.o", done / f"{source.stem}.p4info.txtpb")
    if all(f.is_file() for f in (files.object_file, files.p4info)):
        os.utime(done)  # recently used: kept by the pruning below
        return files
    tmp = cache / f".{key}.{os.getpid()}.{time.monotonic_ns()}"
    try:
        build(tmp, source, defines)
        try:
            tmp.rename(done)
        except OSError:  # another switch put the same build there first (or a stale partial one is there)
            if not files.object_file.is_file():
                shutil.rmtree(done, ignore_errors=True)
                tmp.rename(done)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _prune(cache)
    return files


def _prune(cache: Path) -> None:
    """Remove the least recently used builds beyond CACHE_KEEP, and partial ones more than an hour old."""
    now = time.time()
    entries = []
    for d in cache.iterdir():
        try:
            mtime = d.stat().st_mtime
        except FileNotFoundError:
            continue
        if d.name.startswith("."):
            if now - mtime > 3600:
                shutil.rmtree(d, ignore_errors=True)
        else:
            entries.append((mtime, d))
    for _, d in sorted(entries, reverse=True)[CACHE_KEEP:]:
        shutil.rmtree(d, ignore_errors=True)
