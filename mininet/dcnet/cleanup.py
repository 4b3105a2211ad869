"""Remove what a crashed run left: the processes it recorded, and, when no run is live, links and pins.

``make clean`` runs it.  A deployment cleans up after itself even on Ctrl-C; this is for a killed (SIGKILL)
launcher.  It stops only what such a run recorded (harness.runs: every process a deployment starts is
recorded in its run folder, and the deployment is registered while it runs), so a run going on beside it
is left alone; the machine-wide steps -- Mininet's own cleanup, the leaves' probe links, the kernel target's
CPU ports and pins, the packet fault injector's leftovers -- run only when no run is live, and a test
namespace (``dcptf-<pid>`` and the like) is deleted only when the process named in it is gone.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from dcnet.netfaults import remove_leftovers
from harness import runs
from harness.processes import pid_alive
from p4rt.probes import probe_interfaces

#: namespaces the test tools create, each named after the pid of the process that made it
TEST_NAMESPACES = ("dcptf-", "dcbench-", "dcbench-t", "dcbpf-", "dcbpfm-")


def _owner(ns: str) -> int | None:
    """The pid a test namespace is named after (``dcptf-1234``), None if it names none."""
    for prefix in sorted(TEST_NAMESPACES, key=len, reverse=True):
        if ns.startswith(prefix) and ns[len(prefix) :].isdigit():
            return int(ns[len(prefix) :])
    return None


REPO = Path(__file__).resolve().parents[2]


def remove_outputs(live: list[runs.Run]) -> None:
    """``runs/``'s folders but a live run's; ``build/`` and ``.pytest_cache`` only when no run is live (a live
    run reads its pipeline and tools from build/)."""
    keep = {r.run_dir.resolve() for r in live}
    for d in sorted((REPO / "runs").glob("*")) if (REPO / "runs").is_dir() else []:
        if d.resolve() not in keep:
            shutil.rmtree(d, ignore_errors=True)
    if not live:
        for d in (REPO / "build", REPO / ".pytest_cache"):
            shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--outputs", action="store_true", help="also remove runs/ (but live runs' folders), build/ and .pytest_cache"
    )
    args = ap.parse_args(argv)
    live, stopped = runs.sweep()
    for line in stopped:
        print(f"stopped {line}")
    if args.outputs:
        remove_outputs(live)
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout.split()
    for ns in names:
        owner = _owner(ns)
        if owner is not None and not pid_alive(owner):
            subprocess.run(["ip", "netns", "delete", ns], check=False)
            print(f"deleted namespace {ns} (its process {owner} is gone)")
    if live:
        for run in live:
            print(f"left alone: the run in {run.run_dir} (its launcher, pid {run.pid}, is running)")
        print("cleanup done (machine-wide steps skipped while a run is live: Mininet's links, probe ports, pins)")
        return
    # Mininet's own cleanup removes leftover veths and kills its helper shells
    subprocess.run(["mn", "-c"], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # the leaves' probe ports (dcnet.p4switch), which are no Mininet links: deleting one end deletes the pair
    suffix = probe_interfaces("x")[0].removeprefix("x")
    for link in Path("/sys/class/net").iterdir():
        if link.name.endswith(suffix):
            subprocess.run(["ip", "link", "del", link.name], check=False, stderr=subprocess.DEVNULL)
    # the kernel target's CPU-port veths and its pinned programs and maps: the switch's own command removes them
    subprocess.run([sys.executable, "-m", "softswitch", "--dataplane", "ebpf", "--cleanup"], check=False)
    remove_leftovers()  # the packet fault injector's filters, pinned programs and maps, test namespaces
    print("cleanup done")


if __name__ == "__main__":
    main()
