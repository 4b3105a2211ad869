"""What the controller measures as it acts, for its Prometheus series: failures, detection and failover times.

The counters it keeps anyway (failovers, recoveries, the epoch) live in its state file and are read at
scrape time (:mod:`controller.metrics`); what only happens as events -- a switch declared dead, how
long that took, how long moving its buckets took, how fast a leaf's data plane found a spine dead -- is
observed here into prometheus_client's histograms and counters, on the controller's own registry (not
the process-wide default one: tests run several controllers in one process).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# seconds: the data plane finds a spine dead in tens of ms, the controller in 0.3-0.6 s, a failover moves
# its buckets in 0.1-0.3 s; a stuck one shows in the last buckets
DETECTION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0)


class Instruments:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.switch_failures = Counter(
            "distcache_controller_switch_failures",
            "Switches taken out of service, by how: detected (probes or the data plane) or operator.",
            ["how"],
            registry=self.registry,
        )
        for how in ("detected", "operator"):
            self.switch_failures.labels(how)  # both series exist from the start (rate() needs the zero)
        self.detection_seconds = Histogram(
            "distcache_controller_detection_seconds",
            "A failure detected by the controller: the switch stopped answering -> declared dead.",
            registry=self.registry,
            buckets=DETECTION_BUCKETS,
        )
        self.failover_seconds = Histogram(
            "distcache_controller_failover_seconds",
            "A spine's failover: declared dead or failed by the operator -> its buckets moved everywhere.",
            registry=self.registry,
            buckets=DETECTION_BUCKETS,
        )
        self.leaf_detection_seconds = Histogram(
            "distcache_leaf_spine_detection_seconds",
            "A spine's death as a client leaf's data plane saw it: last packet heard -> found dead "
            "(reported by the leaf when the spine was heard again).",
            registry=self.registry,
            buckets=DETECTION_BUCKETS,
        )
