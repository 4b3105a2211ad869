"""The BPF filesystem, where pinned programs and maps live: mounted on demand.

A machine booted by systemd has it on /sys/fs/bpf; a container or a minimal VM often has an empty directory
there, and every pin (the kernel switch's maps, the packet fault injector's) fails with ENOENT until it is
mounted.  Mounting needs root, as everything that pins does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

BPFFS = Path("/sys/fs/bpf")
SBIN = "/usr/local/sbin:/usr/sbin:/sbin"  # bpftool and tc live in /usr/sbin, off a non-root PATH


def sbin_tool(name: str) -> str | None:
    """The path of a tool that pins and attaches programs (bpftool, tc): on PATH or in the sbin directories."""
    return shutil.which(name) or shutil.which(name, path=SBIN)


class BpffsError(RuntimeError):
    """The BPF filesystem is not mounted and could not be."""


def mounted() -> bool:
    """Whether a bpffs is mounted on BPFFS."""
    with open("/proc/mounts") as f:
        return any(len(p) > 2 and p[1] == str(BPFFS) and p[2] == "bpf" for p in (x.split() for x in f))


def ensure_mounted() -> None:
    """Mount the BPF filesystem on BPFFS unless one is there already."""
    if mounted():
        return
    res = subprocess.run(["mount", "-t", "bpf", "bpf", str(BPFFS)], capture_output=True, text=True, check=False)
    if res.returncode != 0 and not mounted():
        reason = res.stderr.strip() or f"exit {res.returncode}"
        raise BpffsError(f"cannot mount the BPF filesystem on {BPFFS} (run as root): {reason}")


def unpin(root: Path) -> None:
    """Remove everything pinned under ``root`` (bpffs files and directories), then ``root``."""
    if not root.is_relative_to(BPFFS) or root == BPFFS:
        raise ValueError(f"{root}: only a directory under {BPFFS} is unpinned")
    if not root.exists():
        return
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for f in filenames:
            os.unlink(os.path.join(dirpath, f))
        for d in dirnames:
            os.rmdir(os.path.join(dirpath, d))
    os.rmdir(root)
