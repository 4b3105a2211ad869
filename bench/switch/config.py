"""The bed's fixed facts, shared by every module of the switch benchmark: the switch the bed plays (storage
leaf sl0 of the PTF tests' cluster), its ports, the values its frames carry, the rate search's constants."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from distcache.cluster import Cluster, Role
from distcache.partition import spine_buckets

REPO = Path(__file__).resolve().parents[2]
BMV2_JSON, BMV2_P4INFO = REPO / "build" / "distcache.json", REPO / "build" / "distcache.p4info.txtpb"

CLUSTER = Cluster(spines=2, storage_racks=2, client_racks=2)  # the PTF tests' cluster (tests/ptf/dctest.py)
LEAF = CLUSTER.storage_leaf(0)
SERVER, CLIENT = CLUSTER.server(0, 0), CLUSTER.client(0, 0)
BUCKETS = spine_buckets(CLUSTER.switch_ids(Role.SPINE))
PORTS = (1, 2, 3)  # sl0: 1 server r0s0, 2 spine sp0, 3 spine sp1
SERVER_PORT, SPINE_PORTS, IN_PORT = 1, (2, 3), 3
VALUE = b"v" * 64
SLOT, VERSION_TAG, FILL_SEQ = 1, 1, 9
UDP_SPORT, PLAIN_DPORT = 40000, 9999

PATHS = ("hit", "miss", "fwd")
PATH_NAMES = {
    "hit": "cache hit (GET answered by the switch)",
    "miss": "cache miss (GET forwarded to the server)",
    "fwd": "IPv4 forwarding (plain UDP to the server)",
}
WARMUP = 0.5  # seconds of each measured run before its window opens
STEP_SECONDS, STEP_WINDOW = 0.5, 0.3  # rate search: each step's length and its measured tail
START_RATE = 5000.0  # pps the rate search starts from
MAX_RATE = 2_000_000.0
SATURATED = 0.8  # delivered / offered below this: the switch is the limit
OFFER_FACTOR = 2.0  # the measured run offers this times what the switch delivered at saturation
SENDER_CPU = 0  # the core the sender is pinned to; the input veth's receive work goes to the others
REFUSED = 0.01  # frames the input veth refused, as a share of those offered, above which its receiver was full
BUSY = 95.0  # % a core was busy in the window at or above which it had nothing more to give
PROFILE_RATE = 500  # py-spy samples per second
PROFILE_SECONDS = 5.0  # the sampled hit run lasts at least this long

err = Console(stderr=True, log_path=False)


class SetupError(RuntimeError):
    """The bed could not be brought up, or a path did not do what it should."""


#: each target's figures in the summary line and JSON: ``<prefix><path>_pps`` (softswitch's unprefixed, as before)
PREFIX = {"softswitch": "", "bmv2": "bmv2_", "ebpf": "ebpf_"}
LIMIT = "limit"  # the turnaround program in place of a switch (bench/switch/limit.py): its figure is limit_pps
