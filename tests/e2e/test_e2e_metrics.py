"""Prometheus against a running deployment (issue 18, item 1), and what listens where.

A real Prometheus server (Debian's ``prometheus``, started by dcnet.prometheus as ``make up
PROMETHEUS=1`` starts it) scrapes the controller's exporter every second while a Zipf workload runs
and an operator fails and recovers a spine.  Everything is checked through Prometheus' own HTTP query
API:

1. after the load stops, every switch's read, routing and drop counters, every agent's figures, every
   shim's request counters and the controller's counters equal what ``distcache-ctl status --json`` and
   the shims' stats say;
2. Prometheus' ``rate()`` over a window of the load agrees within 8 % (RATE_TOLERANCE) with the rate the switches' and
   shims' own counters give over the same window (read every half second, interpolated at its ends);
3. every query of every panel of the shipped Grafana dashboard returns a non-empty result.

Then every listening socket of the deployment, in every namespace, is on loopback or the management
side (the root namespace, which holds no data-network address and takes nothing in from the switch
ports), except the storage servers' DistCache port, the service itself.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dcnet.deploy import Deployment
from dcnet.nodes import GATEWAY_PORT
from dcnet.prometheus import Prometheus, free_port

from distcache.cluster import DATA_NETS, Cluster
from distcache.rpc.shim import ShimLink
from distcache.wire import DC_PORT
from tests.e2e.targets import targets

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "tools" / "grafana" / "distcache-dashboard.json"
TARGETS = targets()
WINDOW = 10.0  # seconds of load over which the rates are compared
# how far apart the two may be: a scrape is stamped when it starts, and the exporter then reads every switch's
# counters over P4Runtime -- up to ~0.2 s on BMv2 under load, at each end of the window (5.04 % seen on BMv2)
RATE_TOLERANCE = 0.08
GRAFANA_VARS = {"$__rate_interval": "15s", "$__interval": "5s", "$__range": "1m"}


class Scraped:
    """A deployment under Prometheus, with what the test measured beside it."""

    def __init__(self, dep: Deployment, prom: Prometheus) -> None:
        self.dep, self.prom = dep, prom
        self.window: tuple[float, float] = (0.0, 0.0)  # (t_a, t_b), Unix time
        self.direct: dict[str, float] = {}  # counter rates over the window from the components themselves

    def query(self, expr: str, at: float | None = None) -> dict[tuple, float]:
        return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in self.prom.query(expr, at)}

    def one(self, expr: str, at: float | None = None) -> float:
        res = self.query(expr, at)
        assert len(res) == 1, f"{expr}: {res}"
        return next(iter(res.values()))


def _counts(dep: Deployment) -> dict[str, float]:
    """The counters the rates are compared on, read from the switches (controller API) and the shims."""
    st = dep.controller.ctl.status()  # type: ignore[union-attr]
    out = {
        "hits": float(sum(s.hits for s in st.switches)),
        "routed": float(sum(s.stats["ROUTED_SPINE"] + s.stats["ROUTED_LEAF"] for s in st.switches)),
    }
    out["shim_gets"] = float(
        sum(ShimLink(dep.shim_control(h)).stats()["requests"].get("GET", 0) for h in dep.cluster.servers())
    )
    return out


def _at(samples: list[tuple[float, dict[str, float]]], t: float, key: str) -> float:
    """Counter ``key`` at time ``t``, interpolated between the samples around it."""
    for (t0, c0), (t1, c1) in itertools.pairwise(samples):
        if t0 <= t <= t1:
            return c0[key] + (c1[key] - c0[key]) * (t - t0) / (t1 - t0)
    raise AssertionError(f"{t} is outside the samples ({samples[0][0]}..{samples[-1][0]})")


@pytest.fixture(scope="module", params=TARGETS)
def scraped(request: pytest.FixtureRequest) -> Iterator[Scraped]:
    cluster = Cluster(
        spines=2,
        storage_racks=2,
        client_racks=1,
        cache_slots=32,
        hh_threshold=4,
        metrics_address=f"127.0.0.1:{free_port()}",
    )
    with (
        Deployment(cluster, target=request.param) as dep,
        Prometheus(cluster, dep.run_dir, listen=f"127.0.0.1:{free_port()}", interval=1.0) as prom,
    ):
        s = Scraped(dep, prom)
        load: dict = {}

        def run() -> None:
            cfg = {"keys": 2000, "zipf": 0.99, "read_ratio": 0.95, "value_size": 32, "concurrency": 8}
            for msg in dep.bench(cluster.client(0, 0), {**cfg, "duration": WINDOW + 10, "load_keys": 2000}):
                if msg["type"] == "second" and msg["t"] == 0:
                    load["started"] = time.monotonic()
                elif msg["type"] == "report":
                    load["report"] = msg

        worker = threading.Thread(target=run)
        worker.start()
        deadline = time.monotonic() + 120
        while "started" not in load and worker.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(4)  # caches fill; the load settles
        samples = []  # (Unix time in the middle of the read, counts): every half second through the window
        while len(samples) < 2 or samples[-1][0] - samples[0][0] < WINDOW + 1:
            t0 = time.time()
            counts = _counts(dep)
            samples.append(((t0 + time.time()) / 2, counts))
            time.sleep(0.5)
        worker.join(120)
        assert "report" in load, f"the workload did not finish; see {dep.run_dir}"
        t_b = samples[-1][0]
        s.window = (t_b - WINDOW, t_b)
        s.direct = {k: (_at(samples, t_b, k) - _at(samples, t_b - WINDOW, k)) / WINDOW for k in samples[0][1]}
        dep.ctl("fail", "sp1", "--keep-running")  # an operator failover: the controller's series move
        dep.ctl("recover", "sp1")
        time.sleep(3)  # two scrapes after the last change
        yield s


def _by(rows: dict[tuple, float], label: str) -> dict[str, float]:
    return {dict(k)[label]: v for k, v in rows.items()}


def test_counters_equal_the_switches_the_shims_and_status(scraped: Scraped) -> None:
    dep = scraped.dep
    assert scraped.prom.targets_up()
    st = json.loads(dep.ctl("status", "--json"))
    switches = {s["name"]: s for s in st["switches"]}
    hits = _by(scraped.query("distcache_switch_read_hits_total"), "switch")
    misses = _by(scraped.query("distcache_switch_read_misses_total"), "switch")
    metered = _by(scraped.query("distcache_switch_reads_metered_total"), "switch")
    assert set(hits) == set(switches) and sum(hits.values()) > 1000
    for name, s in switches.items():
        assert hits[name] == s["hits"] and misses[name] == s["misses"], name
        assert metered[name] == s["stats"]["HIT_METERED"], name
    routed = scraped.query("distcache_switch_reads_routed_total")
    for key, v in routed.items():
        labels = dict(key)
        assert v == switches[labels["switch"]]["stats"][f"ROUTED_{labels['to'].upper()}"], labels
    assert sum(routed.values()) > 1000
    for key, v in scraped.query("distcache_switch_drops_total").items():
        labels = dict(key)
        assert v == switches[labels["switch"]]["drops"].get(labels["reason"].upper(), 0), labels
    for series, field in (
        ("distcache_switch_cache_occupied", "occupied"),
        ("distcache_switch_cache_insertions_total", "auto_inserted"),
        ("distcache_switch_digests_total", "digests"),
    ):
        got = _by(scraped.query(series), "switch")
        cache = {n: s[field] for n, s in switches.items() if s["role"] != "client_leaf"}
        assert got == cache, series
    assert sum(_by(scraped.query("distcache_switch_cache_insertions_total"), "switch").values()) > 0
    for host in dep.cluster.servers():
        reqs = ShimLink(dep.shim_control(host)).stats()["requests"]
        got = _by(scraped.query(f'distcache_shim_requests_total{{server="{host.name}"}}'), "op")
        assert got == {op: float(v) for op, v in reqs.items()}, host.name
    assert scraped.one("distcache_controller_failovers_total") == st["failovers"] >= 1
    assert scraped.one("distcache_controller_recoveries_total") == st["recoveries"] >= 1
    assert scraped.one("distcache_controller_epoch") == st["epoch"]
    assert scraped.one('distcache_controller_switch_failures_total{how="operator"}') == 1
    assert scraped.one("distcache_controller_failover_seconds_count") == 1


def test_rates_agree_with_the_components_own_counters(scraped: Scraped) -> None:
    t_a, t_b = scraped.window
    w = f"{round((t_b - t_a) * 1000)}ms"  # Prometheus wants a whole number of ms
    prom = {
        "hits": scraped.one(f"sum(rate(distcache_switch_read_hits_total[{w}]))", at=t_b),
        "routed": scraped.one(f"sum(rate(distcache_switch_reads_routed_total[{w}]))", at=t_b),
        "shim_gets": scraped.one(f'sum(rate(distcache_shim_requests_total{{op="GET"}}[{w}]))', at=t_b),
    }
    for k, direct in scraped.direct.items():
        assert direct > 20, (k, direct)
        assert abs(prom[k] - direct) <= RATE_TOLERANCE * direct, (k, prom[k], direct)


def test_every_dashboard_panel_has_data(scraped: Scraped) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    t_b = scraped.window[1]
    checked = 0
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for var, value in GRAFANA_VARS.items():
                expr = expr.replace(var, value)
            assert "$" not in expr, (panel["title"], expr)
            rows = scraped.prom.query(expr, at=t_b)
            assert rows, f"panel {panel['title']!r}: {expr} returned nothing"
            checked += 1
    assert checked >= len(dashboard["panels"]) >= 20


# -- what listens where --------------------------------------------------------------------------------


def _descendants(pids: set[int]) -> set[int]:
    """``pids`` and every process below them."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = set(), list(pids)
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo += children.get(p, [])
    return out


def _sockets(ss_output: str) -> list[tuple[str, str, int, set[int]]]:
    """``ss -tulnpH`` lines -> (tcp|udp, local address, port, owning pids)."""
    out = []
    for line in ss_output.splitlines():
        parts = line.split()
        if len(parts) < 5:
            continue
        host, _, port = parts[4].rpartition(":")
        host = host.strip("[]").split("%")[0]
        out.append((parts[0], host, int(port), {int(p) for p in re.findall(r"pid=(\d+)", line)}))
    return out


def _loopback(host: str) -> bool:
    if host in ("*", "0.0.0.0", "::"):
        return False
    ip = ipaddress.ip_address(host)
    mapped = getattr(ip, "ipv4_mapped", None)  # gRPC listens on ::ffff:127.0.0.1
    return (mapped or ip).is_loopback


def test_nothing_listens_outside_loopback_or_the_management_side(scraped: Scraped) -> None:
    dep = scraped.dep
    assert dep.net is not None
    bad = []
    for host in dep.cluster.hosts():
        node = dep.net[host.name]
        for proto, addr, port, pids in _sockets(node.cmd("ss -tulnpH")):
            if _loopback(addr):
                continue
            if proto in ("udp", "tcp") and host in dep.cluster.servers() and (addr, port) == (host.ip, DC_PORT):
                continue  # the storage server's DistCache service (datagrams, the stream path), on its own address
            owners = {Path(f"/proc/{p}/comm").read_text().strip() for p in pids if Path(f"/proc/{p}").exists()}
            gateway = host in dep.cluster.clients() and addr == host.ip and owners == {"distcache-gatew"}
            if gateway and ((proto, port) == ("tcp", GATEWAY_PORT) or proto == "udp"):
                # the client host's Redis-protocol gateway, on its own address: its Redis port, and the datagram
                # socket its fabric requests leave from (a reply is taken only from where its request went)
                continue
            bad.append(f"{host.name}: {proto} {addr}:{port}")
    # the root namespace: the deployment's processes (switches, agents, controller, Prometheus)
    ours = {sw.proc.pid for sw in dep.net.switches if getattr(sw, "proc", None) is not None}
    ours |= {pid for _, proc in dep._procs for pid in [proc.pid]}
    assert scraped.prom.proc is not None
    ours |= {scraped.prom.proc.pid}
    ours = _descendants(ours)
    root = subprocess.run(["ss", "-tulnpH"], capture_output=True, text=True, check=True).stdout
    seen = 0
    for proto, addr, port, pids in _sockets(root):
        if not pids & ours:
            continue
        seen += 1
        if _loopback(addr):
            continue
        names = {Path(f"/proc/{p}/comm").read_text().strip() for p in pids & ours if Path(f"/proc/{p}").exists()}
        if proto == "tcp" and addr in ("0.0.0.0", "*") and names <= {"simple_switch_g"}:
            continue  # BMv2's Thrift server binds every address and has no option to do otherwise (below)
        bad.append(f"root: {proto} {addr}:{port} {sorted(names)}")
    assert seen >= len(dep.cluster.switches()) + 2, root  # P4Runtime servers, controller, metrics at least
    assert not bad, bad
    # "every address" of the root namespace is loopback and the management side: no data-network address
    # there, and the switch ports there take nothing in (no IPv6, strict reverse-path filter)
    addrs = subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, check=True).stdout
    for ifc in json.loads(addrs):
        for a in ifc.get("addr_info", []):
            ip = ipaddress.ip_address(a["local"])
            assert not any(ip in net for net in DATA_NETS), (ifc["ifname"], a["local"])
    for sw in dep.net.switches:
        for intf in sw.intfList():
            if intf.name == "lo":
                continue
            assert Path(f"/proc/sys/net/ipv4/conf/{intf.name}/rp_filter").read_text().strip() == "1", intf.name
            assert Path(f"/proc/sys/net/ipv6/conf/{intf.name}/disable_ipv6").read_text().strip() == "1", intf.name
