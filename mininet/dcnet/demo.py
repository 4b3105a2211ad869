"""The main demo (``make run``): a key written, cached in P4 switches, read back.

Brings the topology up, writes keys from a client host, caches some of them
(table entry over P4Runtime, value by the shim's coherence UPDATE packet),
updates one cached key (two-phase coherence), reads everything back, prints a
table (key, value, served by cache or server, latency) and, last, one line::

    reads=<n> hits=<n> misses=<n> errors=<n>

``hits`` are reads answered by a switch cache, ``misses`` reads answered by a
storage server, ``errors`` reads that failed or returned a value other than
the one last written.  Then everything is torn down.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dcnet.deploy import Deployment, DeploymentError
from dcnet.p4switch import TargetMissing
from distcache.cluster import Cluster
from distcache.hashing import wire_key

console = Console(stderr=True)


def demo_values(n_keys: int) -> dict[str, str]:
    """Keys and values: mostly small (cacheable), one over 128 bytes (never cached)."""
    values = {f"key{i}": f"value-{i}-" + "x" * (i * 7) for i in range(n_keys)}
    values[f"key{n_keys - 1}"] = "big-" + "y" * 300
    return values


def wait_for_refill(client: object, key: str, value: str, timeout: float = 2.0) -> float | None:
    """Seconds until a read of ``key`` is served from cache again with ``value``, or None."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        r = client.call("get", key)  # type: ignore[attr-defined]
        if r["ok"] and r.get("cached") and r.get("value") == value:
            return time.monotonic() - start
        time.sleep(0.02)
    return None


def run(target: str, n_keys: int, n_cached: int, reads_per_key: int, run_dir: Path | None, pcap: bool) -> int:
    cluster = Cluster()
    values = demo_values(n_keys)
    keys = list(values)
    cached = keys[:n_cached] + [keys[-1]]  # the big key is asked for too, to show it stays uncached
    with console.status(f"starting {target} topology (1 spine, 1 storage rack, 1 client rack)..."):
        dep = Deployment(cluster, target=target, run_dir=run_dir, pcap=pcap)
        dep.__enter__()
    try:
        console.print(f"[green]topology up[/] — logs in {dep.run_dir}")
        client = dep.client()
        for k in keys:
            r = client.call("put", k, values[k])
            if not r["ok"]:
                console.print(f"[red]put {k} failed: {r['message']}")
        for k in cached:
            placed = dep.controller.cache(k)
            console.print(f"cache {k}: " + ", ".join(f"{sw}={e.state}" for sw, e in placed.items()))
        # a write to a cached key: invalidate, write Redis, ack, then update the caches
        update_key = keys[0]
        values[update_key] = "value-0-updated"
        r = client.call("put", update_key, values[update_key])
        if r["ok"]:
            refill = wait_for_refill(client, update_key, values[update_key])
            console.print(f"update {update_key}: acknowledged after phase 1; " + (
                f"caches refilled by phase 2 within {refill * 1000:.0f} ms" if refill is not None
                else "[yellow]caches not refilled yet (reads will go to the server)"))
        else:
            console.print(f"[red]update {update_key} failed: {r['message']}")

        table = Table(title="DistCache reads")
        for col in ("key", "value", "served by", "latency"):
            table.add_column(col)
        reads = hits = misses = errors = 0
        for _ in range(reads_per_key):
            for k in keys:
                reads += 1
                r = client.call("get", k)
                if not r["ok"] or r.get("value") != values[k]:
                    errors += 1
                    why = r.get("message") if not r["ok"] else f"got {r.get('value')!r}"
                    table.add_row(k, f"[red]{why}", "-", "-")
                    continue
                if r["cached"]:
                    hits += 1
                    who = f"cache {cluster.switch_by_id(r['served_by']).name}"
                else:
                    misses += 1
                    who = f"server {cluster.server_for_key(wire_key(k)).name}"
                shown = r["value"] if len(r["value"]) <= 32 else r["value"][:29] + "..."
                table.add_row(k, shown, who, f"{r['latency_us']} µs")
        Console().print(table)
        print(f"reads={reads} hits={hits} misses={misses} errors={errors}", flush=True)
        return 0 if errors == 0 else 1
    finally:
        with console.status("tearing down..."):
            dep.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dcnet.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="softswitch", choices=["softswitch", "bmv2"],
                    help="data plane: the built-in softswitch (default) or BMv2 simple_switch_grpc")
    ap.add_argument("--keys", type=int, default=8, help="number of keys written (default 8)")
    ap.add_argument("--cached", type=int, default=4, help="how many of them to cache (default 4)")
    ap.add_argument("--reads", type=int, default=2, help="reads per key (default 2)")
    ap.add_argument("--run-dir", type=Path, help="folder for logs (default runs/<timestamp>)")
    ap.add_argument("--pcap", action="store_true", help="capture every switch port into the run folder")
    args = ap.parse_args(argv)
    if args.keys < 2 or not 0 <= args.cached < args.keys:
        ap.error("need --keys >= 2 and 0 <= --cached < --keys")
    if os.geteuid() != 0:
        console.print("[red]error:[/] the demo needs root: Mininet creates network namespaces and veth pairs "
                      "(run `sudo make run`)")
        return 2
    try:
        return run(args.target, args.keys, args.cached, args.reads, args.run_dir, args.pcap)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted; everything was torn down")
        return 130
    except (TargetMissing, DeploymentError) as e:
        console.print(f"[red]error:[/] {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
