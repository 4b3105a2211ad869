"""Remove what a crashed run may have left: our processes and Mininet's links.

``make clean`` runs it.  A deployment cleans up after itself even on Ctrl-C;
this is for a killed (SIGKILL) launcher.
"""

from __future__ import annotations

import subprocess

from dcnet.netfaults import remove_leftovers

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
    # namespaces of PTF runs (tests/ptf/run.py) and make bench-switch (bench/switch/) killed before their teardown
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout.split()
    for ns in (x for x in names if x.startswith(("dcptf-", "dcbench-"))):
        subprocess.run(["ip", "netns", "delete", ns], check=False)
    remove_leftovers()  # the packet fault injector's filters, pinned programs and maps, test namespaces
    print("cleanup done")


if __name__ == "__main__":
    main()
