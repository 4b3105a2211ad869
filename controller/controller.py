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
  view (:mod:`shim.server` explains how they use them); a restarted shim gets
  them back at the next heartbeat.

**Failure handling.**  Every switch's P4Runtime server is probed a few times
a second; two failed probes in a row declare it dead.  A dead spine's buckets
move to the live spines by consistent hashing (only its buckets move).  The
order of the steps keeps every read correct; the argument rests on the shims'
invariant (every switch that may hold a valid copy of k is in the shim's
``cached[k]``, so writes invalidate it):

1. storage leaves (through their agents) and client leaves send transit
   traffic through a live spine, and client leaves stop targeting the dead
   spine: no read can be *served* by it from here on;
2. after a short drain, the shims learn the new partition and that the spine
   is down: writes stop waiting for its acks (its copies may now go stale, but
   nothing reads them);
3. the live spines' agents get the new partition: their detectors report the
   moved buckets' hot keys, and those are filled through the shims, so they
   are in ``cached[k]`` before they can be valid.

Step 2 waits for step 1 everywhere: if a client leaf in service cannot take
the new routes (its write fails or times out, another client took its
mastership), the failover stops there and is retried every second, reported
in ``distcache-ctl status`` and the log.  Whatever pushes to the shims, the
switches they may skip come from one place (:meth:`Controller.shim_down`): a
failed spine is left out while any client leaf may still send it reads (the
last routes it took include it, or a write to it is under way), unless that
leaf's process is known to be gone (a new one starts empty).  A leaf that
hangs and is declared dead therefore keeps the shims waiting until it has been
given routes without the spine.

Recovery runs the other way: the shims stop skipping the spine *before* its
agent flushes its cache (so nothing it caches afterwards can be missed by a
write), then the partition moves back, leaves route to it, and the spines
that held its buckets evict their keys.  A spine whose process was restarted
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

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc

from controller import hybrid
from controller.state import ControllerState, Failure
from distcache import p4names as n
from distcache.api import agent_pb2
from distcache.cluster import Cluster, Host, Mechanism, Role, Switch, is_cache_switch
from distcache.hashing import wire_key
from distcache.partition import cache_switches, spine_buckets
from distcache.rpc.agent import AgentClient
from distcache.rpc.shim import ShimLink, ShimRequestError, ShimUnavailableError
from harness.processes import SwitchProcessError, SwitchProcesses
from p4rt.client import P4RuntimeError, SwitchConnection, load_p4info
from p4rt.plan import SwitchPlan, plan
from p4rt.probes import DP_PROBE_INTERVAL, ProbeLedger, SpineDeath, probe_round, read_probe_counts, spine_deaths
from p4rt.reconcile import apply_plan

log = logging.getLogger("controller")

PROBE_INTERVAL = 0.25  # seconds between liveness probes of one switch
PROBE_TIMEOUT = 0.5
MISSES_TO_FAIL = 2  # failed probes in a row that declare a switch dead
DRAIN = 0.05  # after client leaves stop targeting a spine: reads already in flight to it finish
HEARTBEAT = 1.0  # agents and shims are checked (and reconfigured if they restarted) this often
# Data-plane probes (p4src/include/control/liveness.p4): one PROBE per client leaf and spine this often, sent
# into the leaf as a PacketOut; the leaves exclude a spine that stops answering by themselves, within
# DEAD_AFTER_US of a probe.  The controller reads the leaves' probe counters this often and declares a spine
# dead whose probes went unanswered DP_MISSES times in a row at every leaf (its data plane stopped, even if
# its P4Runtime server still answers).
DP_DEAD_REASON = "its data plane stopped answering the leaves' probes"
DP_CHECK_INTERVAL = 0.05
SPINE_DEATHS_KEPT = 1000  # the last spine deaths the client leaves reported (distcache-ctl status)
DEATH_DIGESTS = {"max_timeout_ns": 1_000_000, "max_list_size": 16, "ack_timeout_ns": 1_000_000_000}
DP_MISSES = 50  # 0.5 s of unanswered probes: a failover is costly, a slow round trip under load is not death
RETRY = 1.0  # a configuration that failed, or a recovery that could not finish yet, is tried again this often
# Deadlines: no peer that hangs (a stopped process, a long GC pause) can hold the controller for longer.
READ_TIMEOUT = 1.0  # a P4Runtime read (counters) by the monitor or the Status API
WRITE_TIMEOUT = 10.0  # one P4Runtime call to a client leaf (a partition change is one Write per table)
AGENT_STATUS_TIMEOUT = 1.0  # an agent's Status: past it the agent is reported "not answering"
AGENT_TIMEOUT = 10.0  # an agent's Configure, Flush, Cache, Evict (Configure may push a pipeline)


class ControllerError(RuntimeError):
    """An operator request the controller cannot carry out; the message says what to do instead."""


def why(e: BaseException) -> str:
    """One line saying why a call to a switch, agent or shim failed."""
    if isinstance(e, grpc.RpcError):
        code = e.code()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return "no answer in time (DEADLINE_EXCEEDED)"
        return f"{code.name}: {e.details()}"
    return str(e)


@dataclass
class Health:
    """What the monitor last saw of one switch (written by its probe thread and the health poll, read by
    the Status API without any lock: each field is replaced whole)."""

    alive: bool = True
    misses: int = 0
    first_miss: float = 0.0
    detected: tuple[float, float] | None = None  # probes declared it dead: (stopped answering, decided)
    dp_detected: tuple[float, float] | None = None  # its data plane stopped answering the leaves' probes
    agent_alive: bool | None = None  # its agent answered its last Status (None: not asked yet)
    agent_error: str = ""  # why it did not
    agent: agent_pb2.AgentStatus | None = None
    stats: dict[int, tuple[int, int]] = field(default_factory=dict)  # dc_stats as last read
    drops: dict[int, tuple[int, int]] = field(default_factory=dict)  # dc_drops as last read
    samples: list[tuple[float, int]] = field(default_factory=list)  # (time, reads) for the load
    recover_tried: float = 0.0  # last automatic recovery attempt (monotonic)


class Controller:
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
        self.device_config = device_config
        self.shim_address = shim_address
        self.procs = procs
        self.grpc_host = grpc_host
        self.lock = threading.RLock()  # every change of state, partition or switch configuration
        self.leaves: dict[str, SwitchConnection] = {}  # client-rack leaves, as primary
        self.readers: dict[str, SwitchConnection] = {}  # every switch: probes and counter reads
        self.agents: dict[str, AgentClient] = {}  # changes (Configure, Flush, ...): AGENT_TIMEOUT
        self.agent_status: dict[str, AgentClient] = {}  # Status only: AGENT_STATUS_TIMEOUT
        self.health = {sw.name: Health() for sw in cluster.switches()}
        self._stop = threading.Event()
        self._wake = threading.Event()  # the reconciler has something to do now
        self._threads: list[threading.Thread] = []
        self._pool = futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="ctl-call")
        self._buckets_pushed: list[int] | None = None  # the partition the switches hold
        # switch -> why its last configuration failed (retried every RETRY s); a client leaf in here may
        # still route reads by an older partition.  Single dict operations only (the GIL makes them atomic).
        self._stale: dict[str, str] = {}
        # client leaf -> the spines in service in the last plan it took: it may send reads to those only
        self._leaf_live: dict[str, frozenset[int]] = {}
        self._election: dict[str, int] = {}  # client leaf -> our election id there, when not 1
        self._failover_pending = False  # a failover stopped before the shims: a client leaf kept old routes
        self._recovering: set[str] = set()  # switches a recover() is bringing back (one at a time each)
        self._shims_behind: dict[str, bool] = {}  # shim host -> needs its view again (else: partition only)
        self.probes = ProbeLedger(DP_MISSES)  # the client leaves' probe counters, as last read
        self.dp_dead: set[int] = set()  # spines whose probes go unanswered at every client leaf
        self._dp_silent_since: dict[int, float] = {}  # spine id -> when the ledger first found it silent
        self.spine_deaths: deque[SpineDeath] = deque(maxlen=SPINE_DEATHS_KEPT)  # reported by the client leaves
        for name in self.state.failed:
            self.health[name].alive = False

    # -- derived views --------------------------------------------------------------------
    def spine_ids(self) -> list[int]:
        return [self.cluster.spine(i).switch_id for i in range(self.cluster.spines)]

    @property
    def replicated(self) -> set[bytes]:
        return {bytes.fromhex(k) for k in self.state.replicated}

    def live_spines(self) -> set[int]:
        failed = {self.cluster.switch(name).switch_id for name in self.state.failed}
        return set(self.spine_ids()) - failed

    @property
    def buckets(self) -> list[int]:
        return spine_buckets(self.spine_ids(), self.live_spines())

    def _save(self) -> None:
        self.state.save(self.state_path)

    # -- bring-up ---------------------------------------------------------------------------
    def start(self, timeout: float = 15.0, monitor: bool = True) -> None:
        """Reconcile every reachable switch, agent and shim with the saved state; then watch them."""
        with self.lock:
            for sw in self.cluster.switches():
                self.readers[sw.name] = self._reader(sw)
                if is_cache_switch(sw):
                    address = self.cluster.agent_address(sw)
                    self.agents[sw.name] = AgentClient(address, timeout=AGENT_TIMEOUT)
                    self.agent_status[sw.name] = AgentClient(address, timeout=AGENT_STATUS_TIMEOUT)
            for sw in self.cluster.switches():
                if sw.name in self.state.failed:
                    continue
                if not self.readers[sw.name].probe(1.0):
                    log.error("%s: not answering at start; the monitor will declare it dead", sw.name)
                    continue
                try:
                    if is_cache_switch(sw):
                        self.agents[sw.name].wait_ready(timeout)
                        self._configure_agent(sw)
                    else:
                        self._bring_up_client_leaf(sw, timeout)
                except (ConnectionError, P4RuntimeError, grpc.RpcError) as e:
                    # not fatal: the monitor declares a dead switch dead, the reconciler configures a late agent
                    self._stale[sw.name] = f"not reconciled at start: {why(e)}"
                    log.error("%s: not reconciled at start: %s", sw.name, why(e))
            self._push_shims(views=True)
            self._remember_buckets(self.buckets)
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

    def _reader(self, sw: Switch) -> SwitchConnection:
        conn = SwitchConnection(f"{self.grpc_host}:{sw.grpc_port}", sw.device_id, name=sw.name)
        conn.timeout = READ_TIMEOUT
        conn.use_p4info(self.p4info)
        return conn

    def _bring_up_client_leaf(self, sw: Switch, timeout: float = 15.0, replicated: set[bytes] | None = None) -> None:
        """A new primary session with the client leaf (also after a restart, a lost stream or a lost
        mastership), its pipeline if it has none, and its entries brought to the plan."""
        old = self.leaves.pop(sw.name, None)
        if old is not None:
            old.close()  # first: a switch refuses a second session with the same election id
        conn = self._leaf_session(sw, timeout)
        try:
            if conn.has_pipeline():
                conn.use_p4info(self.p4info)
            else:
                conn.set_pipeline(self.p4info, self.device_config)
                log.info("%s: pipeline pushed", sw.name)
            writes = self._apply_leaf(sw, conn, replicated)
            conn.enable_digest(n.SPINE_DEATH_DIGEST, **DEATH_DIGESTS)
        except BaseException:
            conn.close()
            raise
        self.leaves[sw.name] = conn
        log.info("%s: reconciled (%d entries written)", sw.name, writes)

    def _leaf_session(self, sw: Switch, timeout: float) -> SwitchConnection:
        """A primary P4Runtime session with a client leaf.  Its election id is 1 unless the leaf has seen
        higher ones (another client took mastership, then left): when nobody is primary, the next id above
        the highest the switch has seen takes mastership back; when another client is primary, the
        controller does not fight it (the error says another controller holds it)."""
        eid = self._election.get(sw.name, 1)
        for attempt in range(2):
            conn = SwitchConnection(f"{self.grpc_host}:{sw.grpc_port}", sw.device_id, election_id=eid, name=sw.name)
            conn.timeout = WRITE_TIMEOUT
            try:
                conn.connect(timeout)
                return conn
            except P4RuntimeError:
                arb = conn.arbitration
                conn.close()
                past = (arb.election_id.high << 64 | arb.election_id.low) if arb is not None else 0
                if (
                    attempt
                    or arb is None
                    or arb.status.code != grpc.StatusCode.NOT_FOUND.value[0]
                    or past < eid
                    or past + 1 >= 1 << 64
                ):
                    raise
                eid = self._election[sw.name] = past + 1
                log.warning(
                    "%s: nobody is primary and it has seen election ids up to %d: taking mastership with %d",
                    sw.name,
                    past,
                    eid,
                )
        raise AssertionError("unreachable")

    def _apply_leaf(self, sw: Switch, conn: SwitchConnection, replicated: set[bytes] | None = None) -> int:
        """Bring a client leaf's tables to the plan, keeping track of the spines it may send reads to:
        while the write is under way, those of the old plan and the new one; after it, the new one's."""
        live = frozenset(self.live_spines())
        self._leaf_live[sw.name] = self._leaf_live.get(sw.name, frozenset(self.spine_ids())) | live
        writes = apply_plan(conn, self._plan(sw, replicated))
        self._leaf_live[sw.name] = live
        self._stale.pop(sw.name, None)
        return writes

    def _plan(self, sw: Switch, replicated: set[bytes] | None = None) -> SwitchPlan:
        return plan(
            self.cluster, sw, self.buckets, self.live_spines(), self.replicated if replicated is None else replicated
        )

    def _configure_agent(self, sw: Switch, replicated: set[bytes] | None = None) -> agent_pb2.AgentStatus:
        st = self.agents[sw.name].configure(
            self.cluster, self.buckets, self.live_spines(), self.replicated if replicated is None else replicated
        )
        self._stale.pop(sw.name, None)
        log.info("%s: configured by its agent (%d cached keys)", sw.name, st.occupied)
        return st

    def _configure(self, roles: set[Role], replicated: set[bytes] | None = None) -> dict[str, str]:
        """Bring every switch in service of ``roles`` to the current partition and spines in service
        (and Hybrid's ``replicated`` keys, default: the current ones), all at once; returns those that
        could not be, with why.  They stay in ``_stale`` and the reconciler tries them again every
        RETRY s; an agent the health poll found not answering is not waited for, only retried."""

        def one(sw: Switch) -> None:
            if is_cache_switch(sw):
                h = self.health[sw.name]
                if h.agent_alive is False:
                    raise ConnectionError("waiting for its agent to answer (its last Status did not come back)")
                self._configure_agent(sw, replicated)
            elif (
                sw.name in self.leaves
                and sw.name not in self._stale
                and not self.leaves[sw.name].stream_closed.is_set()
            ):
                self._apply_leaf(sw, self.leaves[sw.name], replicated)
            else:  # never reached, or its last write failed: a new session (it may have lost mastership)
                self._bring_up_client_leaf(sw, replicated=replicated)

        jobs = {
            sw.name: self._pool.submit(one, sw)
            for sw in self.cluster.switches()
            if sw.role in roles and sw.name not in self.state.failed
        }
        failed: dict[str, str] = {}
        for name, job in jobs.items():
            try:
                job.result()
            except (ConnectionError, grpc.RpcError, P4RuntimeError) as e:
                failed[name] = self._stale[name] = why(e)
                log.error("%s: not reconfigured: %s", name, why(e))
        return failed

    # -- shims ------------------------------------------------------------------------------
    def _push_shims(self, views: bool = False, only: list[Host] | None = None, up: int | None = None) -> None:
        """Partition, switches down (minus ``up``, which is coming back) and, with ``views``, cached keys.

        A view names the switches it is complete for (their agents answered: every key they cache
        is in it) and the incarnation of the shim it was collected for, read before collecting: a
        shim that restarted meanwhile refuses it (a copy validated through its previous life after
        the collection would be missing), and gets the next round's.
        """
        hosts = only or self.cluster.servers()
        links = {h.name: ShimLink(self.shim_address(h)) for h in hosts}
        incarnations: dict[str, int] = {}
        cached: dict[str, dict[bytes, list[int]]] = {}
        complete: set[int] = set()
        if views:
            for h in hosts:
                try:
                    incarnations[h.name] = int(links[h.name].stats().get("incarnation", 0))
                except (ShimUnavailableError, ShimRequestError) as e:
                    log.warning("%s: shim not updated: %s", h.name, e)
            for name, agent in self.agents.items():
                if name in self.state.failed:
                    continue
                try:
                    st = agent.status(with_keys=True)
                except grpc.RpcError as e:
                    log.warning("%s: agent unreachable, its keys are not in the view: %s", name, e.code())
                    continue
                if not (st.configured and st.switch_connected):
                    # a restarted agent knows its switch's entries only once connected and configured (it reads
                    # them back then): its empty list now would tell a shim the switch caches nothing
                    log.info("%s: agent not configured yet, its keys are not in the view", name)
                    continue
                complete.add(st.switch_id)
                for k in st.keys:
                    server = self.cluster.server_for_key(k.key).name
                    cached.setdefault(server, {}).setdefault(bytes(k.key), []).append(st.switch_id)
        spines = {self.cluster.spine(i).switch_id for i in range(self.cluster.spines)}
        for host in hosts:
            if views and host.name not in incarnations:
                continue
            try:
                link = links[host.name]
                link.partition(self.buckets, [d for d in self.shim_down() if d != up], self.state.epoch)
                if views:
                    mine = spines | {self.cluster.storage_leaf(host.rack).switch_id}
                    link.view(cached.get(host.name, {}), sorted(complete & mine), incarnations[host.name])
            except (ShimUnavailableError, ShimRequestError) as e:
                log.warning("%s: shim not updated: %s", host.name, e)

    def shim_down(self) -> list[int]:
        """The switches the shims may stop waiting for: every failed switch, except a failed spine that a
        client leaf may still send reads to (step 2 of the failover waits for step 1 everywhere).

        A client leaf may send reads to the spines in service in the last plan it took (both plans while
        one is being written; every spine if it never took one from this controller), unless its process
        is known to be gone (a new one starts without a pipeline, and gets the current plan first).
        """
        out = []
        for name in list(self.state.failed):
            sw = self.cluster.switch(name)
            if sw.role != Role.SPINE or not self.routing_to(sw):
                out.append(sw.switch_id)
        return sorted(out)

    def routing_to(self, spine: Switch) -> list[str]:
        """The client leaves that may still send reads to ``spine``."""
        every = frozenset(self.spine_ids())
        return [
            sw.name
            for sw in self.cluster.switches()
            if sw.role == Role.CLIENT_LEAF
            and spine.switch_id in self._leaf_live.get(sw.name, every)
            and not self._known_stopped(sw.name)
        ]

    def _known_stopped(self, name: str) -> bool:
        return self.procs is not None and name in self.procs and not self.procs.running(name)

    # -- failures -----------------------------------------------------------------------------
    def _failover(self) -> tuple[int, list[str]]:
        """Move the buckets of failed spines to live ones (steps in the module docstring); returns how many
        moved and the client leaves the failover now waits for (empty: done)."""
        before = self._last_buckets()
        self.state.epoch += 1
        self._save()
        self._failover_pending = True
        waiting = self._continue_failover()
        after = self.buckets
        self._remember_buckets(after)
        return sum(a != b for a, b in zip(before, after, strict=True)), waiting

    def _continue_failover(self, configure: bool = True) -> list[str]:
        """The failover's steps: step 1 (idempotent; without ``configure`` the reconciler has just retried
        the leaves that missed it), and no step after it until every client leaf in service has taken the
        new routes (until then the shims keep waiting for the failed spines' acks, so writes invalidate
        whatever those spines still hold).  Returns the client leaves it waits for; the reconciler calls
        it again every RETRY s until there are none."""
        if configure:
            self._configure({Role.STORAGE_LEAF, Role.CLIENT_LEAF})
        waiting = sorted(
            name
            for name in list(self._stale)
            if name not in self.state.failed and self.cluster.switch(name).role == Role.CLIENT_LEAF
        )
        if waiting:
            (log.error if configure else log.debug)(
                "failover waits for %s to take the new routes; until then the shims keep waiting for the acks "
                "of %s (retried every %.0fs)",
                ", ".join(waiting),
                ", ".join(sorted(self.state.failed)),
                RETRY,
            )
            return waiting
        time.sleep(DRAIN)
        self._push_shims()
        self._configure({Role.SPINE})
        if self._failover_pending:
            self._failover_pending = False
            log.info(
                "failover complete: %s",
                ", ".join(f"{s.name} routed away" for s in self._spines() if s.name in self.state.failed),
            )
        return []

    def _spines(self) -> list[Switch]:
        return [self.cluster.spine(i) for i in range(self.cluster.spines)]

    def _last_buckets(self) -> list[int]:
        return self._buckets_pushed or spine_buckets(self.spine_ids())

    def _remember_buckets(self, buckets: list[int]) -> None:
        self._buckets_pushed = list(buckets)

    def declare_dead(self, sw: Switch, since: float, reason: str, decided: float | None = None) -> None:
        """``sw`` stopped answering at ``since`` and was found dead at ``decided`` (monotonic; default: now)."""
        with self.lock:
            self.health[sw.name].detected = None
            if sw.name in self.state.failed:
                return
            t = time.monotonic()
            decided = t if decided is None else decided
            self.state.failed[sw.name] = Failure(admin=False, since=time.time(), reason=reason)
            self.state.last_detection_s = decided - since
            self.health[sw.name].alive = False
            log.warning("%s declared dead after %.2fs: %s", sw.name, decided - since, reason)
            if sw.role == Role.SPINE:
                moved, waiting = self._failover()
                self.state.failovers += 1
                self.state.last_failover_s = time.monotonic() - t
                log.warning(
                    "%s: %d buckets moved to live spines in %.2fs%s",
                    sw.name,
                    moved,
                    self.state.last_failover_s,
                    f" (waiting for {', '.join(waiting)})" if waiting else "",
                )
            self._save()

    def fail(self, name: str, keep_running: bool = False) -> tuple[str, int, float]:
        """Operator: take ``name`` out of service, and stop its process if the deployment lets the
        controller do so and ``keep_running`` is not asked for (a drain: the switch stays up, serves
        nothing, and is flushed before it serves again).

        A spine is drained first and stopped after: its buckets move while it still forwards, so no read
        is sent to a switch that is already gone (stopped first, every read the leaves sent it until they
        found it dead was lost and retried).  Stopping it then is a crash of a failed spine, which the
        protocol allows at any time (docs/protocol.md, "Failover")."""
        sw = self._switch(name)
        t = time.monotonic()
        with self.lock:
            if name in self.state.failed:
                raise ControllerError(
                    f"{name} is already failed ({self.state.failed[name].reason}); use `distcache-ctl recover {name}`"
                )
            if sw.role == Role.SPINE and self.live_spines() == {sw.switch_id}:
                raise ControllerError(
                    f"{name} is the last spine in service: without it no rack reaches another; "
                    "recover another spine first"
                )
            stopped = self.procs is not None and name in self.procs and not keep_running
            self.state.failed[name] = Failure(
                admin=True, since=time.time(), reason="failed by the operator", stopped=stopped
            )
            moved, waiting = 0, list[str]()
            if sw.role == Role.SPINE:
                moved, waiting = self._failover()
                self.state.failovers += 1
                self.state.last_failover_s = time.monotonic() - t
            if stopped:
                assert self.procs is not None
                self.procs.stop(name)
                self.health[name].alive = False
            self._save()
        what = "process stopped" if stopped else "out of service, its process keeps running"
        msg = f"{name}: {what}; {moved} buckets moved to live spines"
        if waiting:
            msg += (
                f"; {', '.join(waiting)} did not take the new routes yet: writes keep invalidating {name} "
                f"until they do (retried every {RETRY:.0f} s; see `distcache-ctl status`)"
            )
        return msg, moved, time.monotonic() - t

    def recover(self, name: str, timeout: float = 30.0) -> tuple[str, int, float]:
        """Operator (or the reconciler, for a detected failure that came back): put ``name`` back.

        Waiting for the switch (and its agent) happens outside the lock, so failures elsewhere are
        handled meanwhile.  An agent that restarted while its switch was failed has had no configuration
        (only switches in service get one from the reconciler): recover gives it one first.
        """
        sw = self._switch(name)
        t = time.monotonic()
        with self.lock:
            failure = self.state.failed.get(name)
            if failure is None:
                raise ControllerError(f"{name} is not failed; nothing to recover (see `distcache-ctl status`)")
            if name in self._recovering:
                raise ControllerError(f"{name} is being recovered already; see `distcache-ctl status`")
            self._recovering.add(name)
        try:
            if failure.stopped and self.procs is not None and not self.procs.running(name):
                try:
                    self.procs.start(name)
                except SwitchProcessError as e:
                    raise ControllerError(f"cannot start {name} again: {e}") from None
            self._wait_back(sw, timeout)
            with self.lock:
                before = self.buckets
                if sw.role == Role.SPINE:
                    # the shims stop skipping it before its cache is flushed (it still owns no bucket), so
                    # nothing it caches from now on can be missed by a write; then routes lead to it
                    self._push_shims(up=sw.switch_id)
                    self._flush(sw)
                    self.state.failed.pop(name)
                    self.state.epoch += 1
                    self._save()
                    self._push_shims()
                    self._configure({Role.STORAGE_LEAF, Role.CLIENT_LEAF})
                    self._configure({Role.SPINE})
                    self._remember_buckets(self.buckets)
                else:
                    # configured first, in service after: a client leaf's routes are current before the
                    # shims may count on them (shim_down)
                    self._stale.pop(name, None)
                    try:
                        if sw.role == Role.CLIENT_LEAF:
                            self._bring_up_client_leaf(sw)
                        else:
                            self._configure_agent(sw)
                    except (ConnectionError, grpc.RpcError, P4RuntimeError) as e:
                        raise ControllerError(f"{name} answers but could not be configured: {why(e)}") from None
                    self.state.failed.pop(name)
                    self._save()
                    self._push_shims()
                h = self.health[name]
                h.alive, h.misses, h.detected = True, 0, None
                self.state.recoveries += 1
                self._save()
                moved = sum(a != b for a, b in zip(before, self.buckets, strict=True))
        finally:
            with self.lock:
                self._recovering.discard(name)
        return f"{name}: back in service; {moved} buckets moved back to it", moved, time.monotonic() - t

    def _flush(self, sw: Switch) -> None:
        try:
            st = self.agents[sw.name].flush()
            log.info("%s: cache flushed before it serves again (%d keys left)", sw.name, st.occupied)
        except grpc.RpcError as e:
            raise ControllerError(
                f"{sw.name}: its agent could not flush the cache ({why(e)}); start "
                f"the agent (python -m agent --switch {sw.name} ...) and retry"
            ) from None

    def _wait_back(self, sw: Switch, timeout: float) -> None:
        """Until the switch answers again and, for a cache switch, its agent is configured and connected to
        it; an agent that says it has no configuration (it restarted while its switch was failed) is
        configured here, with the partition as it stands (its switch still owns nothing)."""
        deadline = time.monotonic() + timeout
        missing = "its P4Runtime server does not answer"
        while True:
            probe = self._reader(sw)
            back = probe.probe(PROBE_TIMEOUT)
            probe.close()
            if back and not is_cache_switch(sw):
                return
            if back:
                st = self.poll_agent(sw.name)  # also tells the health view that it answers again
                if st is None:
                    missing = (
                        f"its agent at {self.cluster.agent_address(sw)} does not answer "
                        f"({self.health[sw.name].agent_error})"
                    )
                elif not st.configured:
                    log.info("%s: its agent restarted while the switch was failed; configuring it", sw.name)
                    try:
                        with self.lock:
                            self._configure_agent(sw)
                        continue
                    except grpc.RpcError as e:
                        missing = f"its agent could not be configured ({why(e)})"
                elif st.switch_connected:
                    return
                else:
                    missing = "its agent is not connected to it yet"
            else:
                missing = f"its P4Runtime server at {self.grpc_host}:{sw.grpc_port} does not answer"
            if time.monotonic() >= deadline:
                raise ControllerError(f"{sw.name} is not back after {timeout:.0f}s: {missing}; start it first")
            time.sleep(0.2)

    def set_mechanism(self, name: str) -> str:
        try:
            mech = Mechanism[name.upper()]
        except KeyError:
            raise ControllerError(
                f"unknown mechanism {name!r}; use one of {', '.join(m.name.lower() for m in Mechanism)}"
            ) from None
        with self.lock:
            old = self.cluster.mechanism
            self.cluster = replace(self.cluster, mechanism=mech)
            self.state.mechanism = mech.name.lower()
            if mech != Mechanism.HYBRID:
                self.state.replicated = []
            self._save()
            # Reads first take the new routes, then the caches are reshaped (agents evict what they no longer
            # own, detectors report what they now should cache).  Every order is safe for coherence (the
            # shims invalidate every switch in cached[k], whatever the mechanism); this one spares misses.
            self._configure({Role.CLIENT_LEAF})
            time.sleep(DRAIN)
            self._configure({Role.STORAGE_LEAF, Role.SPINE})
        return f"mechanism {old.name.lower()} -> {mech.name.lower()}"

    # -- Hybrid: replicate the keys too hot for two copies -----------------------------------------
    def rebalance_hybrid(self) -> tuple[set[bytes], set[bytes]]:
        """Re-choose Hybrid's replicated keys from the measured rates; returns (added, removed).

        Order: the spines first may hold the union (so no configure evicts a key being added),
        each new key is cached in every live spine (filled through its shim, so it is in the
        shim's cached[k] before a copy is valid), then client leaves spread the new keys' reads
        over the spines and stop spreading the dropped ones', and after a drain the spines drop
        the copies they no longer own.
        """
        with self.lock:
            if self.cluster.mechanism != Mechanism.HYBRID:
                return set(), set()
            statuses: dict[str, agent_pb2.AgentStatus] = {}
            for name, agent in self.agents.items():
                if name not in self.state.failed and self.health[name].agent_alive is not False:
                    try:
                        statuses[name] = agent.status(with_keys=True)
                    except grpc.RpcError:
                        continue
            current = self.replicated
            new = hybrid.choose(
                hybrid.key_rates(statuses.values()), current, hybrid.threshold(self.cluster), hybrid.limit(self.cluster)
            )
            added, removed = new - current, current - new
            spines = [sw for sw in self.cluster.switches() if sw.role == Role.SPINE and sw.name in statuses]
            if added:
                self._configure({Role.SPINE}, current | new)
            # every replicated key in every spine: the new ones, and any a spine could not take before
            # (its cache was full of keys too young to evict) or lost (a restart)
            for sw in spines:
                have = {bytes(k.key) for k in statuses[sw.name].keys}
                for key in sorted(new - have):
                    try:
                        self.agents[sw.name].cache(key)
                    except grpc.RpcError as e:
                        log.warning("%s: replica of %s not cached: %s", sw.name, key.hex(), e.code())
            if not added and not removed:
                return added, removed
            self.state.replicated = sorted(k.hex() for k in new)
            self._save()
            self._configure({Role.CLIENT_LEAF})
            if removed:
                time.sleep(DRAIN)
            self._configure({Role.SPINE})
            log.info("hybrid: %d keys replicated (+%d, -%d)", len(new), len(added), len(removed))
            return added, removed

    def _switch(self, name: str) -> Switch:
        try:
            return self.cluster.switch(name)
        except KeyError:
            raise ControllerError(
                f"no switch named {name!r}; switches: {', '.join(sw.name for sw in self.cluster.switches())}"
            ) from None

    # -- monitoring -----------------------------------------------------------------------------
    # Nothing slow may stand between a switch's death and its detection, so the work is split:
    # * one probe thread per switch: P4Runtime Capabilities every PROBE_INTERVAL, PROBE_TIMEOUT each;
    #   it only records what it sees (a hung peer delays its own probe, nobody else's);
    # * the health poll: agents' Status, counters and shims' stats every HEARTBEAT, each call with a
    #   short deadline and all at once; it caches what it reads (the Status API answers from it when a
    #   live read does not come in time) and notes what needs work;
    # * the reconciler: every change (failover, recovery, configuration retries, shim pushes), under
    #   the lock, woken by the other two; a recovery that cannot finish yet returns at once and is
    #   tried again RETRY s later.
    def _probe_loop(self, sw: Switch) -> None:
        while not self._stop.wait(PROBE_INTERVAL):
            try:
                self._probe(sw)
            except Exception:
                log.exception("%s: probe handling failed", sw.name)

    def _probe(self, sw: Switch) -> None:
        h = self.health[sw.name]
        reader = self.readers[sw.name]
        ok = reader.probe(PROBE_TIMEOUT)
        if ok:
            h.misses, h.alive, h.detected = 0, True, None
            if sw.name in self.state.failed:
                self._wake.set()  # it may come back
            return
        self.readers[sw.name] = self._reader(sw)  # a fresh channel: no reconnect backoff hides its return
        reader.close()
        now = time.monotonic()
        if h.misses == 0:
            h.first_miss = now - PROBE_INTERVAL / 2  # it stopped answering somewhere since the last good probe
        h.misses += 1
        failure = self.state.failed.get(sw.name)
        if failure is not None and failure.reason == DP_DEAD_REASON and h.misses >= MISSES_TO_FAIL:
            # failed for its data plane, now its process is gone too: it comes back unconfigured (no probe
            # answers until recovered), so recover it like a crashed switch once it answers
            self.state.failed[sw.name] = replace(failure, reason="its P4Runtime server stopped answering")
        if h.misses >= MISSES_TO_FAIL and h.alive:
            h.alive = False
            if sw.name not in self.state.failed:
                h.detected = (h.first_miss, now)
                self._wake.set()

    def _dp_probe_loop(self) -> None:
        """Probe every spine's data plane through every client leaf, and watch the answers."""
        seq, next_check = 0, time.monotonic()
        spines = self._spines()
        while not self._stop.wait(DP_PROBE_INTERVAL):
            for name, conn in list(self.leaves.items()):
                with contextlib.suppress(P4RuntimeError):  # its stream is down: the reconciler brings it back
                    seq = probe_round(conn, self.cluster.switch(name), spines, seq)
                self._take_deaths(name, conn)
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + DP_CHECK_INTERVAL
                try:
                    self._dp_check()
                except Exception:
                    log.exception("data-plane probe check failed")

    def _take_deaths(self, name: str, conn: SwitchConnection) -> None:
        """Keep the spine deaths client leaf ``name`` reported since the last look."""
        try:
            deaths = spine_deaths(conn, self.cluster.switch(name), self.cluster, time.time())
        except P4RuntimeError:
            return
        for d in deaths:
            log.info(
                "%s: %s was dead in its data plane: found dead %.1f ms after it was last heard, silent %.0f ms",
                d.leaf,
                d.spine,
                d.detect_s * 1e3,
                d.silent_s * 1e3,
            )
        self.spine_deaths.extend(deaths)

    def _dp_check(self) -> None:
        """Read the client leaves' probe counters; a spine silent at all of them is declared dead."""
        for name in list(self.leaves):
            try:
                self.probes.update(name, read_probe_counts(self.readers[name]))
            except P4RuntimeError:
                continue
        now = time.monotonic()
        dead = self.probes.dead(self.spine_ids())
        for sid in dead - set(self._dp_silent_since):
            self._dp_silent_since[sid] = now - DP_MISSES * DP_PROBE_INTERVAL
        for sid in set(self._dp_silent_since) - dead:
            del self._dp_silent_since[sid]
        self.dp_dead = dead
        for sw in self._spines():
            if sw.switch_id in dead and sw.name not in self.state.failed and self.health[sw.name].dp_detected is None:
                self.health[sw.name].dp_detected = (self._dp_silent_since[sw.switch_id], now)
                self._wake.set()

    def _health_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._poll()
            except Exception:
                log.exception("health poll failed")
            self._stop.wait(HEARTBEAT)

    def read_stats(self, name: str) -> tuple[dict[int, tuple[int, int]], dict[int, tuple[int, int]]]:
        """dc_stats and dc_drops of switch ``name``, read now (READ_TIMEOUT each)."""
        reader = self.readers[name]
        return reader.read_counter(n.DC_STATS), reader.read_counter(n.DC_DROPS)

    def read_deaths(self, name: str) -> dict[str, int]:
        """Leaf ``name``'s spine_deaths counter by spine name (deaths that ended), read now."""
        out, spines = {}, set(self.spine_ids())
        for sid, (packets, _) in self.readers[name].read_counter(n.SPINE_DEATHS).items():
            if packets and sid in spines:
                out[self.cluster.switch_by_id(sid).name] = packets
        return out

    def poll_agent(self, name: str) -> agent_pb2.AgentStatus | None:
        """The agent's Status now (AGENT_STATUS_TIMEOUT), kept in its Health; None if it did not answer."""
        h = self.health[name]
        try:
            st = self.agent_status[name].status()
        except grpc.RpcError as e:
            hung = e.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            h.agent_alive, h.agent_error = False, f"no reply within {AGENT_STATUS_TIMEOUT:g} s" if hung else why(e)
            return None
        h.agent, h.agent_alive, h.agent_error = st, True, ""
        return st

    def _poll(self) -> None:
        now = time.monotonic()
        agents = {name: self._pool.submit(self.poll_agent, name) for name in self.agent_status}
        reads = {
            sw.name: self._pool.submit(self.read_stats, sw.name)
            for sw in self.cluster.switches()
            if sw.name not in self.state.failed
        }
        for name, job in agents.items():
            st = job.result()
            if st is None:
                continue
            if not st.configured and name not in self.state.failed and name not in self._stale:
                log.warning("%s: its agent restarted; configuring it again", name)
                self._stale[name] = "its agent restarted"
            if name in self._stale:
                self._wake.set()
        for name, read in reads.items():
            try:
                stats, drops = read.result()
            except (P4RuntimeError, ValueError):  # ValueError: its reader was replaced (closed) meanwhile
                continue
            sw = self.cluster.switch(name)
            h = self.health[name]
            h.stats, h.drops = stats, drops
            idx = (
                (n.Stat.ROUTED_SPINE, n.Stat.ROUTED_LEAF)
                if sw.role == Role.CLIENT_LEAF
                else (n.Stat.READ_HIT, n.Stat.READ_MISS)
            )
            h.samples = ([*h.samples, (now, sum(stats.get(int(i), (0, 0))[0] for i in idx))])[-2:]
        for name, conn in list(self.leaves.items()):
            if conn.stream_closed.is_set() and name not in self.state.failed and name not in self._stale:
                log.warning("%s: lost its stream (restarted?); reconnecting", name)
                self._stale[name] = "lost its P4Runtime stream (restarted?)"
                self._wake.set()
        down = self.shim_down()
        for host in self.cluster.servers():
            try:
                st = ShimLink(self.shim_address(host), timeout=2.0).stats()
            except ShimUnavailableError:
                continue
            if not st.get("view_known") or st.get("epoch") != self.state.epoch:
                if not self._shims_behind.get(host.name):
                    log.warning(
                        "%s: shim restarted or behind (epoch %s); sending partition and view",
                        host.name,
                        st.get("epoch"),
                    )
                self._shims_behind[host.name] = True
                self._wake.set()
            elif sorted(st.get("down", [])) != down:
                self._shims_behind.setdefault(host.name, False)
                self._wake.set()

    def _reconcile_loop(self) -> None:
        last_beat = 0.0
        while not self._stop.is_set():
            self._wake.wait(RETRY)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._reconcile()
                if self.cluster.mechanism == Mechanism.HYBRID and time.monotonic() - last_beat >= HEARTBEAT:
                    last_beat = time.monotonic()
                    self.rebalance_hybrid()
            except Exception:
                log.exception("reconciliation failed")

    def _reconcile(self) -> None:
        """Act on what the probes and the health poll found, most urgent first."""
        for sw in self.cluster.switches():
            detected = self.health[sw.name].detected
            if detected is not None:
                self.declare_dead(sw, detected[0], "its P4Runtime server stopped answering", detected[1])
            dp = self.health[sw.name].dp_detected
            if dp is not None:
                self.health[sw.name].dp_detected = None
                self.declare_dead(sw, dp[0], DP_DEAD_REASON, dp[1])
        for sw in self.cluster.switches():
            self._maybe_recover(sw)
        for name in list(self._stale):
            self._retry(name)
        if self._failover_pending:
            with self.lock:
                if self._failover_pending:
                    self._continue_failover(configure=False)
        if self._shims_behind:
            with self.lock:
                behind = {name: self._shims_behind.pop(name) for name in list(self._shims_behind)}
                hosts = [h for h in self.cluster.servers() if h.name in behind]
                if any(behind[h.name] for h in hosts):
                    self._push_shims(views=True, only=[h for h in hosts if behind[h.name]])
                if not all(behind[h.name] for h in hosts):
                    self._push_shims(only=[h for h in hosts if not behind[h.name]])

    def _maybe_recover(self, sw: Switch) -> None:
        """A detected failure that answers again (and whose agent answers) is recovered; one whose
        recovery cannot finish yet is tried again RETRY s later, never waited for."""
        failure, h = self.state.failed.get(sw.name), self.health[sw.name]
        if failure is None or failure.admin or not h.alive or sw.name in self._recovering:
            return
        if failure.reason == DP_DEAD_REASON and sw.switch_id in self.dp_dead:
            return  # its P4Runtime server answers, but its data plane still does not (a switch that
            #         restarted meanwhile had its reason changed: it is unconfigured, so it cannot answer yet)
        if is_cache_switch(sw) and not h.agent_alive:
            return
        if time.monotonic() - h.recover_tried < RETRY:
            return
        h.recover_tried = time.monotonic()
        log.info("%s answers again; recovering it", sw.name)
        try:
            self.recover(sw.name, timeout=PROBE_TIMEOUT)
        except ControllerError as e:
            log.info("%s: not recovered yet: %s", sw.name, e)

    def _retry(self, name: str) -> None:
        """Configure again a switch in service whose last configuration failed."""
        sw = self.cluster.switch(name)
        with self.lock:
            if name not in self._stale or name in self.state.failed or name in self._recovering:
                return  # done meanwhile, or its recovery configures it
            if is_cache_switch(sw) and self.health[name].agent_alive is False:
                return  # tried once it answers
            before = self._stale[name]
            try:
                if is_cache_switch(sw):
                    self._configure_agent(sw)
                else:
                    self._bring_up_client_leaf(sw, timeout=PROBE_TIMEOUT * 2)
            except (ConnectionError, grpc.RpcError, P4RuntimeError) as e:
                self._stale[name] = why(e)
                (log.debug if why(e) == before else log.warning)("%s: still not reconfigured: %s", name, why(e))
                return
            log.info("%s: reconfigured (it had failed: %s)", name, before)

    def detail(self, name: str) -> str:
        """What is wrong with switch ``name``, for the Status API (empty: nothing)."""
        sw = self.cluster.switch(name)
        notes = []
        failure = self.state.failed.get(name)
        if failure is not None:
            notes.append(failure.reason)
            if sw.role == Role.SPINE and sw.switch_id not in self.shim_down():
                leaves = self.routing_to(sw)
                if leaves:
                    notes.append(f"writes still wait for its acks: {', '.join(leaves)} may still send it reads")
        stale = self._stale.get(name)
        if stale is not None and failure is None:  # a failed switch is configured by its recovery
            what = "routes not updated" if sw.role == Role.CLIENT_LEAF else "not reconfigured"
            notes.append(f"{what} (retrying): {stale}")
        return "; ".join(notes)

    def load(self, name: str) -> float:
        s = self.health[name].samples
        if len(s) < 2 or s[1][0] <= s[0][0]:
            return 0.0
        return (s[1][1] - s[0][1]) / (s[1][0] - s[0][0])

    # -- manual cache placement (tests, operators) -----------------------------------------------
    def cache(self, key: str | bytes) -> dict[str, agent_pb2.CachedKey]:
        """Insert ``key`` by hand into every cache switch that should hold it."""
        wkey = wire_key(key)
        return {
            sw.name: self.agents[sw.name].cache(wkey)
            for sw in cache_switches(self.cluster, self.buckets, wkey, self.replicated)
        }

    # -- shutdown ---------------------------------------------------------------------------------
    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(3)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for conn in [*self.leaves.values(), *self.readers.values()]:
            conn.close()
        self.leaves.clear()
        self.readers.clear()
        for a in [*self.agents.values(), *self.agent_status.values()]:
            a.close()
        self.agents.clear()
        self.agent_status.clear()
