"""The DistCache controller: partitions, switch health, failover and recovery.

It runs as a daemon (``python -m controller``, :mod:`controller.service`) and
is off the query path: once entries are in, the data plane serves without it,
so reads and writes go on while it is down.

* **Client-rack leaves** have no agent: the controller is their P4Runtime
  primary and installs what :func:`p4rt.plan.plan` derives, the spine
  partition included.  On start it *reconciles* (reads the tables back and
  writes only the difference) and pushes a pipeline only to a switch that has
  none, so a controller restart leaves the data plane untouched.
* **Cache switches** (spines, storage-rack leaves) each have an agent
  (:mod:`agent`); the controller gives it the cluster, the
  partition and the spines in service.
* **Shims** get the partition, the switches declared down and the cached-key
  view (:mod:`shim.view` explains how they use them); a restarted shim gets
  them back at the next heartbeat.

**Failure handling.**  Every switch's P4Runtime server is probed a few times
a second (50 ms after a probe its port refused); two failed probes in a row
declare it dead.  A dead spine's buckets
move to the live spines by consistent hashing (only its buckets move).  The
order of the steps keeps every read correct; the argument rests on the shims'
invariant (every switch that may hold a valid copy of k is in the shim's
``cached[k]``, so writes invalidate it):

1. client leaves stop targeting the dead spine: first its bit in their
   liveness_config's ``fenced`` mask (one write each; every read path,
   transit included, leaves a fenced spine out), then the partition, replica
   and transit entries, with the storage leaves' through their agents: no read
   can be *served* by it once the fence is everywhere;
2. after a short drain, the shims learn the new partition and that the spine
   is down: writes stop waiting for its acks (its copies may now go stale, but
   nothing reads them).  This comes as soon as every client leaf took the
   fence, before the entries of step 1 are written (hundreds per leaf: 0.8 s on
   a loaded BMv2), else once every client leaf took the whole step;
3. the live spines' agents get the new partition: their detectors report the
   moved buckets' hot keys, and those are filled through the shims, so they
   are in ``cached[k]`` before they can be valid.

Step 2 waits for step 1 everywhere: if a client leaf in service cannot take
the new routes (its write fails or times out, another client took its
mastership), the failover stops there and is retried every second, reported
in ``distcache-ctl status`` and the log.  Whatever pushes to the shims, the
switches they may skip come from one place (:meth:`controller.shims.Shims.down`): a
failed spine is left out while any client leaf may still send it reads (the
last routes it took include it, or a write to it is under way), unless that
leaf's process is known to be gone (a new one starts empty).  A leaf that
hangs and is declared dead therefore keeps the shims waiting until it has been
given routes without the spine.

Recovery runs the other way: the shims stop skipping the spine *before* its
agent flushes its cache (so nothing it caches afterwards can be missed by a
write), then the hottest keys of the buckets it gets back are cached at it
(off the lock; every push meanwhile keeps it out of the down-set), then the
partition moves back, leaves route to it, and the spines that held its
buckets evict their keys.  A spine whose process was restarted
comes back empty anyway; one that was only unreachable may hold copies that
went stale meanwhile, which the flush removes.  An agent that restarted while
its switch was failed has had no configuration: recovery gives it one before
the flush.

**Monitoring.**  Each switch has its own probe thread, so nothing slow stands
between a switch's death and its detection; agents, counters and shims are
polled by another thread, every call with a short deadline (a hung agent is
reported "agent: not answering" and not waited for); every change is made by a
third, the reconciler, which also retries what failed and recovers detected
failures that answer again without ever waiting for one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import grpc

from controller.health import failure_reason
from controller.reconcile import Reconciler
from controller.timing import AGENT_STATUS_TIMEOUT, AGENT_TIMEOUT
from distcache.cluster import Switch, is_cache_switch
from distcache.hashing import wire_key
from distcache.placement import cache_switches
from distcache.rpc.agent import AgentClient
from distcache.rpc.protos import agent_pb2
from p4rt.client import P4RuntimeError

log = logging.getLogger("controller")


class Controller(Reconciler):
    """The controller: bring-up, the threads that watch and act, shutdown.  Each job is one class, a
    layer that uses only what its base classes define (so mypy checks every layer on its own):

    * :class:`~controller.core.Core`: state, connections, lock, and the parts that take what they use as
      arguments: :class:`~controller.partition.Partition` (spines in service, buckets, what was pushed),
      :class:`~controller.sessions.LeafSessions` (client leaves' sessions and routes, stale configurations),
      :class:`~controller.shims.Shims` (partition, switches down and cached-key views for the shims),
      :class:`~controller.configure.Configurer` (client leaves and agents brought to the partition);
    * :class:`~controller.monitor.Monitor` (Core): probe threads, data-plane probes, health poll, status;
    * :class:`~controller.failover.Failover` (Monitor): declare dead, fail, recover;
    * :class:`~controller.mechanism.Mechanisms` (Core): mechanism changes, Hybrid's replicated keys;
    * :class:`~controller.reconcile.Reconciler` (Failover, Mechanisms): the thread that makes every change.
    """

    def start(self, timeout: float = 15.0, monitor: bool = True) -> None:
        """Reconcile every reachable switch, agent and shim with the saved state; then watch them."""
        with self.lock:
            for sw in self.cluster.switches():
                self.readers[sw.name] = self._reader(sw)
                if is_cache_switch(sw):
                    address = self.cluster.agent_address(sw)
                    self.agents[sw.name] = AgentClient(address, timeout=AGENT_TIMEOUT)
                    self.agent_status[sw.name] = AgentClient(address, timeout=AGENT_STATUS_TIMEOUT)

            def reconcile(sw: Switch) -> None:
                if not self.readers[sw.name].probe(1.0):
                    log.error("%s: not answering at start; the monitor will declare it dead", sw.name)
                    return
                try:
                    if is_cache_switch(sw):
                        self.agents[sw.name].wait_ready(timeout)
                        self._configure_agent(sw)
                    else:
                        self._bring_up_client_leaf(sw, timeout)
                except (ConnectionError, P4RuntimeError, grpc.RpcError) as e:
                    # not fatal: the monitor declares a dead switch dead, the reconciler configures a late agent
                    self.sessions.stale[sw.name] = f"not reconciled at start: {failure_reason(e)}"
                    log.error("%s: not reconciled at start: %s", sw.name, failure_reason(e))

            # all at once, as _configure does: an agent that pushes a fresh switch its pipeline raises its cache
            # epoch, which waits for the clock to pass it (up to a second each; one after another the start of a
            # five-switch deployment spent four seconds in those waits)
            for job in [
                self._pool.submit(reconcile, sw) for sw in self.cluster.switches() if sw.name not in self.state.failed
            ]:
                job.result()
            self._push_shims(views=True)
            self.partition.remember(self.partition.buckets())
        if monitor:
            for sw in self.cluster.switches():
                self._spawn(f"probe-{sw.name}", self._probe_loop, sw)
            self._spawn("dp-probe", self._dp_probe_loop)
            self._spawn("health", self._health_loop)
            self._spawn("reconcile", self._reconcile_loop)

    def _spawn(self, name: str, target: Callable[..., None], *args: object) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    # -- manual cache placement (tests, operators) -----------------------------------------------
    def cache(self, key: str | bytes) -> dict[str, agent_pb2.CachedKey]:
        """Insert ``key`` by hand into every cache switch that should hold it."""
        wkey = wire_key(key)
        return {
            sw.name: self.agents[sw.name].cache(wkey)
            for sw in cache_switches(self.cluster, self.partition.buckets(), wkey, self.replicated)
        }

    # -- shutdown ---------------------------------------------------------------------------------
    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        for poke in self._poke.values():
            poke.set()
        for t in self._threads:
            t.join(3)
        for pool in (self._pool, self._fence_pool, self._poll_pool, self._warm_pool):
            pool.shutdown(wait=False, cancel_futures=True)
        self.sessions.close_all()
        for conn in self.readers.values():
            conn.close()
        self.readers.clear()
        for a in [*self.agents.values(), *self.agent_status.values()]:
            a.close()
        self.agents.clear()
        self.agent_status.clear()
