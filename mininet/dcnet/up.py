"""Bring a deployment up and hand it to you (``make up``): the Mininet CLI, until you exit.

Everything ``make run`` starts (switches, redis-servers, shims, agents, the
controller daemon) stays up while the Mininet prompt runs.  From the prompt:

* ``c0h0 distcache put k v`` / ``get k`` — the client CLI, inside a client host
  (``c0h0 distcache bench`` for a workload; the prompt's environment names the
  cluster file in ``DISTCACHE_CLUSTER`` and puts the project's commands on PATH);
* ``sh distcache-ctl status`` — the operator CLI
  (``partitions``, ``hot``, ``fail sp0``, ``recover sp0``, ``mechanism …``),
  in the root namespace where the controller listens on loopback;
* ``sh curl -s 127.0.0.1:9464/metrics`` — every series of the deployment (the
  cluster's ``metrics_address``); with ``--prometheus`` (``make up PROMETHEUS=1``)
  a Prometheus server scrapes them every second (its UI and API on 127.0.0.1:9090,
  or the free port it prints).

``exit`` (or Ctrl-D) tears everything down.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

from mininet.cli import CLI
from mininet.log import setLogLevel
from mininet.net import Mininet
from rich.console import Console
from rich.text import Text

from dcnet.demo import DEFAULT_TOPO
from dcnet.deploy import Deployment, DeploymentError
from dcnet.p4switch import SWITCH_LOG_HELP, SWITCH_LOGS, TARGETS, TargetMissingError
from dcnet.prometheus import Prometheus, PrometheusError
from distcache.cmdline import ArgumentParser, input_file, load_cluster, output_dir

console = Console(stderr=True)
VENV_BIN = Path(sys.executable).parent


def parser() -> ArgumentParser:
    ap = ArgumentParser(prog="python -m dcnet.up", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=TARGETS, default="softswitch")
    ap.add_argument("--switch-log", choices=SWITCH_LOGS, default="events", help=SWITCH_LOG_HELP)
    ap.add_argument("--topo", type=input_file, default=DEFAULT_TOPO, help="cluster description (JSON)")
    ap.add_argument("--run-dir", type=output_dir, help="where logs go (default runs/<timestamp>)")
    ap.add_argument(
        "--prometheus",
        action="store_true",
        help="also run a Prometheus server scraping the deployment's metrics (Debian's prometheus)",
    )
    ap.add_argument("--pcap", action="store_true", help="capture every switch port (pcap/ in the run folder)")
    return ap


def operator_env(dep: Deployment, prom: Prometheus | None) -> dict[str, str]:
    """What the Mininet prompt's commands find in their environment (hosts inherit it): the project's
    commands on PATH, ``DISTCACHE_CLUSTER`` (which ``distcache`` and ``distcache-ctl`` read), the run
    folder and Prometheus' URL, so docs/tutorial.md's commands work as written on any run."""
    path = os.environ.get("PATH", "")
    env = {
        "PATH": path if path.startswith(f"{VENV_BIN}{os.pathsep}") else f"{VENV_BIN}{os.pathsep}{path}",
        "DISTCACHE_CLUSTER": str(dep.cluster_path),
        "DISTCACHE_RUN": str(dep.run_dir),
    }
    if prom is not None:
        env["DISTCACHE_PROMETHEUS"] = prom.url
    return env


def prompt(net: Mininet, script: str | None = None, stdin: TextIO = sys.stdin) -> None:
    """Mininet's CLI on the deployment (``script``: run that file's commands, then return).

    The deployment logs Mininet's warnings only, but the prompt must show what a host's command prints,
    which Mininet's CLI writes at its "output" level (at "warning", ``c0h0 distcache get k`` showed
    nothing at all)."""
    setLogLevel("output")
    CLI(net, stdin=stdin, script=script)


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    cluster = load_cluster(ap, args.topo)  # a bad topology is one line, before Mininet starts anything
    if os.geteuid() != 0:
        console.print("[red]needs root[/] (Mininet creates network namespaces): run it as root: make up")
        return 2
    try:
        with console.status(f"starting {args.target} topology {args.topo.name}..."):
            dep = Deployment(
                cluster, target=args.target, run_dir=args.run_dir, switch_log=args.switch_log, pcap=args.pcap
            )
            os.environ.update(operator_env(dep, None))  # before the hosts start: they inherit it
            dep.__enter__()
    except (OSError, ValueError, TargetMissingError, DeploymentError) as e:
        console.print(Text.assemble(("error:", "red"), " ", str(e)), soft_wrap=True)  # data, not markup
        return 2
    prom: Prometheus | None = None
    try:
        if args.prometheus:
            try:
                with console.status("starting prometheus..."):
                    prom = Prometheus(cluster, dep.run_dir)
                    prom.start()
            except PrometheusError as e:
                console.print(Text.assemble(("error:", "red"), " ", str(e)), soft_wrap=True)
                return 2
            os.environ.update(operator_env(dep, prom))  # `sh` commands run in this process's environment
        metrics = f"http://{cluster.metrics_address}/metrics" if cluster.metrics_address else "off (metrics_address)"
        scraped = (
            f"\n  prometheus: {prom.url} ($DISTCACHE_PROMETHEUS; scraping every second; e.g. {prom.url}/graph?"
            "g0.expr=sum(rate(distcache_switch_read_hits_total[10s])))"
            if prom is not None
            else ""
        )
        console.print(
            f"[green]deployment up[/] — logs in {dep.run_dir} ($DISTCACHE_RUN); controller at "
            f"{cluster.controller_address}; DISTCACHE_CLUSTER={dep.cluster_path}\n"
            f"  client:   {cluster.client(0, 0).name} distcache put hello world\n"
            f"            {cluster.client(0, 0).name} distcache get hello\n"
            "  operator: sh distcache-ctl status   (partitions, hot, fail sp0, recover sp0, mechanism NAME)\n"
            f"  metrics:  {metrics}{scraped}\n"
            "  a walk through all of it: docs/tutorial.md\n"
            "  exit (or Ctrl-D) tears everything down",
            highlight=False,
        )
        prompt(dep.net)
        return 0
    finally:
        with console.status("tearing down..."):
            if prom is not None:
                prom.stop()
            dep.stop()


if __name__ == "__main__":
    sys.exit(main())
