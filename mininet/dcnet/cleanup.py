"""Remove what a crashed run may have left: our processes and Mininet's links.

``make clean`` runs it.  A deployment cleans up after itself even on Ctrl-C;
this is for a killed (SIGKILL) launcher.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dcnet.netfaults import remove_leftovers
from p4rt.probes import probe_interfaces

PATTERNS = (
    "-m softswitch",
    "-m shim",
    "-m agent",
    "-m controller --cluster",
    "-m dcnet.client_runner",
    "-m dcnet.bench_runner",
    "simple_switch_grpc",
    "redis-server.*redis-",
)


def main() -> None:
    for pat in PATTERNS:
        subprocess.run(["pkill", "-f", "--", pat], check=False)
    # Mininet's own cleanup removes leftover veths and kills its helper shells
    subprocess.run(["mn", "-c"], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # the leaves' probe ports (dcnet.p4switch), which are no Mininet links: deleting one end deletes the pair
    suffix = probe_interfaces("x")[0].removeprefix("x")
    for link in Path("/sys/class/net").iterdir():
        if link.name.endswith(suffix):
            subprocess.run(["ip", "link", "del", link.name], check=False, stderr=subprocess.DEVNULL)
    # the kernel target's CPU-port veths and its pinned programs and maps: the switch's own command removes them
    subprocess.run([sys.executable, "-m", "softswitch", "--dataplane", "ebpf", "--cleanup"], check=False)
    # namespaces of PTF runs (tests/ptf/run.py), make bench-switch (bench/switch/) and the kernel target's test
    # (tests/p4runtime/test_ebpf_build.py) killed before their teardown
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout.split()
    for ns in (x for x in names if x.startswith(("dcptf-", "dcbench-", "dcbpf-", "dcbpfm-"))):
        subprocess.run(["ip", "netns", "delete", ns], check=False)
    remove_leftovers()  # the packet fault injector's filters, pinned programs and maps, test namespaces
    print("cleanup done")


if __name__ == "__main__":
    main()
