"""DcLiveness with ingress timestamps out of order (softswitch's twin of p4src/include/control/liveness.p4).

BMv2 stamps a frame in the thread that reads it from its port and a packet-out in the gRPC thread that
injects it; both then wait for the ingress queue, so a spine's packet stamped before a probe can reach the
pipeline after it.  Loaded BMv2 runs counted such a packet as the end of a 2^48 us wait: a death of a spine
heard 2 ms before (a report with detect 32 ms and silent 2 ms).  PTF cannot order BMv2's stamps, so the rule
is checked here on the twin, whose code the P4 mirrors line for line.
"""

from __future__ import annotations

import pytest

from distcache import p4names
from distcache.cluster import Role
from softswitch.dataplane import PROGRAM, liveness
from softswitch.dataplane.header import Headers, Meta
from softswitch.state import SwitchState

pytestmark = pytest.mark.timeout(30)

SPINE, PORT = 1, 2
DEAD = p4names.DEAD_AFTER_US


@pytest.fixture
def leaf() -> SwitchState:
    st = SwitchState(PROGRAM)
    st.tables[p4names.PORT_SPINE].insert([PORT], p4names.SET_PORT_SPINE, {"spine_id": SPINE})
    return st


def hear(st: SwitchState, now: int) -> None:
    """A packet from SPINE stamped ``now`` reaches the pipeline."""
    liveness.apply(st, Headers(), Meta(role=int(Role.CLIENT_LEAF), ingress_port=PORT, ingress_global_timestamp=now))


def ask(st: SwitchState, now: int) -> None:
    """A probe to SPINE stamped ``now`` (DcProbe starts the ask unless one is outstanding)."""
    regs = st.registers
    if regs[p4names.SPINE_ASKED].read(SPINE) <= regs[p4names.SPINE_HEARD].read(SPINE):
        regs[p4names.SPINE_ASKED].write(SPINE, now)


def excluded(st: SwitchState, now: int) -> bool:
    m = Meta(dead_after=DEAD, dead_after_max=p4names.DEAD_AFTER_MAX_US, peak_decay_shift=p4names.PEAK_DECAY_SHIFT)
    return liveness.spine_excluded(st, SPINE, now, m)


def deaths(st: SwitchState) -> int:
    return st.counters[p4names.SPINE_DEATHS].read(SPINE)[0]


def test_a_packet_stamped_before_the_probe_neither_kills_nor_answers(leaf: SwitchState) -> None:
    hear(leaf, 1_000_000)
    ask(leaf, 1_005_000)
    hear(leaf, 1_002_100)  # stamped before the probe, processed after it
    assert deaths(leaf) == 0 and leaf.pending_digests == []
    assert not excluded(leaf, 1_002_100)  # a packet stamped before the ask does not see it as overdue
    assert not excluded(leaf, 1_005_000 + DEAD)
    # the probe is still unanswered: found dead past its threshold, and counted when heard again
    assert excluded(leaf, 1_005_000 + DEAD + 1)
    hear(leaf, 1_005_000 + DEAD + 500)
    assert deaths(leaf) == 1
    # reported: found dead DEAD after the probe, i.e. 2.9 ms + DEAD after the late packet; silent since it
    detect, silent = 1_005_000 + DEAD - 1_002_100, 1_005_000 + DEAD + 500 - 1_002_100
    assert leaf.pending_digests == [(p4names.SPINE_DEATH_DIGEST, (0, SPINE, detect, silent))]


def test_heard_never_goes_back_in_time(leaf: SwitchState) -> None:
    hear(leaf, 2_000_000)
    ask(leaf, 2_001_000)
    hear(leaf, 2_002_000)  # answers the probe
    hear(leaf, 1_999_000)  # an older stamp late: must not reopen the answered wait
    assert leaf.registers[p4names.SPINE_HEARD].read(SPINE) == 2_002_000
    assert not excluded(leaf, 2_001_000 + 10 * DEAD)
    hear(leaf, 2_001_000 + 10 * DEAD)
    assert deaths(leaf) == 0
