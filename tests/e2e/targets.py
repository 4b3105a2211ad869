"""The data-plane targets the Mininet scenarios run on: one list for every scenario.

``make test`` runs each scenario on softswitch and, where p4c and BMv2 are installed, on BMv2.  The kernel target
(``ebpf``) starts five builds per deployment; its scenarios run where asked for, with the others or alone:

    E2E_TARGETS=ebpf .venv/bin/python -m pytest tests/e2e

E2E_TARGETS is a comma-separated list of softswitch, bmv2 and ebpf; a target whose tools are missing is
skipped with the reason.
"""

from __future__ import annotations

import os
import shutil

import pytest
from _pytest.mark.structures import ParameterSet

KNOWN = ("softswitch", "bmv2", "ebpf")
DEFAULT = "softswitch,bmv2"


def ebpf_missing() -> list[str]:
    """What the kernel target lacks here (tools, root); empty: its scenarios can run."""
    from softswitch.ebpf.build import missing_tools

    return missing_tools() + ([] if os.geteuid() == 0 else ["root"])


def targets() -> list[str | ParameterSet]:
    """The targets of E2E_TARGETS (default softswitch and BMv2) as pytest parameters, marked and skipped as
    their tools say; an unknown name fails collection with the list of known ones."""
    names = [t.strip() for t in os.environ.get("E2E_TARGETS", DEFAULT).split(",") if t.strip()]
    unknown = sorted(set(names) - set(KNOWN))
    if unknown:
        raise pytest.UsageError(f"E2E_TARGETS: unknown {', '.join(unknown)}; use {', '.join(KNOWN)}")
    out: list[str | ParameterSet] = []
    for name in names:
        if name == "bmv2":
            if shutil.which("simple_switch_grpc") and shutil.which("p4c-bm2-ss"):
                out.append(pytest.param("bmv2", marks=pytest.mark.bmv2))
        elif name == "ebpf":
            missing = ebpf_missing()
            skip = pytest.mark.skipif(bool(missing), reason=f"ebpf needs {', '.join(missing)}")
            out.append(pytest.param("ebpf", marks=[pytest.mark.ebpf, skip]))
        else:
            out.append(name)
    return out
