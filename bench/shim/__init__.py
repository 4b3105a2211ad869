"""Storage-server shim throughput and write latency, next to redis-benchmark: ``make bench-shim``.

Why: every cache miss and every write of a DistCache deployment goes through
the shim (``shim/``), a single asyncio process that speaks DistCache over UDP
in front of redis-server.  This harness measures what that costs against the
ceiling the same Redis reaches without the shim, on one machine and loopback
only, so a change to the shim can be judged by a ratio rather than by
absolute figures that depend on the machine.

What it runs, all of it its own and all of it stopped at the end (also on
Ctrl-C): a redis-server on a Unix socket in a temp dir (no TCP port, no
persistence); the shim as ``python -m shim`` on 127.0.0.1:8888 with its control
API on a Unix socket and ``--coherence-peer`` pointing at a UDP peer that
plays the switches (it reflects INVALIDATE/UPDATE as INVALIDATE_ACK/UPDATE_ACK,
like the tests' SwitchPeer); several load-generator processes running
``client_lib.AsyncClient``; a trivial asyncio UDP echo server.

What it measures:

* the load generators' own ceiling: GETs at the same concurrency against the
  echo server, which decodes each request and answers a valid reply, so a
  reader can see whether the generators, not the shim, limit the figures;
* shim GET throughput (keys preloaded, 32-byte values) and PUT throughput to
  keys no switch caches (no coherence traffic), each for ``--seconds``, with
  the latency under load and each process's CPU use over the window;
* ``redis-benchmark -t get,set -d 32`` on the same Redis at the same concurrency;
* write latency from one sequential client: PUT of an uncached key versus
  PUT of a key cached by switch 1 (made so with the shim's control API
  ``Populate``), which runs the two-phase coherence protocol with the peer.

Then, as root with Mininet (``--no-switch`` skips it): client-observed read
latency through the fabric for cache hits versus misses.  A small deployment
(dcnet.deploy: softswitch, agents, controller, shims, Redis; 2 spines, 2
storage racks, 16 cache slots) warms its caches with a Zipf-0.99 workload,
then one client reads sequentially, so the latencies are round trips, not
queueing: a hit is answered by a switch, a miss goes on to the shim and Redis.

``--profile DIR`` samples the shim with py-spy during the GET phase and
summarizes where a GET's time goes (``--profile-phase put``: a PUT's).  The last stdout line is
``shim_get_vs_redis=R shim_put_vs_redis=R hit_p50_us=N miss_p50_us=N uncached_put_p50_us=N cached_put_p50_us=N``
(``hit_p50_us=na miss_p50_us=na`` when the switch phase did not run;
``--json``: one JSON object with those keys and every figure instead).

The modules, one job each: ``config`` (shared facts), ``children`` (every process started, stopped at the
end), ``bed`` (redis-server, the shim, the generators), ``generators`` and ``servers`` (the spawned load
generators, coherence peer and echo server), ``load`` (timed load phases, Python or compiled generator),
``redis_benchmark`` (Redis's own ceiling), ``latency`` (sequential latency), ``fabric`` (latency through
Mininet), ``profile`` (py-spy categories), ``report`` (summary line and tables), ``run`` (the phases and the
command line, ``python -m bench.shim``).
"""

from __future__ import annotations

from bench.shim.fabric import switch_latency
from bench.shim.redis_benchmark import _rps
from bench.shim.report import summary_line
from bench.shim.run import main

__all__ = ["_rps", "main", "summary_line", "switch_latency"]  # what the bench-shim tests import (unit, e2e)
