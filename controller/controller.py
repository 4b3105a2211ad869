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
from concurrent import futures
from dataclasses import replace
from pathlib import Path

import grpc

from controller.configure import Configurer
from controller.failover import Failover
from controller.health import ControllerError, Health, failure_reason
from controller.instruments import Instruments
from controller.mechanism import Mechanisms
from controller.monitor import Monitor
from controller.partition import Partition
from controller.reconcile import Reconciler
from controller.sessions import LeafSessions
from controller.shims import Shims
from controller.state import ControllerState
from controller.timing import AGENT_STATUS_TIMEOUT, AGENT_TIMEOUT, READ_TIMEOUT
from distcache.cluster import Cluster, Host, Mechanism, Role, Switch, is_cache_switch
from distcache.hashing import key_bytes
from distcache.placement import cache_switches
from distcache.rpc.agent import AgentClient
from distcache.rpc.protos import agent_pb2
from harness.processes import SwitchProcesses
from p4rt.client import P4RuntimeError, SwitchConnection
from p4rt.p4info import load_p4info

log = logging.getLogger("controller")


class Controller:
    """The controller: its state, its connections, its lock, and the parts it is built from, each taking
    what it uses as arguments (none shares another's ``self``):

    * :class:`~controller.partition.Partition`: the spines in service, their buckets, what was pushed;
    * :class:`~controller.sessions.LeafSessions`: the client leaves' sessions and routes, stale configurations;
    * :class:`~controller.shims.Shims`: the partition, the switches down and the cached-key views for the
      shims, and the spines rejoining;
    * :class:`~controller.configure.Configurer`: client leaves and agents brought to the partition;
    * :class:`~controller.monitor.Monitor`: probe threads, data-plane probes, the health poll, what they saw;
    * :class:`~controller.failover.Failover`: declare dead, fail, recover;
    * :class:`~controller.mechanism.Mechanisms`: mechanism changes, Hybrid's replicated keys;
    * :class:`~controller.reconcile.Reconciler`: the thread that makes every change.

    This class wires them (in dependency order), starts and stops the threads, and is what the service,
    the status and the tests call.  It holds the cluster as it is now: the operator may change its mechanism
    (:meth:`set_mechanism`), and the parts that care read it through :meth:`current`.
    """

    def __init__(
        self,
        cluster: Cluster,
        p4info_path: str | Path,
        shim_address: Callable[[Host], str],
        device_config: bytes = b"",
        state_path: Path | None = None,
        procs: SwitchProcesses | None = None,
        grpc_host: str = "127.0.0.1",
    ) -> None:
        self.state_path = state_path
        self.state = ControllerState.load(state_path, cluster)
        self.cluster = cluster
        if self.state.mechanism:
            self.cluster = replace(cluster, mechanism=Mechanism[self.state.mechanism.upper()])
        self.p4info = load_p4info(p4info_path)
        self.shim_address = shim_address
        self.procs = procs
        self.grpc_host = grpc_host
        self.lock = threading.RLock()  # every change of state, partition or switch configuration
        self.readers: dict[str, SwitchConnection] = {}  # every switch: probes and counter reads
        self.agents: dict[str, AgentClient] = {}  # changes (Configure, Flush, ...): AGENT_TIMEOUT
        self.agent_status: dict[str, AgentClient] = {}  # Status only: AGENT_STATUS_TIMEOUT
        self.health = {sw.name: Health(alive=sw.name not in self.state.failed) for sw in cluster.switches()}
        self._stop = threading.Event()
        self._wake = threading.Event()  # the reconciler has something to do now
        self._threads: list[threading.Thread] = []
        # one pool per concern, so that none waits in another's queue: a failover's fence and configuration
        # never behind a warm-up's hundreds of inserts, nor the health poll behind either
        self._pool = futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="ctl-call")  # configure, push
        self._fence_pool = futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="ctl-fence")
        self._poll_pool = futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="ctl-poll")
        self._warm_pool = futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="ctl-warm")
        self.instruments = Instruments()  # failures and their timings, for the metrics exporter
        self.partition = Partition(cluster.switch_ids(Role.SPINE), self._failed_spines)
        self.sessions = LeafSessions(self.partition.spine_ids)
        self.shims = Shims(cluster, shim_address, self.agents, self.partition, self.sessions, procs, self._pool)
        self.configurer = Configurer(
            self.p4info,
            device_config,
            grpc_host,
            self.partition,
            self.sessions,
            self.agents,
            self.readers,
            self.health,
            self._pool,
            self._fence_pool,
        )
        self.monitor = Monitor(
            cluster,
            self.state,
            self.partition,
            self.sessions,
            self.shims,
            self.health,
            self.readers,
            self._reader,
            self.agent_status,
            shim_address,
            self.instruments,
            self._wake,
            self._stop,
            self._poll_pool,
        )
        self.failover = Failover(
            self.current,
            self.state,
            self._save,
            self.lock,
            self.partition,
            self.sessions,
            self.shims,
            self.configurer,
            self.monitor,
            self.agents,
            self.agent_status,
            procs,
            self.instruments,
            self._warm_pool,
            grpc_host,
        )
        self.mechanisms = Mechanisms(
            self.current,
            self._set_cluster,
            self.state,
            self._save,
            self.lock,
            self.configurer,
            self.agents,
            self.health,
        )
        self.reconciler = Reconciler(
            self.current, self.state, self.lock, self.monitor, self.failover, self.mechanisms, self.configurer
        )

    # -- the cluster as it is now, and what is derived from the state --------------------------------
    def current(self) -> Cluster:
        """The cluster with the mechanism in force (the parts read it through this)."""
        return self.cluster

    def _set_cluster(self, cluster: Cluster) -> None:
        self.cluster = cluster

    @property
    def replicated(self) -> set[bytes]:
        return self.state.replicated_keys()

    def _failed_spines(self) -> set[int]:
        """The spines out of service (the state's failed set; read by :attr:`partition`)."""
        return {
            sw.switch_id for sw in self.cluster.switches() if sw.role == Role.SPINE and sw.name in self.state.failed
        }

    def shim_down(self) -> list[int]:
        """The switches the shims may stop waiting for now (Shims.down)."""
        return self.shims.down(self.state.failed)

    def _save(self) -> None:
        self.state.save(self.state_path)

    def _reader(self, sw: Switch) -> SwitchConnection:
        conn = SwitchConnection(f"{self.grpc_host}:{sw.grpc_port}", sw.device_id, name=sw.name)
        conn.timeout = READ_TIMEOUT
        conn.use_p4info(self.p4info)
        return conn

    # -- bring-up, threads, shutdown -------------------------------------------------------------
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
                        self.configurer.configure_agent(self.cluster, sw, self.replicated)
                    else:
                        self.configurer.bring_up_client_leaf(self.cluster, sw, self.replicated, timeout)
                except (ConnectionError, P4RuntimeError, grpc.RpcError) as e:
                    # not fatal: the monitor declares a dead switch dead, the reconciler configures a late agent
                    self.sessions.stale[sw.name] = f"not reconciled at start: {failure_reason(e)}"
                    log.error("%s: not reconciled at start: %s", sw.name, failure_reason(e))

            # all at once, as Configurer.configure does: an agent that pushes a fresh switch its pipeline raises
            # its cache epoch, which waits for the clock to pass it (up to a second each; one after another the
            # start of a five-switch deployment spent four seconds in those waits)
            for job in [
                self._pool.submit(reconcile, sw) for sw in self.cluster.switches() if sw.name not in self.state.failed
            ]:
                job.result()
            self.shims.push(self.state.failed, self.state.epoch, views=True)
            self.partition.remember(self.partition.buckets())
        if monitor:
            for sw in self.cluster.switches():
                self._spawn(f"probe-{sw.name}", self.monitor.probe_loop, sw)
            self._spawn("dp-probe", self.monitor.dp_probe_loop)
            self._spawn("health", self.monitor.health_loop)
            self._spawn("reconcile", self.reconciler.loop)

    def _spawn(self, name: str, target: Callable[..., None], *args: object) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        for poke in self.monitor.poke.values():
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

    # -- what operators and the service ask for ------------------------------------------------------
    def fail(self, name: str, keep_running: bool = False) -> tuple[str, int, float]:
        """Take ``name`` out of service (Failover.fail)."""
        return self.failover.fail(name, keep_running)

    def recover(self, name: str, timeout: float = 30.0) -> tuple[str, int, float]:
        """Put ``name`` back in service (Failover.recover)."""
        return self.failover.recover(name, timeout)

    def set_mechanism(self, name: str) -> str:
        """Change the caching mechanism (Mechanisms.set_mechanism)."""
        return self.mechanisms.set_mechanism(name)

    def cache(self, key: str | bytes) -> dict[str, agent_pb2.CachedKey]:
        """Insert ``key`` by hand into every cache switch that should hold it (tests, operators)."""
        name = key_bytes(key)
        digest = self.cluster.digest(name)
        return {
            sw.name: self.agents[sw.name].cache(digest, name)
            for sw in cache_switches(self.cluster, self.partition.buckets(), digest, self.replicated)
        }

    def switch(self, name: str) -> Switch:
        """The switch called ``name``; ControllerError naming the switches there are if none is."""
        return self.failover.switch(name)


__all__ = ["Controller", "ControllerError"]
