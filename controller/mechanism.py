"""Changing the caching mechanism, and Hybrid's replicated keys (chosen by :mod:`controller.hybrid`).

A part of the controller: it takes the controller's state (the mechanism, the replicated keys), the lock, the
cluster as it is now with the one place that replaces it, and the configurer and agents it acts through.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace

import grpc

from controller import hybrid
from controller.configure import Configurer
from controller.health import ControllerError, Health
from controller.state import ControllerState
from controller.timing import DRAIN
from distcache.cluster import Cluster, Mechanism, Role
from distcache.rpc.agent import AgentClient
from distcache.rpc.protos import agent_pb2

log = logging.getLogger("controller")


class Mechanisms:
    """Reshapes the caches when the mechanism or Hybrid's replicated set changes."""

    def __init__(
        self,
        cluster: Callable[[], Cluster],
        set_cluster: Callable[[Cluster], None],
        state: ControllerState,
        save: Callable[[], None],
        lock: threading.RLock,
        configurer: Configurer,
        agents: Mapping[str, AgentClient],
        health: Mapping[str, Health],
    ) -> None:
        """``cluster``: the cluster as it is now; ``set_cluster`` replaces it (every part reads the new one)."""
        self.cluster, self.set_cluster, self.state, self.save, self.lock = cluster, set_cluster, state, save, lock
        self.configurer, self.agents, self.health = configurer, agents, health

    def _configure(self, roles: set[Role], replicated: Collection[bytes] | None = None) -> None:
        keys = self.state.replicated_keys() if replicated is None else replicated
        self.configurer.configure(self.cluster(), roles, self.state.failed, keys)

    def set_mechanism(self, name: str) -> str:
        try:
            mech = Mechanism[name.upper()]
        except KeyError:
            raise ControllerError(
                f"unknown mechanism {name!r}; use one of {', '.join(m.name.lower() for m in Mechanism)}"
            ) from None
        with self.lock:
            old = self.cluster().mechanism
            self.set_cluster(replace(self.cluster(), mechanism=mech))
            self.state.mechanism = mech.name.lower()
            if mech != Mechanism.HYBRID:
                self.state.replicated = []
            self.save()
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
            if self.cluster().mechanism != Mechanism.HYBRID:
                return set(), set()
            statuses: dict[str, agent_pb2.AgentStatus] = {}
            for name, agent in self.agents.items():
                if name not in self.state.failed and self.health[name].agent_alive is not False:
                    try:
                        statuses[name] = agent.status(with_keys=True)
                    except grpc.RpcError:
                        continue
            current = self.state.replicated_keys()
            new = hybrid.choose(
                hybrid.key_rates(statuses.values()),
                current,
                hybrid.threshold(self.cluster()),
                hybrid.limit(self.cluster()),
            )
            added, removed = new - current, current - new
            spines = [sw for sw in self.cluster().switches() if sw.role == Role.SPINE and sw.name in statuses]
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
            self.save()
            self._configure({Role.CLIENT_LEAF})
            if removed:
                time.sleep(DRAIN)
            self._configure({Role.SPINE})
            log.info("hybrid: %d keys replicated (+%d, -%d)", len(new), len(added), len(removed))
            return added, removed
