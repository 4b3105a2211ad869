"""Bring a deployment up and hand it to you (``make up``): the Mininet CLI, until you exit.

Everything ``make run`` starts (switches, redis-servers, shims, agents, the
controller daemon) stays up while the Mininet prompt runs.  From the prompt:

* ``c0h0 distcache --cluster <run>/cluster.json put k v`` / ``get k`` — the
  client CLI, inside a client host (``c0h0 distcache ... bench`` for a workload);
* ``sh distcache-ctl --cluster <run>/cluster.json status`` — the operator CLI
  (``partitions``, ``hot``, ``fail sp0``, ``recover sp0``, ``mechanism …``),
  in the root namespace where the controller listens on loopback.

``exit`` (or Ctrl-D) tears everything down.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mininet.cli import CLI
from rich.console import Console
from rich.text import Text

from dcnet.demo import DEFAULT_TOPO
from dcnet.deploy import Deployment, DeploymentError
from dcnet.p4switch import SWITCH_LOG_HELP, SWITCH_LOGS, TargetMissingError
from distcache.cmdline import ArgumentParser, input_file, load_cluster, output_dir

console = Console(stderr=True)
VENV_BIN = Path(sys.executable).parent


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m dcnet.up", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=("softswitch", "bmv2"), default="softswitch")
    ap.add_argument("--switch-log", choices=SWITCH_LOGS, default="events", help=SWITCH_LOG_HELP)
    ap.add_argument("--topo", type=input_file, default=DEFAULT_TOPO, help="cluster description (JSON)")
    ap.add_argument("--run-dir", type=output_dir, help="where logs go (default runs/<timestamp>)")
    args = ap.parse_args(argv)
    cluster = load_cluster(ap, args.topo)  # a bad topology is one line, before Mininet starts anything
    if os.geteuid() != 0:
        console.print("[red]needs root[/] (Mininet creates network namespaces): run it as root: make up")
        return 2
    try:
        with console.status(f"starting {args.target} topology {args.topo.name}..."):
            dep = Deployment(cluster, target=args.target, run_dir=args.run_dir, switch_log=args.switch_log)
            dep.__enter__()
    except (OSError, ValueError, TargetMissingError, DeploymentError) as e:
        console.print(Text.assemble(("error:", "red"), " ", str(e)), soft_wrap=True)  # data, not markup
        return 2
    try:
        c = dep.cluster_path
        console.print(
            f"[green]deployment up[/] — logs in {dep.run_dir}; controller at {cluster.controller_address}\n"
            f"  client:   {cluster.client(0, 0).name} {VENV_BIN}/distcache --cluster {c} put hello world\n"
            f"            {cluster.client(0, 0).name} {VENV_BIN}/distcache --cluster {c} get hello\n"
            f"  operator: sh {VENV_BIN}/distcache-ctl --cluster {c} status   (partitions, hot, fail sp0, "
            f"recover sp0, mechanism NAME)\n"
            "  exit (or Ctrl-D) tears everything down",
            highlight=False,
        )
        CLI(dep.net)
        return 0
    finally:
        with console.status("tearing down..."):
            dep.stop()


if __name__ == "__main__":
    sys.exit(main())
