"""The deployment's Prometheus exporter, served by the controller on the cluster's ``metrics_address``.

One scrape target for the whole deployment, in the root namespace, bound to loopback or a management
address like the operator API (``metrics_address``, checked as ``controller_address`` is):

* per switch, from its P4Runtime counters (``dc_stats``, ``dc_drops``, ``spine_deaths``) read at scrape
  time through the same :func:`controller.status.cluster_status` that ``distcache-ctl status`` uses --
  so every target has them, BMv2 included, and client leaves without an agent too -- and, for cache
  switches, its agent's figures (occupancy, insertions, evictions, digests);
* the controller's own: failures, failovers, recoveries, the epoch, detection and failover times;
* per shim: its series (:mod:`shim.metrics`), fetched over its Unix control socket -- shims live in the
  storage hosts' namespaces and listen on no TCP port -- and served here with their ``server`` label.

Names follow Prometheus' conventions (``distcache_…_total`` counters, ``_seconds``); labels carry switch,
server and spine names, roles, ops, statuses and reasons, never a key or anything else a client chose.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent import futures
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from controller.status import cluster_status
from distcache import p4names
from distcache.rpc.shim import ShimLink, ShimUnavailableError

if TYPE_CHECKING:
    from controller.controller import Controller

log = logging.getLogger("controller")

SHIM_TIMEOUT = 1.0  # seconds a scrape waits for one shim's series (a hung shim's are left out, not waited for)

# dc_stats indexes with a series of their own (the rest are in distcache_switch_dc_stats_total)
NAMED_STATS = {
    p4names.Stat.READ_HIT: (
        "distcache_switch_read_hits",
        "Reads this switch answered from its cache (dc_stats READ_HIT).",
    ),
    p4names.Stat.READ_MISS: (
        "distcache_switch_read_misses",
        "Reads for this switch's cache that it did not hold, sent on (dc_stats READ_MISS).",
    ),
    p4names.Stat.HIT_METERED: (
        "distcache_switch_reads_metered",
        "Reads it held a valid copy for but sent on: over its cache meter's rate (dc_stats HIT_METERED).",
    ),
    p4names.Stat.READ_REROUTED: (
        "distcache_switch_reads_rerouted",
        "Client leaves: reads whose chosen spine was dead in the data plane, sent another way (READ_REROUTED).",
    ),
}


class ClusterCollector(Collector):
    """Every series of the deployment, read at scrape time."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.pool = futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="metrics")

    def collect(self) -> Iterator[Metric]:
        yield from self._switches()
        yield from self._controller()
        yield from self._shims()

    # -- switches ------------------------------------------------------------------------------------
    def _switches(self) -> Iterator[Metric]:
        read = cluster_status(self.ctl, self.pool)
        sw_labels = ["switch", "role"]

        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=sw_labels)

        def counter(name: str, doc: str, *extra: str) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=[*sw_labels, *extra])

        up = gauge("distcache_switch_up", "1 while its P4Runtime server answers the controller.")
        service = gauge("distcache_switch_in_service", "1 unless failed (detected dead or by the operator).")
        load = gauge(
            "distcache_switch_load",
            "Reads per second it handled over the controller's last poll (targeted, at client leaves).",
        )
        buckets = gauge("distcache_switch_buckets", "Spines: spine-partition buckets it owns now.")
        named = {s: counter(name, doc) for s, (name, doc) in NAMED_STATS.items()}
        routed = counter(
            "distcache_switch_reads_routed",
            "Client leaves: reads sent to a cache, by the layer of the cache chosen (dc_stats ROUTED_*).",
            "to",
        )
        stats = counter(
            "distcache_switch_dc_stats",
            "Every index of the switch's dc_stats counter, by its name in p4src/include/define.p4.",
            "counter",
        )
        drops = counter("distcache_switch_drops", "Packets dropped, by reason (dc_drops).", "reason")
        deaths = counter(
            "distcache_switch_spine_deaths",
            "Leaves: deaths of each spine their data plane saw end (counter spine_deaths).",
            "spine",
        )
        agent_up = gauge("distcache_agent_up", "Cache switches: 1 while its agent answers.")
        slots = gauge("distcache_switch_cache_slots", "Cache switches: cache slots it has.")
        occupied = gauge("distcache_switch_cache_occupied", "Cache switches: slots holding a key.")
        insertions = counter(
            "distcache_switch_cache_insertions",
            "Cache switches: keys its agent inserted from hot-key reports (since the agent started).",
        )
        evictions = counter(
            "distcache_switch_cache_evictions",
            "Cache switches: keys its agent evicted (colder than a new hot key, or their bucket moved away).",
        )
        digests = counter(
            "distcache_switch_digests",
            "Cache switches: hot-key reports (heavy-hitter digests) its agent received.",
        )
        for st in read.cluster.switches:
            lv = [st.name, st.role]
            up.add_metric(lv, float(st.alive))
            service.add_metric(lv, float(not st.failed))
            load.add_metric(lv, st.load)
            if st.role == "spine":
                buckets.add_metric(lv, st.buckets)
            if st.stats:  # its counters were read (now, or by the last poll)
                for s, f in named.items():
                    f.add_metric(lv, st.stats[s.name])
                if st.role == "client_leaf":
                    routed.add_metric([*lv, "spine"], st.stats[p4names.Stat.ROUTED_SPINE.name])
                    routed.add_metric([*lv, "leaf"], st.stats[p4names.Stat.ROUTED_LEAF.name])
                for name, v in sorted(st.stats.items()):
                    stats.add_metric([*lv, name.lower()], v)
                for reason in p4names.DropReason:  # every reason, zeros too: a series that appears late loses its start
                    drops.add_metric([*lv, reason.name.lower()], st.drops.get(reason.name, 0))
            for spine, v in sorted(st.spine_deaths.items()):
                deaths.add_metric([*lv, spine], v)
            if st.name in self.ctl.agent_status:
                agent_up.add_metric(lv, float(st.agent_alive))
            a = read.agents.get(st.name)
            if a is not None:
                slots.add_metric(lv, a.slots)
                occupied.add_metric(lv, a.occupied)
                insertions.add_metric(lv, a.auto_inserted)
                evictions.add_metric(lv, a.evicted)
                digests.add_metric(lv, a.digests)
        yield from (up, service, load, buckets, *named.values(), routed, stats, drops, deaths)
        yield from (agent_up, slots, occupied, insertions, evictions, digests)

    # -- the controller ----------------------------------------------------------------------------------
    def _controller(self) -> Iterator[Metric]:
        ctl = self.ctl
        state = ctl.state
        yield CounterMetricFamily(
            "distcache_controller_failovers",
            "Spine failures handled (buckets moved), since the controller's state file was created.",
            value=state.failovers,
        )
        yield CounterMetricFamily(
            "distcache_controller_recoveries", "Switches brought back into service.", value=state.recoveries
        )
        yield GaugeMetricFamily(
            "distcache_controller_epoch",
            "The partition epoch: increases with every partition change.",
            value=state.epoch,
        )
        yield GaugeMetricFamily(
            "distcache_controller_failed_switches", "Switches out of service now.", value=len(state.failed)
        )
        yield GaugeMetricFamily(
            "distcache_controller_last_detection_seconds",
            "The last failure: the switch stopped answering -> declared dead.",
            value=state.last_detection_s,
        )
        yield GaugeMetricFamily(
            "distcache_controller_last_failover_seconds",
            "The last spine failure: declared dead -> partition moved everywhere.",
            value=state.last_failover_s,
        )
        mech = GaugeMetricFamily(
            "distcache_controller_mechanism", "The caching mechanism in force (1 for it).", labels=["mechanism"]
        )
        mech.add_metric([ctl.cluster.mechanism.name.lower()], 1.0)
        yield mech
        yield GaugeMetricFamily(
            "distcache_controller_replicated_keys",
            "Hybrid: keys replicated in every spine.",
            value=len(state.replicated),
        )
        yield from ctl.instruments.registry.collect()

    # -- the shims ---------------------------------------------------------------------------------------
    def _shims(self) -> Iterator[Metric]:
        """Each shim's exposition, parsed and served again: the families of every shim merged by name."""
        hosts = self.ctl.cluster.servers()
        texts = {h.name: self.pool.submit(self._shim_text, self.ctl.shim_address(h)) for h in hosts}
        up = GaugeMetricFamily("distcache_shim_up", "1 while its control socket answers.", labels=["server"])
        merged: dict[str, Metric] = {}
        for name, job in texts.items():
            text = job.result()
            up.add_metric([name], float(text is not None))
            for f in text_string_to_metric_families(text or ""):
                m = merged.setdefault(f.name, Metric(f.name, f.documentation, f.type, f.unit))
                m.samples.extend(f.samples)
        yield up
        yield from merged.values()

    @staticmethod
    def _shim_text(address: str) -> str | None:
        try:
            return ShimLink(address, timeout=SHIM_TIMEOUT).metrics().decode()
        except ShimUnavailableError:
            return None


def registry(ctl: Controller) -> CollectorRegistry:
    """A registry with every series of the deployment (the controller's instruments come through it)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ClusterCollector(ctl))
    return reg


def serve_metrics(ctl: Controller, address: str) -> None:
    """Serve the deployment's series over HTTP on ``address`` (``HOST:PORT``), at ``/metrics``."""
    host, _, port = address.rpartition(":")
    try:
        start_http_server(int(port), addr=host.strip("[]"), registry=registry(ctl))
    except OSError as e:
        raise OSError(f"cannot serve metrics on {address} ({e.strerror}); set metrics_address to a free port") from None
    log.info("metrics on http://%s/metrics", address)
