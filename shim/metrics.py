"""The shim's Prometheus series: what it served, how long it took, what coherence cost.

A shim lives in its storage host's network namespace and reaches the control plane only over its
Unix control socket, so it does not listen on HTTP: it renders its series in Prometheus' text format
for the control API's ``Metrics`` call, and the controller's exporter (:mod:`controller.metrics`),
in the root namespace, serves them with a ``server`` label beside the switches' and its own.

Counters the shim keeps anyway (requests, errors, coherence messages) are read at scrape time; the
latencies are kept here as bucket counts (``LatencyHistogram``: a bisect and an add per request, a
fraction of what ``prometheus_client.Histogram`` takes under its lock, which matters at 50 k GET/s on
one event loop).  No label carries a key, a value or anything else a client chose: ops and statuses
are the wire format's enums, reasons and kinds the shim's own words.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from shim.server import Shim

# kinds every shim exports from the start, zeros included (a series that appears late loses its first rise)
ERROR_KINDS = ("overload", "rate_limited", "redis_unavailable", "invalidate_timeout", "busy", "stream_busy")
DUPLICATE_KINDS = ("replayed", "in_progress", "replayed_after_restart")

# seconds: a request served from Redis takes 0.1-2 ms here; coherence and the rate limiter's queue up to 1 s
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class LatencyHistogram:
    """Observations counted into ``LATENCY_BUCKETS`` (each count is of its own bucket, not cumulative)."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one: above the largest bound (+Inf)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative (le, count) pairs as Prometheus wants them, ending with +Inf."""
        out, running = [], 0
        for bound, count in zip((*(str(b) for b in LATENCY_BUCKETS), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, float(running)))
        return out


class LatencyByLabel:
    """One :class:`LatencyHistogram` per label value (an op, a phase), made on first use."""

    def __init__(self) -> None:
        self.by: dict[str, LatencyHistogram] = {}

    def observe(self, label: str, seconds: float) -> None:
        h = self.by.get(label)
        if h is None:
            h = self.by[label] = LatencyHistogram()
        h.observe(seconds)

    def family(self, name: str, doc: str, label: str, server: str) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(name, doc, labels=["server", label])
        for value, h in sorted(self.by.items()):
            fam.add_metric([server, value], h.buckets(), h.total)
        return fam


class ShimMetrics:
    """What the shim records for its series besides its own counters: replies by op and status, and
    the latencies (request, server-rate queue, a write's two coherence phases)."""

    def __init__(self) -> None:
        self.replies: Counter[tuple[str, str]] = Counter()  # (op, status) -> replies sent
        self.request_seconds = LatencyByLabel()  # op -> received until answered
        self.queue_seconds = LatencyHistogram()  # waits in the server rate's queue (server_rate)
        self.phase_seconds = LatencyByLabel()  # "invalidate" (a write's phase 1), "update" (phase 2)

    def replied(self, op: str, status: str, seconds: float) -> None:
        self.replies[op, status] += 1
        self.request_seconds.observe(op, seconds)


class ShimCollector(Collector):
    """The series of one shim, read from it at scrape time (``Shim.stats`` and ``Shim.metrics``)."""

    def __init__(self, shim: Shim) -> None:
        self.shim = shim

    def collect(self) -> Iterator[Metric]:
        shim, m = self.shim, self.shim.metrics
        st = shim.stats()
        server = st["server"]

        def counter(name: str, doc: str, label: str, values: dict[str, int]) -> CounterMetricFamily:
            fam = CounterMetricFamily(name, doc, labels=["server", label])
            for k, v in sorted(values.items()):
                fam.add_metric([server, k], v)
            return fam

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            fam = GaugeMetricFamily(name, doc, labels=["server"])
            fam.add_metric([server], value)
            return fam

        yield counter(
            "distcache_shim_requests", "Requests received, by op (before any is refused).", "op", st["requests"]
        )
        replies = CounterMetricFamily(
            "distcache_shim_replies", "Replies sent, by op and status.", labels=["server", "op", "status"]
        )
        for (op, status), v in sorted(m.replies.items()):
            replies.add_metric([server, op, status], v)
        yield replies
        yield counter(
            "distcache_shim_errors",
            "Requests that failed or were refused, by kind.",
            "kind",
            {**dict.fromkeys(ERROR_KINDS, 0), **st["errors"]},
        )
        yield counter(
            "distcache_shim_malformed", "Datagrams dropped as malformed, by reason.", "reason", st["malformed"]
        )
        yield counter(
            "distcache_shim_refused",
            "Malformed requests answered at once (TOO_LARGE, BAD_REQUEST), by status.",
            "status",
            st["refused"],
        )
        yield counter(
            "distcache_shim_duplicates",
            "Retried writes not applied again (answered again, or still in progress).",
            "kind",
            {**dict.fromkeys(DUPLICATE_KINDS, 0), **st["duplicates"]},
        )
        yield gauge(
            "distcache_shim_dedup_entries",
            "Writes remembered for the retry span (past distcache_shim_dedup_capacity new writes are refused BUSY).",
            st["dedup"]["entries"],
        )
        yield gauge(
            "distcache_shim_dedup_capacity", "Writes the dedup table's memory bound holds.", st["dedup"]["capacity"]
        )
        yield gauge(
            "distcache_shim_stream_bytes",
            "Bytes of requests and replies in flight on the stream path (past distcache_shim_stream_budget: BUSY).",
            st["stream"]["bytes"],
        )
        yield gauge(
            "distcache_shim_stream_budget", "The stream path's bound on bytes in flight.", st["stream"]["budget"]
        )
        yield gauge("distcache_shim_stream_connections", "Stream-path connections open.", st["stream"]["connections"])
        c = st["coherence"]
        yield counter(
            "distcache_shim_coherence_messages",
            "Coherence exchanges started, by phase (1: invalidate, 2: update), one per path.",
            "phase",
            {"invalidate": c["invalidates"], "update": c["updates"]},
        )
        yield counter(
            "distcache_shim_coherence_failures",
            "Coherence exchanges that ended without an acknowledgement, by phase.",
            "phase",
            {"invalidate": c["failed_invalidates"], "update": c["failed_updates"]},
        )
        yield _single_counter(
            "distcache_shim_coherence_retransmits",
            "Coherence messages sent again (no ack in time).",
            server,
            c["retransmits"],
        )
        yield _single_counter(
            "distcache_shim_coherence_stray_acks", "Acknowledgements nobody waited for.", server, c["stray_acks"]
        )
        yield _single_counter(
            "distcache_shim_rate_spent",
            "Request-equivalents admitted under the server's rate (requests, and 2 per coherence path of a "
            "cached key's write); 0 without a rate limit.",
            server,
            st["rate_spent"],
        )
        yield gauge(
            "distcache_shim_rate_limit",
            "The server's rate (server_rate, request-equivalents per second); 0: no limit.",
            float(shim.cluster.server_rate),
        )
        yield _single_counter(
            "distcache_shim_redis_restarts",
            "Times its redis-server came back as a new process.",
            server,
            st["redis_restarts"],
        )
        yield gauge("distcache_shim_redis_up", "1 while its redis-server answers.", 0.0 if st["redis_down"] else 1.0)
        yield gauge(
            "distcache_shim_cached_keys", "Keys some switch may cache, as this shim knows them.", st["cached_keys"]
        )
        yield gauge(
            "distcache_shim_view_known",
            "1 once it knows which switches cache which of its keys.",
            float(st["view_known"]),
        )
        yield gauge("distcache_shim_epoch", "The controller's partition epoch it holds.", float(st["epoch"]))
        yield m.request_seconds.family(
            "distcache_shim_request_seconds", "Received until answered, by op.", "op", server
        )
        queue = HistogramMetricFamily(
            "distcache_shim_queue_seconds", "Time a request waited in the server rate's queue.", labels=["server"]
        )
        queue.add_metric([server], m.queue_seconds.buckets(), m.queue_seconds.total)
        yield queue
        yield m.phase_seconds.family(
            "distcache_shim_coherence_phase_seconds",
            "A write's phase 1 (invalidate every copy) and phase 2 (update the copies), by phase.",
            "phase",
            server,
        )


def _single_counter(name: str, doc: str, server: str, value: float) -> CounterMetricFamily:
    fam = CounterMetricFamily(name, doc, labels=["server"])
    fam.add_metric([server], value)
    return fam


def exposition(shim: Shim) -> bytes:
    """The shim's series in Prometheus' text format (what ``Metrics`` answers)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ShimCollector(shim))
    return generate_latest(registry)


def stats_of(shim: Shim) -> dict:
    """A shim's counters and state, as its Stats RPC answers them (distcache/proto/shim.proto ShimStats)."""
    c, view = shim.coherence.stats, shim.view
    return {
        "server": shim.server.name,
        "requests": dict(shim.requests),
        "malformed": dict(shim.malformed),
        "refused": dict(shim.refused),
        "errors": dict(shim.errors),
        "duplicates": dict(shim.duplicates),
        "dedup": {"entries": len(shim.dedup), "capacity": shim.dedup.capacity, "span": shim.dedup.span},
        "redis_restarts": shim.redis_restarts,
        # request-equivalents admitted under the server's rate (requests and coherence); 0 with no limit
        "rate_spent": round(shim.limiter.spent, 1) if shim.limiter is not None else 0.0,
        "redis_down": shim.redis_down,
        "resynced": dict(shim.resynced),
        "evicted": dict(shim.evicted),
        "stream": {
            "bytes": max(0, shim.stream.budget.used),
            "budget": shim.stream.budget.limit,
            "connections": shim.stream.connections,
        },
        "cached_keys": len(view.cached),
        "view_known": view.view_known,
        "unknown_switches": view.unknown_switches,
        "incarnation": view.incarnation,
        "epoch": view.epoch,
        "down": sorted(view.down),
        "coherence": {
            "invalidates": c.invalidates,
            "updates": c.updates,
            "retransmits": c.retransmits,
            "failed_invalidates": c.failed_invalidates,
            "failed_updates": c.failed_updates,
            "stray_acks": c.stray_acks,
        },
    }
