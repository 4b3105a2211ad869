"""Linearizability of the running system, checked with porcupine (tools/lincheck), in Mininet.

A fault-free run must have no violation; a run with coherence broken on
purpose (the shims acknowledge writes to cached keys before invalidating the
copies) must have some, or the check proves nothing.  ``make linearizability``
runs the same with faults (loss, a spine failed and recovered, a shim
restarted, hot keys churned).
"""

from __future__ import annotations

import os
import shutil

import pytest
from dcnet.linearizability import LINCHECK, run_once

pytestmark = [
    pytest.mark.mininet,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="Mininet needs root"),
    pytest.mark.skipif(not LINCHECK.exists(), reason="build/lincheck missing: `make deps` builds it (needs Go)"),
    pytest.mark.timeout(300),
]

TARGETS = ["softswitch"]
if shutil.which("simple_switch_grpc") and shutil.which("p4c-bm2-ss"):
    TARGETS.append(pytest.param("bmv2", marks=pytest.mark.bmv2))


@pytest.mark.parametrize("target", TARGETS)
def test_history_is_linearizable_and_a_broken_protocol_is_caught(target: str, tmp_path) -> None:  # noqa: ANN001
    clean = run_once("clean", tmp_path, target, duration=8, clients=6, faults=False, broken=False)
    assert clean.violations == 0 and clean.unknown_keys == 0, f"see {clean.html}"
    assert clean.ops > 500 and clean.stats["writes"] > 100
    broken = run_once("control", tmp_path, target, duration=8, clients=6, faults=False, broken=True)
    assert broken.violations > 0, f"a broken coherence protocol went unnoticed; see {broken.html}"
    assert broken.html.exists() and broken.html.stat().st_size > 1000
