"""What every job of the controller shares: its deadlines, its state, its connections and its lock.

The controller is built in layers (:mod:`controller.controller` lists them), each a class that uses only
what the classes below it define; :class:`Core`, the lowest, holds every attribute, so each job's module
reads and changes the same state under the same lock without owning any of it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc

from controller.instruments import Instruments
from controller.partition import Partition
from controller.sessions import LeafSessions
from controller.shims import Shims
from controller.state import ControllerState
from distcache.cluster import Cluster, Host, Mechanism, Role, Switch
from distcache.rpc.agent import AgentClient
from distcache.rpc.protos import agent_pb2
from harness.processes import SwitchProcesses
from p4rt.client import SwitchConnection
from p4rt.p4info import load_p4info
from p4rt.probes import ProbeLedger, SpineDeath

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


class ControllerError(RuntimeError):
    """An operator request the controller cannot carry out; the message says what to do instead."""


def failure_reason(e: BaseException) -> str:
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
    restart_checked: float = 0.0  # last look whether a switch failed for its data plane restarted (monotonic)


class Core:
    """The controller's state and connections, and the views derived from them (no thread, no I/O but
    opening connections and saving the state file)."""

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
        self.readers: dict[str, SwitchConnection] = {}  # every switch: probes and counter reads
        self.agents: dict[str, AgentClient] = {}  # changes (Configure, Flush, ...): AGENT_TIMEOUT
        self.agent_status: dict[str, AgentClient] = {}  # Status only: AGENT_STATUS_TIMEOUT
        self.health = {sw.name: Health() for sw in cluster.switches()}
        self._stop = threading.Event()
        self._wake = threading.Event()  # the reconciler has something to do now
        # a switch's probe thread probes now (set by _dp_check, and by close() to end the thread)
        self._poke = {sw.name: threading.Event() for sw in cluster.switches()}
        self._poked: set[int] = set()  # spines poked for their current silence
        self._threads: list[threading.Thread] = []
        # one pool per concern, so that none waits in another's queue: a failover's fence and configuration
        # never behind a warm-up's hundreds of inserts, nor the health poll behind either
        self._pool = futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="ctl-call")  # configure, push
        self._fence_pool = futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="ctl-fence")
        self._poll_pool = futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="ctl-poll")
        self._warm_pool = futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="ctl-warm")
        # switch -> the thread recovering it by itself (the reconciler never waits for a recovery)
        self._recoveries: dict[str, threading.Thread] = {}
        # the spines in service, the buckets that gives them, the partition the switches last took
        self.partition = Partition(cluster.switch_ids(Role.SPINE), self._failed_spines)
        # primary sessions with the client leaves, the spines each may route reads to, and the switches whose
        # last configuration failed (retried every RETRY s; a client leaf among them may still route reads by
        # an older partition)
        self.sessions = LeafSessions(self.partition.spine_ids)
        self._failover_pending = False  # a failover stopped before the shims: a client leaf kept old routes
        self._failover_warmed = False  # that failover's new owners were warmed before its routes moved
        self._recovering: set[str] = set()  # switches a recover() is bringing back (one at a time each)
        # spines a recover() has told the shims are up and flushed, not in service yet: not down in any push
        self._rejoining: set[str] = set()
        # what the shims are told: pushed with the failed switches and those rejoining (_push_shims)
        self.shims = Shims(self.cluster, shim_address, self.agents, self.partition, self.sessions, procs, self._pool)
        self._shims_behind: dict[str, bool] = {}  # shim host -> needs its view again (else: partition only)
        self.probes = ProbeLedger(DP_MISSES)  # the client leaves' probe counters, as last read
        self.dp_dead: set[int] = set()  # spines whose probes go unanswered at every client leaf
        self._dp_silent_since: dict[int, float] = {}  # spine id -> when the ledger first found it silent
        self.spine_deaths: deque[SpineDeath] = deque(maxlen=SPINE_DEATHS_KEPT)  # reported by the client leaves
        self.instruments = Instruments()  # failures and their timings, for the metrics exporter
        for name in self.state.failed:
            self.health[name].alive = False

    # -- derived views --------------------------------------------------------------------
    @property
    def replicated(self) -> set[bytes]:
        return {bytes.fromhex(k) for k in self.state.replicated}

    def _failed_spines(self) -> set[int]:
        """The spines out of service (the state's failed set; read by :attr:`partition`)."""
        return {sw.switch_id for sw in self._spines() if sw.name in self.state.failed}

    def _push_shims(self, views: bool = False, only: list[Host] | None = None) -> None:
        """Tell the shims the partition and the switches down (with ``views``, the cached keys): Shims.push."""
        self.shims.push(self.state.failed, self._rejoining, self.state.epoch, views, only)

    def shim_down(self) -> list[int]:
        """The switches the shims may stop waiting for now (Shims.down)."""
        return self.shims.down(self.state.failed, self._rejoining)

    def _save(self) -> None:
        self.state.save(self.state_path)

    def _reader(self, sw: Switch) -> SwitchConnection:
        conn = SwitchConnection(f"{self.grpc_host}:{sw.grpc_port}", sw.device_id, name=sw.name)
        conn.timeout = READ_TIMEOUT
        conn.use_p4info(self.p4info)
        return conn

    def _spines(self) -> list[Switch]:
        return [self.cluster.spine(i) for i in range(self.cluster.spines)]

    def _switch(self, name: str) -> Switch:
        try:
            return self.cluster.switch(name)
        except KeyError:
            raise ControllerError(
                f"no switch named {name!r}; switches: {', '.join(sw.name for sw in self.cluster.switches())}"
            ) from None
