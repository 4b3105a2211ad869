"""What the kernel-target tests read from a loaded PSA build (tests/p4runtime/test_ebpf_*.py)."""

from __future__ import annotations

import os
from pathlib import Path

from distcache.p4names import DropReason
from softswitch.ebpf import layout, libbpf
from softswitch.ebpf.codec import counter_cells

DROPS = "_dc_drops"


def drops(root: Path, layouts: dict[str, layout.MapLayout]) -> dict[DropReason, int]:
    """dc_drops, per reason, of the program pinned under ``root``."""
    fd = libbpf.map_get(root / DROPS)
    try:
        cells = counter_cells(fd, layouts[DROPS], map(int, DropReason))
    finally:
        os.close(fd)
    return {r: cells[r][0] for r in DropReason}
