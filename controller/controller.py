"""The DistCache controller: partitions, switch health, failover and recovery.

It runs as a daemon (``python -m controller``, :mod:`controller.service`) and
is off the query path: once entries are in, the data plane serves without it,
so reads and writes go on while it is down.

* **Client-rack leaves** have no agent: the controller is their P4Runtime
  primary and installs what :func:`controller.entries.plan` derives, the spine
  partition included.  On start it *reconciles* (reads the tables back and
  writes only the difference) and pushes a pipeline only to a switch that has
  none, so a controller restart leaves the data plane untouched.
* **Cache switches** (spines, storage-rack leaves) each have an agent
  (:mod:`controller.agent`); the controller gives it the cluster, the
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

Recovery runs the other way: the shims stop skipping the spine *before* its
agent flushes its cache (so nothing it caches afterwards can be missed by a
write), then the partition moves back, leaves route to it, and the spines
that held its buckets evict their keys.  A spine whose process was restarted
comes back empty anyway; one that was only unreachable may hold copies that
went stale meanwhile, which the flush removes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc

from controller import hybrid
from controller.agent import AgentClient
from controller.entries import SwitchPlan, plan
from controller.p4rt import P4RuntimeError, SwitchConnection, load_p4info
from controller.partition import cache_switches, spine_buckets
from controller.reconcile import apply_plan
from controller.shim_link import ShimLink, ShimRequestError, ShimUnavailable
from controller.state import ControllerState, Failure
from controller.switchproc import SwitchProcessError, SwitchProcesses
from distcache import p4names as n
from distcache.api import agent_pb2
from distcache.cluster import Cluster, Host, Mechanism, Role, Switch
from distcache.hashing import wire_key

log = logging.getLogger("controller")

PROBE_INTERVAL = 0.25  # seconds between liveness probes of one switch
PROBE_TIMEOUT = 0.5
MISSES_TO_FAIL = 2  # failed probes in a row that declare a switch dead
DRAIN = 0.05  # after client leaves stop targeting a spine: reads already in flight to it finish
HEARTBEAT = 1.0  # agents and shims are checked (and reconfigured if they restarted) this often


class ControllerError(RuntimeError):
    """An operator request the controller cannot carry out; the message says what to do instead."""


def is_cache_switch(sw: Switch) -> bool:
    return sw.role in (Role.SPINE, Role.STORAGE_LEAF)


@dataclass
class Health:
    """What the monitor last saw of one switch."""

    alive: bool = True
    misses: int = 0
    first_miss: float = 0.0
    agent_alive: bool = False
    agent: agent_pb2.AgentStatus | None = None
    samples: list[tuple[float, int]] = field(default_factory=list)  # (time, reads) for the load


class Controller:
    def __init__(self, cluster: Cluster, p4info_path: str | Path, shim_address: Callable[[Host], str],
                 device_config: bytes = b"", state_path: Path | None = None,
                 procs: SwitchProcesses | None = None, grpc_host: str = "127.0.0.1") -> None:
        self.state_path = state_path
        self.state = ControllerState.load(state_path)
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
        self.agents: dict[str, AgentClient] = {}
        self.health = {sw.name: Health() for sw in cluster.switches()}
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None
        self._buckets_pushed: list[int] | None = None  # the partition the switches hold
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

    def down_ids(self) -> list[int]:
        return sorted(self.cluster.switch(name).switch_id for name in self.state.failed)

    def _save(self) -> None:
        self.state.save(self.state_path)

    # -- bring-up ---------------------------------------------------------------------------
    def start(self, timeout: float = 15.0, monitor: bool = True) -> None:
        """Reconcile every reachable switch, agent and shim with the saved state; then watch them."""
        with self.lock:
            for sw in self.cluster.switches():
                self.readers[sw.name] = self._reader(sw)
                if is_cache_switch(sw):
                    self.agents[sw.name] = AgentClient(self.cluster.agent_address(sw))
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
                    # not fatal: the monitor declares a dead switch dead, the heartbeat configures a late agent
                    log.error("%s: not reconciled at start: %s", sw.name, e)
            self._push_shims(views=True)
            self._remember_buckets(self.buckets)
        if monitor:
            self._monitor = threading.Thread(target=self._monitor_loop, name="monitor", daemon=True)
            self._monitor.start()

    def _reader(self, sw: Switch) -> SwitchConnection:
        conn = SwitchConnection(f"{self.grpc_host}:{sw.grpc_port}", sw.device_id, name=sw.name)
        conn.use_p4info(self.p4info)
        return conn

    def _bring_up_client_leaf(self, sw: Switch, timeout: float = 15.0) -> None:
        conn = SwitchConnection(f"{self.grpc_host}:{sw.grpc_port}", sw.device_id, name=sw.name)
        conn.connect(timeout)
        if conn.has_pipeline():
            conn.use_p4info(self.p4info)
        else:
            conn.set_pipeline(self.p4info, self.device_config)
            log.info("%s: pipeline pushed", sw.name)
        writes = apply_plan(conn, self._plan(sw))
        old, self.leaves[sw.name] = self.leaves.get(sw.name), conn
        if old is not None:
            old.close()
        log.info("%s: reconciled (%d entries written)", sw.name, writes)

    def _plan(self, sw: Switch, replicated: set[bytes] | None = None) -> SwitchPlan:
        return plan(self.cluster, sw, self.buckets, self.live_spines(),
                    self.replicated if replicated is None else replicated)

    def _configure_agent(self, sw: Switch, replicated: set[bytes] | None = None) -> agent_pb2.AgentStatus:
        st = self.agents[sw.name].configure(self.cluster, self.buckets, self.live_spines(),
                                            self.replicated if replicated is None else replicated)
        log.info("%s: configured by its agent (%d cached keys)", sw.name, st.occupied)
        return st

    def _configure(self, roles: set[Role], replicated: set[bytes] | None = None) -> None:
        """Bring every switch in service of ``roles`` to the current partition and spines in service
        (and Hybrid's ``replicated`` keys, default: the current ones)."""
        for sw in self.cluster.switches():
            if sw.role not in roles or sw.name in self.state.failed:
                continue
            try:
                if is_cache_switch(sw):
                    self._configure_agent(sw, replicated)
                elif sw.name in self.leaves:
                    apply_plan(self.leaves[sw.name], self._plan(sw, replicated))
            except (grpc.RpcError, P4RuntimeError) as e:
                log.error("%s: not reconfigured: %s", sw.name, e)

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
                except (ShimUnavailable, ShimRequestError) as e:
                    log.warning("%s: shim not updated: %s", h.name, e)
            for name, agent in self.agents.items():
                if name in self.state.failed:
                    continue
                try:
                    st = agent.status(with_keys=True)
                except grpc.RpcError as e:
                    log.warning("%s: agent unreachable, its keys are not in the view: %s", name, e.code())
                    continue
                complete.add(st.switch_id)
                for k in st.keys:
                    host = self.cluster.server_for_key(k.key).name
                    cached.setdefault(host, {}).setdefault(bytes(k.key), []).append(st.switch_id)
        spines = {self.cluster.spine(i).switch_id for i in range(self.cluster.spines)}
        for host in hosts:
            if views and host.name not in incarnations:
                continue
            try:
                link = links[host.name]
                link.partition(self.buckets, [d for d in self.down_ids() if d != up], self.state.epoch)
                if views:
                    mine = spines | {self.cluster.storage_leaf(host.rack).switch_id}
                    link.view(cached.get(host.name, {}), sorted(complete & mine), incarnations[host.name])
            except (ShimUnavailable, ShimRequestError) as e:
                log.warning("%s: shim not updated: %s", host.name, e)

    # -- failures -----------------------------------------------------------------------------
    def _failover(self) -> int:
        """Move the buckets of failed spines to live ones (steps in the module docstring); returns moved."""
        before = self._last_buckets()
        self.state.epoch += 1
        self._save()
        self._configure({Role.STORAGE_LEAF, Role.CLIENT_LEAF})
        time.sleep(DRAIN)
        self._push_shims()
        self._configure({Role.SPINE})
        after = self.buckets
        self._remember_buckets(after)
        return sum(a != b for a, b in zip(before, after, strict=True))

    def _last_buckets(self) -> list[int]:
        return self._buckets_pushed or spine_buckets(self.spine_ids())

    def _remember_buckets(self, buckets: list[int]) -> None:
        self._buckets_pushed = list(buckets)

    def declare_dead(self, sw: Switch, since: float, reason: str) -> None:
        with self.lock:
            if sw.name in self.state.failed:
                return
            t = time.monotonic()
            self.state.failed[sw.name] = Failure(admin=False, since=time.time(), reason=reason)
            self.state.last_detection_s = t - since
            self.health[sw.name].alive = False
            log.warning("%s declared dead after %.2fs: %s", sw.name, t - since, reason)
            if sw.role == Role.SPINE:
                moved = self._failover()
                self.state.failovers += 1
                self.state.last_failover_s = time.monotonic() - t
                log.warning("%s: %d buckets moved to live spines in %.2fs", sw.name, moved, self.state.last_failover_s)
            self._save()

    def fail(self, name: str, keep_running: bool = False) -> tuple[str, int, float]:
        """Operator: take ``name`` out of service, and stop its process if the deployment lets the
        controller do so and ``keep_running`` is not asked for (a drain: the switch stays up, serves
        nothing, and is flushed before it serves again)."""
        sw = self._switch(name)
        t = time.monotonic()
        with self.lock:
            if name in self.state.failed:
                raise ControllerError(f"{name} is already failed ({self.state.failed[name].reason}); "
                                      f"use `distcache-ctl recover {name}`")
            if sw.role == Role.SPINE and self.live_spines() == {sw.switch_id}:
                raise ControllerError(f"{name} is the last spine in service: without it no rack reaches another; "
                                      "recover another spine first")
            stopped = False
            if self.procs is not None and name in self.procs and not keep_running:
                self.procs.stop(name)
                stopped = True
            self.state.failed[name] = Failure(admin=True, since=time.time(), reason="failed by the operator",
                                              stopped=stopped)
            self.health[name].alive = not stopped
            moved = 0
            if sw.role == Role.SPINE:
                moved = self._failover()
                self.state.failovers += 1
                self.state.last_failover_s = time.monotonic() - t
            self._save()
        what = "process stopped" if stopped else "out of service, its process keeps running"
        return f"{name}: {what}; {moved} buckets moved to live spines", moved, time.monotonic() - t

    def recover(self, name: str, timeout: float = 30.0) -> tuple[str, int, float]:
        """Operator (or the monitor, for a detected failure that came back): put ``name`` back."""
        sw = self._switch(name)
        t = time.monotonic()
        with self.lock:
            failure = self.state.failed.get(name)
            if failure is None:
                raise ControllerError(f"{name} is not failed; nothing to recover (see `distcache-ctl status`)")
            if failure.stopped and self.procs is not None:
                try:
                    self.procs.start(name)
                except SwitchProcessError as e:
                    raise ControllerError(f"cannot start {name} again: {e}") from None
            self._wait_back(sw, timeout)
            before = self.buckets
            if sw.role == Role.SPINE:
                # the shims stop skipping it before its cache is flushed (it still owns no bucket), so
                # nothing it caches from now on can be missed by a write
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
                self.state.failed.pop(name)
                self._save()
                self._push_shims()
                if sw.role == Role.CLIENT_LEAF:
                    self._bring_up_client_leaf(sw)
                else:
                    self._configure_agent(sw)
            self.health[name] = Health(alive=True)
            self.state.recoveries += 1
            self._save()
            moved = sum(a != b for a, b in zip(before, self.buckets, strict=True))
        return f"{name}: back in service; {moved} buckets moved back to it", moved, time.monotonic() - t

    def _flush(self, sw: Switch) -> None:
        try:
            st = self.agents[sw.name].flush()
            log.info("%s: cache flushed before it serves again (%d keys left)", sw.name, st.occupied)
        except grpc.RpcError as e:
            raise ControllerError(f"{sw.name}: its agent could not flush the cache ({e.code().name}); start "
                                  f"the agent (python -m controller.agent --switch {sw.name} ...) and retry") from None

    def _wait_back(self, sw: Switch, timeout: float) -> None:
        """Until the switch answers again and, for a cache switch, its agent has it configured."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.readers[sw.name] = self._reader(sw)
            if self.readers[sw.name].probe(PROBE_TIMEOUT):
                if not is_cache_switch(sw):
                    return
                try:
                    st = self.agents[sw.name].status()
                    if st.switch_connected and st.configured:
                        return
                except grpc.RpcError:
                    pass
            time.sleep(0.2)
        raise ControllerError(f"{sw.name} is not back after {timeout:.0f}s: its P4Runtime server at "
                              f"{self.grpc_host}:{sw.grpc_port} (or its agent) does not answer; start it first")

    def set_mechanism(self, name: str) -> str:
        try:
            mech = Mechanism[name.upper()]
        except KeyError:
            raise ControllerError(f"unknown mechanism {name!r}; use one of "
                                  f"{', '.join(m.name.lower() for m in Mechanism)}") from None
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
                if name not in self.state.failed:
                    try:
                        statuses[name] = agent.status(with_keys=True)
                    except grpc.RpcError:
                        continue
            current = self.replicated
            new = hybrid.choose(hybrid.key_rates(statuses.values()), current, hybrid.threshold(self.cluster),
                                hybrid.limit(self.cluster))
            added, removed = new - current, current - new
            spines = [sw for sw in self.cluster.switches()
                      if sw.role == Role.SPINE and sw.name in statuses]
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
            raise ControllerError(f"no switch named {name!r}; switches: "
                                  f"{', '.join(sw.name for sw in self.cluster.switches())}") from None

    # -- monitoring -----------------------------------------------------------------------------
    def _monitor_loop(self) -> None:
        last_beat = 0.0
        while not self._stop.wait(PROBE_INTERVAL):
            for sw in self.cluster.switches():
                try:
                    self._probe(sw)
                except Exception:  # noqa: BLE001 - the monitor must outlive any one failure
                    log.exception("%s: probe handling failed", sw.name)
            if time.monotonic() - last_beat >= HEARTBEAT:
                last_beat = time.monotonic()
                try:
                    self._heartbeat()
                except Exception:  # noqa: BLE001
                    log.exception("heartbeat failed")

    def _probe(self, sw: Switch) -> None:
        h = self.health[sw.name]
        failure = self.state.failed.get(sw.name)
        reader = self.readers[sw.name]
        ok = reader.probe(PROBE_TIMEOUT)
        if not ok:
            self.readers[sw.name] = self._reader(sw)  # a fresh channel: no reconnect backoff hides its return
            reader.close()
        now = time.monotonic()
        if ok:
            h.misses = 0
            h.alive = True
            if failure is not None and not failure.admin:
                log.info("%s answers again; recovering it", sw.name)
                try:
                    self.recover(sw.name, timeout=3.0)
                except ControllerError as e:
                    log.info("%s: not recovered yet: %s", sw.name, e)
            elif failure is None and sw.role == Role.CLIENT_LEAF and sw.name in self.leaves \
                    and self.leaves[sw.name].stream_closed.is_set():
                with self.lock:
                    log.warning("%s: lost its stream (restarted?); reconnecting", sw.name)
                    self._bring_up_client_leaf(sw)
            return
        if failure is not None:
            h.alive = False
            return
        if h.misses == 0:
            h.first_miss = now - PROBE_INTERVAL / 2  # it stopped answering somewhere since the last good probe
        h.misses += 1
        if h.misses >= MISSES_TO_FAIL:
            h.alive = False
            self.declare_dead(sw, h.first_miss, "its P4Runtime server stopped answering")

    def _heartbeat(self) -> None:
        now = time.monotonic()
        for name, agent in self.agents.items():
            h = self.health[name]
            try:
                st = agent.status()
                h.agent_alive, h.agent = True, st
            except grpc.RpcError:
                h.agent_alive = False
                continue
            if not st.configured and name not in self.state.failed:
                with self.lock:
                    log.warning("%s: its agent restarted; configuring it again", name)
                    self._configure_agent(self.cluster.switch(name))
        for sw in self.cluster.switches():
            if sw.name in self.state.failed:
                continue
            try:
                stats = self.readers[sw.name].read_counter(n.DC_STATS)
            except P4RuntimeError:
                continue
            idx = (n.Stat.ROUTED_SPINE, n.Stat.ROUTED_LEAF) if sw.role == Role.CLIENT_LEAF else (
                n.Stat.READ_HIT, n.Stat.READ_MISS)
            h = self.health[sw.name]
            h.samples = (h.samples + [(now, sum(stats.get(int(i), (0, 0))[0] for i in idx))])[-2:]
        for host in self.cluster.servers():
            try:
                st = ShimLink(self.shim_address(host), timeout=2.0).stats()
            except ShimUnavailable:
                continue
            if not st.get("view_known") or st.get("epoch") != self.state.epoch:
                with self.lock:
                    log.warning("%s: shim restarted or behind (epoch %s); sending partition and view",
                                host.name, st.get("epoch"))
                    self._push_shims(views=True, only=[host])
        if self.cluster.mechanism == Mechanism.HYBRID:
            self.rebalance_hybrid()

    def load(self, name: str) -> float:
        s = self.health[name].samples
        if len(s) < 2 or s[1][0] <= s[0][0]:
            return 0.0
        return (s[1][1] - s[0][1]) / (s[1][0] - s[0][0])

    # -- manual cache placement (tests, operators) -----------------------------------------------
    def cache(self, key: str | bytes) -> dict[str, agent_pb2.CachedKey]:
        """Insert ``key`` by hand into every cache switch that should hold it."""
        wkey = wire_key(key)
        return {sw.name: self.agents[sw.name].cache(wkey)
                for sw in cache_switches(self.cluster, self.buckets, wkey, self.replicated)}

    # -- shutdown ---------------------------------------------------------------------------------
    def close(self) -> None:
        self._stop.set()
        if self._monitor is not None:
            self._monitor.join(3)
        for conn in [*self.leaves.values(), *self.readers.values()]:
            conn.close()
        self.leaves.clear()
        self.readers.clear()
        for a in self.agents.values():
            a.close()
        self.agents.clear()
