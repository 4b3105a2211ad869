"""The controller's intervals and deadlines, and the reasons it gives for declaring a switch dead: what every
part of it shares (probes, failover, configuration, the health poll)."""

from __future__ import annotations

PROBE_INTERVAL = 0.25  # seconds between liveness probes of one switch
PROBE_TIMEOUT = 0.5
MISSES_TO_FAIL = 2  # failed probes in a row that declare a switch dead
# after a probe refused at once (nothing listens on the switch's port: its process is gone), the next one comes this
# soon, not PROBE_INTERVAL later: a crashed switch is declared dead ~0.2 s sooner, and every write waiting for
# its acknowledgements is answered that much sooner.  A probe that timed out (a hung or slow peer) keeps the pace.
REFUSED_RECHECK = 0.05
# a failed probe that took less than this was refused, not timed out: gRPC answers UNAVAILABLE both for a refused
# port and for a peer that accepts the connection and never answers, so only the time tells them apart
REFUSED_WITHIN = 0.1
DRAIN = 0.05  # after client leaves stop targeting a spine: reads already in flight to it finish
HEARTBEAT = 1.0  # agents and shims are checked (and reconfigured if they restarted) this often
# Data-plane probes (p4src/include/control/liveness.p4): one PROBE per client leaf and spine this often, sent
# into the leaf as a PacketOut; the leaves exclude a spine that stops answering by themselves, within
# DEAD_AFTER_US of a probe.  The controller reads the leaves' probe counters this often and declares a spine
# dead whose probes went unanswered DP_MISSES times in a row at every leaf (its data plane stopped, even if
# its P4Runtime server still answers).
DP_DEAD_REASON = "its data plane stopped answering the leaves' probes"
P4RT_DEAD_REASON = "its P4Runtime server stopped answering"
DP_CHECK_INTERVAL = 0.05
SPINE_DEATHS_KEPT = 1000  # the last spine deaths the client leaves reported (distcache-ctl status)
DEATH_DIGESTS = {"max_timeout_ns": 1_000_000, "max_list_size": 16, "ack_timeout_ns": 1_000_000_000}
DP_MISSES = 50  # 0.5 s of unanswered probes: a failover is costly, a slow round trip under load is not death
# a spine this many probes behind at every client leaf has its P4Runtime server probed at once, not at the
# next PROBE_INTERVAL: a crashed spine is declared about 0.1 s sooner, a slow one costs one Capabilities call
DP_POKE_MISSES = 3
RETRY = 1.0  # a configuration that failed, or a recovery that could not finish yet, is tried again this often
# Deadlines: no peer that hangs (a stopped process, a long GC pause) can hold the controller for longer.
READ_TIMEOUT = 1.0  # a P4Runtime read (counters) by the monitor or the Status API
WRITE_TIMEOUT = 10.0  # one P4Runtime call to a client leaf (a partition change is one Write per table)
# a failover's fence of one client leaf (one default write): a leaf that does not take it this soon (paused,
# wedged) is noted stale and fenced again by the reconciler, and the failover waits for it without the lock
# held (before: the write's 10 s, and a new session's 15 s, with the lock held -- a paused client leaf kept
# every other failure from being declared for that long)
FENCE_TIMEOUT = 1.0
AGENT_STATUS_TIMEOUT = 1.0  # an agent's Status: past it the agent is reported "not answering"
AGENT_TIMEOUT = 10.0  # an agent's Configure, Flush, Cache, Evict (Configure may push a pipeline)
