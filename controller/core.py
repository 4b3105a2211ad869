"""What every job of the controller shares: its state, its connections, its lock, and its parts.

The jobs (:mod:`controller.controller` lists them) are classes over :class:`Core`; the parts are objects that
take what they use as arguments: :class:`~controller.partition.Partition`,
:class:`~controller.sessions.LeafSessions`, :class:`~controller.shims.Shims` and
:class:`~controller.configure.Configurer`.  Core wires them to its state (the failed set, the cluster as it is
now, Hybrid's replicated keys) in one line each.  Intervals and deadlines are in :mod:`controller.timing`.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent import futures
from dataclasses import replace
from pathlib import Path

from controller.configure import Configurer
from controller.health import ControllerError, Health
from controller.instruments import Instruments
from controller.partition import Partition
from controller.sessions import LeafSessions
from controller.shims import Shims
from controller.state import ControllerState
from controller.timing import DP_MISSES, READ_TIMEOUT, SPINE_DEATHS_KEPT
from distcache.cluster import Cluster, Host, Mechanism, Role, Switch
from distcache.rpc.agent import AgentClient
from distcache.rpc.protos import agent_pb2
from harness.processes import SwitchProcesses
from p4rt.client import SwitchConnection
from p4rt.p4info import load_p4info
from p4rt.probes import ProbeLedger, SpineDeath


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

    # -- configuration, with the cluster as it is now (Configurer) ---------------------------------
    def _replicated_or(self, replicated: set[bytes] | None) -> set[bytes]:
        return self.replicated if replicated is None else replicated

    def _bring_up_client_leaf(self, sw: Switch, timeout: float = 15.0, replicated: set[bytes] | None = None) -> None:
        self.configurer.bring_up_client_leaf(self.cluster, sw, self._replicated_or(replicated), timeout)

    def _configure_agent(self, sw: Switch, replicated: set[bytes] | None = None) -> agent_pb2.AgentStatus:
        return self.configurer.configure_agent(self.cluster, sw, self._replicated_or(replicated))

    def _configure(
        self, roles: set[Role], replicated: set[bytes] | None = None, skip: set[str] | None = None
    ) -> dict[str, str]:
        """Every switch in service of ``roles`` brought to the partition (Configurer.configure)."""
        return self.configurer.configure(
            self.cluster, roles, self.state.failed, self._replicated_or(replicated), skip or ()
        )

    def _fence(self) -> set[str]:
        """Every client leaf in service leaves the failed spines out of every read path (Configurer.fence)."""
        return self.configurer.fence(self.cluster, self.state.failed)

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
