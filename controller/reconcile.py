"""The reconciler: the one thread that acts on what the monitor found, most urgent first.

Every change (failover, recovery, configuration retries, shim pushes) is made here, under the lock,
woken by the probe threads and the health poll (:mod:`controller.monitor`); a recovery that cannot
finish yet returns at once and is tried again RETRY s later.  A part of the controller: it takes the state,
the lock and the parts it acts through, and holds the threads of the recoveries it started.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import grpc

from controller.configure import Configurer
from controller.failover import Failover
from controller.health import ControllerError, failure_reason
from controller.mechanism import Mechanisms
from controller.monitor import Monitor
from controller.state import ControllerState
from controller.timing import DP_DEAD_REASON, HEARTBEAT, P4RT_DEAD_REASON, PROBE_TIMEOUT, RETRY
from distcache import p4names
from distcache.cluster import Cluster, Mechanism, Switch, is_cache_switch
from p4rt.client import P4RuntimeError

log = logging.getLogger("controller")


class Reconciler:
    """Declares dead what the monitor detected, recovers what came back, retries what failed, brings
    shims that fell behind up to date and, under Hybrid, re-chooses the replicated keys."""

    def __init__(
        self,
        cluster: Callable[[], Cluster],
        state: ControllerState,
        lock: threading.RLock,
        monitor: Monitor,
        failover: Failover,
        mechanisms: Mechanisms,
        configurer: Configurer,
    ) -> None:
        """``cluster``: the cluster as it is now (its mechanism may change)."""
        self.cluster, self.state, self.lock = cluster, state, lock
        self.monitor, self.failover, self.mechanisms, self.configurer = monitor, failover, mechanisms, configurer
        self.health, self.sessions, self.shims = monitor.health, monitor.sessions, monitor.shims
        # switch -> the thread recovering it by itself (the reconciler never waits for a recovery)
        self.recoveries: dict[str, threading.Thread] = {}

    def loop(self) -> None:
        last_beat = 0.0
        while not self.monitor.stop.is_set():
            self.monitor.wake.wait(RETRY)
            self.monitor.wake.clear()
            if self.monitor.stop.is_set():
                return
            try:
                self.reconcile()
                if self.cluster().mechanism == Mechanism.HYBRID and time.monotonic() - last_beat >= HEARTBEAT:
                    last_beat = time.monotonic()
                    self.mechanisms.rebalance_hybrid()
            except Exception:
                log.exception("reconciliation failed")

    def reconcile(self) -> None:
        """Act on what the probes and the health poll found, most urgent first."""
        for sw in self.cluster().switches():
            detected = self.health[sw.name].detected
            if detected is not None:
                self.failover.declare_dead(sw, detected[0], P4RT_DEAD_REASON, detected[1])
            dp = self.health[sw.name].dp_detected
            if dp is not None:
                self.health[sw.name].dp_detected = None
                self.failover.declare_dead(sw, dp[0], DP_DEAD_REASON, dp[1])
        for sw in self.cluster().switches():
            self._maybe_recover(sw)
        for name in list(self.sessions.stale):
            self._retry(name)
        if self.failover.pending:
            with self.lock:
                if self.failover.pending:
                    self.failover.continue_failover(configure=False)
        if self.monitor.shims_behind:
            with self.lock:
                behind = {name: self.monitor.shims_behind.pop(name) for name in list(self.monitor.shims_behind)}
                hosts = [h for h in self.cluster().servers() if h.name in behind]
                if any(behind[h.name] for h in hosts):
                    self.shims.push(
                        self.state.failed, self.state.epoch, views=True, only=[h for h in hosts if behind[h.name]]
                    )
                if not all(behind[h.name] for h in hosts):
                    self.shims.push(self.state.failed, self.state.epoch, only=[h for h in hosts if not behind[h.name]])

    def _maybe_recover(self, sw: Switch) -> None:
        """A detected failure that answers again (and whose agent answers) is recovered; one whose
        recovery cannot finish yet is tried again RETRY s later, never waited for."""
        failure, h = self.state.failed.get(sw.name), self.health[sw.name]
        if failure is None or failure.admin or not h.alive or sw.name in self.failover.recovering:
            return
        if failure.reason == DP_DEAD_REASON and sw.switch_id in self.monitor.dp_dead:
            # its P4Runtime server answers, but its data plane still does not -- or it restarted meanwhile,
            # unconfigured, so it cannot answer until recovered: then it is recovered like a crashed switch
            if not self._came_back_unconfigured(sw):
                return
            log.info("%s restarted while failed for its data plane: recovering it like a crashed switch", sw.name)
            self.state.failed[sw.name] = replace(failure, reason=P4RT_DEAD_REASON)
        if is_cache_switch(sw) and not h.agent_alive:
            return
        if time.monotonic() - h.recover_tried < RETRY:
            return
        running = self.recoveries.get(sw.name)
        if running is not None and running.is_alive():
            return
        h.recover_tried = time.monotonic()
        log.info("%s answers again; recovering it", sw.name)
        # on a thread of its own: a recovery waits for the switch and its agent and warms its cache (paced:
        # seconds), and this thread alone declares switches dead -- a second crash meanwhile must be failed
        # over at once, not after the warm-up (before, its writes answered ERROR until then)
        t = threading.Thread(target=self._recover_by_itself, args=(sw,), name=f"recover-{sw.name}", daemon=True)
        self.recoveries[sw.name] = t
        t.start()

    def _recover_by_itself(self, sw: Switch) -> None:
        try:
            self.failover.recover(sw.name, timeout=PROBE_TIMEOUT)
        except ControllerError as e:
            log.info("%s: not recovered yet: %s", sw.name, e)
        except Exception:
            log.exception("%s: recovery failed", sw.name)

    def _came_back_unconfigured(self, sw: Switch) -> bool:
        """Whether ``sw`` has no switch_config any more (looked at every RETRY s): a switch failed for its data
        plane whose process restarted between two of the health probes (so they never saw it gone) holds no
        configuration; one whose data plane is still dead keeps the one it had."""
        h = self.health[sw.name]
        if time.monotonic() - h.restart_checked < RETRY:
            return False
        h.restart_checked = time.monotonic()
        try:
            action, _ = self.monitor.readers[sw.name].read_default(p4names.SWITCH_CONFIG)
        except P4RuntimeError as e:
            return e.code in ("FAILED_PRECONDITION", "NOT_FOUND")  # no pipeline at all: it restarted
        return action != p4names.SET_CONFIG

    def _retry(self, name: str) -> None:
        """Configure again a switch in service whose last configuration failed."""
        sw = self.cluster().switch(name)
        with self.lock:
            if name not in self.sessions.stale or name in self.state.failed or name in self.failover.recovering:
                return  # done meanwhile, or its recovery configures it
            if is_cache_switch(sw) and self.health[name].agent_alive is False:
                return  # tried once it answers
            before = self.sessions.stale[name]
            try:
                if is_cache_switch(sw):
                    self.configurer.configure_agent(self.cluster(), sw, self.state.replicated_keys())
                else:
                    self.configurer.bring_up_client_leaf(
                        self.cluster(), sw, self.state.replicated_keys(), timeout=PROBE_TIMEOUT * 2
                    )
            except (ConnectionError, grpc.RpcError, P4RuntimeError) as e:
                self.sessions.stale[name] = failure_reason(e)
                (log.debug if failure_reason(e) == before else log.warning)(
                    "%s: still not reconfigured: %s", name, failure_reason(e)
                )
                return
            log.info("%s: reconfigured (it had failed: %s)", name, before)
