"""A storage server (shim + its Redis) against the same redis-server alone, per request: ``make bench-shim``.

Why: every cache miss, every write and every Populate of a DistCache deployment goes through a storage
server's shim; the shim is worth its place only if the server it makes costs about what Redis alone costs.
One load generator (tools/storagebench, Go) drives both sides in one run, at the same concurrency, each as a
client on another host would reach it: the redis-server directly over TCP (RESP, one command at a time per
connection), and the shim over UDP (protocol v2), which reaches its own Redis on a Unix socket as on a
storage host.  Keys: 100 000 (uniform and Zipf 0.99), values 64-128 bytes.  Each redis-server in two rows:
without persistence, and with ``appendfsync always`` as deployments run it.

For GET, PUT of keys no switch caches and PUT of cached keys (both coherence phases, against a peer that
plays the switches), each row prints ops/s, p50/p99 and the CPU per request of the shim, of the redis-server
behind it (or driven directly), of both together and of the generator (user + system time from /proc over
the window), and Redis' own count of the row's command per request (INFO commandstats: every request reached
Redis).  The last line is the durable rows' summary (Zipf; the volatile one is printed above it)::

    storage_cpu_vs_redis_get=R storage_cpu_vs_redis_put=R shim_get_vs_redis=R shim_put_vs_redis=R
    shim_get_p50_vs_redis=R

(one line, wrapped here).

``storage_cpu_vs_redis``: CPU per request of shim + its redis-server over that of the redis-server driven
directly; ``shim_*_vs_redis``: throughput through the shim over the redis-server's driven directly;
``shim_get_p50_vs_redis``: the median GET latency through the shim over the direct one.

Modules: ``config`` (shared facts), ``children`` (every process, stopped at the end), ``bed`` (the
redis-servers, shims, peer and generator runs), ``run`` (the rows, the tables and the summary).
"""

from __future__ import annotations

from bench.shim.run import main, summary

__all__ = ["main", "summary"]
