"""p4src/psa/distcache.p4 -> a BPF object, as p4c's backends/ebpf/runtime/kernel.mk builds one: p4c-ebpf
(PSA, kernel target) writes C and the P4Info, clang compiles the C to LLVM IR (with BTF, which libbpf reads
the maps' layouts from), llc lowers it to BPF.  Each step's failure is a :class:`BuildError` carrying the
tool's own message: a limit of the back end (a stack over 512 bytes, a computation over 64 bits) shows as
the compiler states it."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
P4_PSA = REPO / "p4src" / "psa" / "distcache.p4"
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
        raise BuildError(f"{P4C_EBPF} is not on PATH: install ../shared/p4tool (its README says how)")
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
