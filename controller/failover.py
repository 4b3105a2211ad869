"""Failures and recoveries: declaring a switch dead, the operator's fail and recover, the failover's steps
(:mod:`controller.controller` explains their order).

A part of the controller: it takes the controller's state (the failed set, the epoch, the counters), the lock
that guards it, and the parts it acts through; it holds what only a failover or a recovery knows (which
switches are being recovered, whether a failover stopped before its last steps).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from concurrent import futures

import grpc

from controller.configure import Configurer
from controller.health import ControllerError, failure_reason
from controller.instruments import Instruments
from controller.monitor import Monitor
from controller.partition import Partition
from controller.sessions import LeafSessions
from controller.shims import Shims
from controller.state import ControllerState, Failure
from controller.timing import DRAIN, PROBE_TIMEOUT, RETRY
from controller.warmup import paced, warm_keys
from distcache.cluster import Cluster, Role, Switch, is_cache_switch
from distcache.hashing import h0
from distcache.placement import PLACEMENT
from distcache.rpc.agent import AgentClient
from harness.processes import SwitchProcessError, SwitchProcesses
from p4rt.client import P4RuntimeError

log = logging.getLogger("controller")


class Failover:
    """Takes switches out of service and puts them back, moving the failed spines' buckets."""

    def __init__(
        self,
        cluster: Callable[[], Cluster],
        state: ControllerState,
        save: Callable[[], None],
        lock: threading.RLock,
        partition: Partition,
        sessions: LeafSessions,
        shims: Shims,
        configurer: Configurer,
        monitor: Monitor,
        agents: Mapping[str, AgentClient],
        agent_status: Mapping[str, AgentClient],
        procs: SwitchProcesses | None,
        instruments: Instruments,
        warm_pool: futures.ThreadPoolExecutor,
        grpc_host: str,
    ) -> None:
        """``cluster``: the cluster as it is now (the operator may change its mechanism); ``save`` writes the
        state file; ``warm_pool``: the warm-ups' own (never the pool a fence or a configuration waits on)."""
        self.cluster, self.state, self.save, self.lock = cluster, state, save, lock
        self.partition, self.sessions, self.shims, self.configurer = partition, sessions, shims, configurer
        self.monitor, self.health = monitor, monitor.health
        self.agents, self.agent_status, self.procs, self.instruments = agents, agent_status, procs, instruments
        self.warm_pool, self.grpc_host = warm_pool, grpc_host
        self.recovering: set[str] = set()  # switches a recover() is bringing back (one at a time each)
        self.pending = False  # a failover stopped before the shims: a client leaf kept old routes
        self._warmed = False  # that failover's new owners were warmed before its routes moved

    # -- the controller's state, through the parts --------------------------------------------------
    def push_shims(self) -> None:
        """Tell the shims the partition and the switches down."""
        self.shims.push(self.state.failed, self.state.epoch)

    def configure(self, roles: set[Role], skip: Collection[str] = ()) -> dict[str, str]:
        """Every switch in service of ``roles`` brought to the partition, but those in ``skip``."""
        return self.configurer.configure(self.cluster(), roles, self.state.failed, self.state.replicated_keys(), skip)

    def _configure_agent(self, sw: Switch) -> None:
        self.configurer.configure_agent(self.cluster(), sw, self.state.replicated_keys())

    def _spines(self) -> list[Switch]:
        return [sw for sw in self.cluster().switches() if sw.role == Role.SPINE]

    def failover(self, warmed: bool = False) -> tuple[int, list[str]]:
        """Move the buckets of failed spines to live ones (steps in the module docstring); returns how many
        moved and the client leaves the failover now waits for (empty: done).  ``warmed``: the new owners
        were warmed before the routes move (an operator's fail), so the warm-up after it only tops up."""
        before = self.partition.pushed()
        self.state.epoch += 1
        self.save()
        self.pending, self._warmed = True, warmed
        waiting = self.continue_failover()
        after = self.partition.buckets()
        self.partition.remember(after)
        return sum(a != b for a, b in zip(before, after, strict=True)), waiting

    def continue_failover(self, configure: bool = True) -> list[str]:
        """The failover's steps: step 1 (idempotent; without ``configure`` the reconciler has just retried
        the leaves that missed it), and no step after it until every client leaf in service has taken the
        new routes (until then the shims keep waiting for the failed spines' acks, so writes invalidate
        whatever those spines still hold).  Step 1 starts with the fence (:meth:`_fence`: one write per
        client leaf); when every client leaf took it, step 2 comes before the partition's entries are
        written, and the shims' writes stop waiting for the failed spines that much sooner.  Returns the
        client leaves it waits for; the reconciler calls it again every RETRY s until there are none."""
        told = False
        if configure:
            t = time.monotonic()
            unfenced = self.configurer.fence(self.cluster(), self.state.failed)
            fenced = time.monotonic() - t
            if not self._leaves_behind():
                time.sleep(DRAIN)
                self.push_shims()
                told = True
                log.info(
                    "%s fenced at every client leaf in %.0f ms; shims told %s down %.0f ms later, before the "
                    "partition moves",
                    ", ".join(sorted(self.state.failed)),
                    fenced * 1e3,
                    "it is" if len(self.state.failed) == 1 else "they are",
                    (time.monotonic() - t - fenced) * 1e3,
                )
            self.configure({Role.STORAGE_LEAF, Role.CLIENT_LEAF}, skip=unfenced)
        waiting = self._leaves_behind()
        if waiting:
            (log.error if configure else log.debug)(
                "failover waits for %s to take the new routes; until then the shims keep waiting for the acks "
                "of %s (retried every %.0fs)",
                ", ".join(waiting),
                ", ".join(sorted(self.state.failed)),
                RETRY,
            )
            return waiting
        if not told:
            time.sleep(DRAIN)
            self.push_shims()
        self.configure({Role.SPINE})
        if self.pending:
            self.pending = False
            if PLACEMENT[self.cluster().mechanism].warms_on_failover:
                args = (self.state.epoch, self.partition.buckets(), self.partition.live(), sorted(self.state.failed))
                # after a drain's warm-up, only the keys that got hot since are left: paced like it
                kwargs = {"drain": self._warmed}
                threading.Thread(
                    target=self._warm_new_owners, args=args, kwargs=kwargs, name="warmup", daemon=True
                ).start()
            log.info(
                "failover complete: %s",
                ", ".join(f"{s.name} routed away" for s in self._spines() if s.name in self.state.failed),
            )
        return []

    def _leaves_behind(self) -> list[str]:
        """The client leaves in service whose last write failed: they may still route reads to a failed
        spine (the reconciler retries them)."""
        return sorted(
            name
            for name in list(self.sessions.stale)
            if name not in self.state.failed and self.cluster().switch(name).role == Role.CLIENT_LEAF
        )

    def _warm_new_owners(
        self,
        epoch: int,
        buckets: list[int],
        live: set[int],
        sources: list[str],
        drain: bool = False,
        ahead: bool = False,
    ) -> None:
        """Cache at each spine that takes over buckets the hottest keys the ``sources`` (the spines that
        held them) hold in them (:mod:`controller.warmup`), off the lock: agents answer on their own
        deadlines, and each insert is an ordinary one (its populate goes through the key's shim).  Stops
        when the partition moves again (``epoch``); ``buckets`` and ``live`` are the partition's it warms
        for, taken under the lock.
        ``ahead``: the routes have not moved yet (an operator's fail, a recover), so no read waits for the
        warm-up; with ``drain`` nothing does (that, or a top-up after one), and it is paced."""
        t = time.monotonic()
        moved: dict[int, dict[bytes, int]] = defaultdict(dict)
        for name in sources:
            sw = self.cluster().switch(name)
            if sw.role != Role.SPINE or name not in self.agent_status:
                continue
            try:
                st = self.agent_status[name].status(with_keys=True)
            except grpc.RpcError:
                continue
            for k in st.keys:
                owner = buckets[h0(bytes(k.key))]
                if owner in live and owner != sw.switch_id:
                    moved[owner][bytes(k.key)] = max(k.hits, moved[owner].get(bytes(k.key), 0))
        for owner, keys in moved.items():
            name = self.cluster().switch_by_id(owner).name
            try:
                st = self.agent_status[name].status(with_keys=True)
            except grpc.RpcError:
                continue
            todo = warm_keys(keys, {bytes(k.key): k.hits for k in st.keys}, st.slots - st.occupied)

            def cache(key: bytes, name: str = name) -> bool:
                if self.state.epoch != epoch:
                    return False
                try:
                    self.agents[name].cache(key)
                except grpc.RpcError:
                    return False
                return True

            # with drain nothing waits on it but the operator: paced, not a burst beside the traffic; else its
            # reads miss meanwhile: a few at once (each waits for its populate)
            done = sum(paced(cache, k) for k in todo) if drain else self._warm_at_once(cache, todo)
            log.info(
                "%s: %d of %d hot keys of its new buckets cached %s in %.0f ms",
                name,
                done,
                len(todo),
                "before its buckets move" if ahead else "after its buckets moved" if drain else "ahead of their reads",
                1000 * (time.monotonic() - t),
            )

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
            self.instruments.switch_failures.labels("detected").inc()
            self.instruments.detection_seconds.observe(decided - since)
            self.health[sw.name].alive = False
            log.warning("%s declared dead after %.2fs: %s", sw.name, decided - since, reason)
            if sw.role == Role.SPINE:
                moved, waiting = self.failover()
                self.state.failovers += 1
                self.state.last_failover_s = time.monotonic() - t
                self.instruments.failover_seconds.observe(self.state.last_failover_s)
                log.warning(
                    "%s: %d buckets moved to live spines in %.2fs%s",
                    sw.name,
                    moved,
                    self.state.last_failover_s,
                    f" (waiting for {', '.join(waiting)})" if waiting else "",
                )
            self.save()
        self._take_data_plane_down(sw)

    def _warm_at_once(self, insert: Callable[[bytes], bool], keys: list[bytes]) -> int:
        """``insert`` every key, a few at once on the warm-up's own pool (never the one a failover's fence
        or configuration waits on: hundreds of inserts queued there held the next failover back); how many
        were inserted."""
        return sum(f.result() for f in [self.warm_pool.submit(insert, k) for k in keys])

    def _take_data_plane_down(self, sw: Switch) -> None:
        """A switch declared dead whose process is gone while its data plane may not be (a kernel switch's
        programs outlive their process, routing by their old tables): take that data plane down, so that
        what it could still do (a client leaf's reads to a spine the shims stopped invalidating) ends, and
        tell the shims (the switches they may skip can grow).  Nothing to do where the deployment does not
        run the switches' processes, or the process still runs (it is failed over and fenced as it is)."""
        procs = self.procs
        if procs is None or sw.name not in procs or procs.running(sw.name) or procs.data_plane_gone(sw.name):
            return
        try:
            procs.fence(sw.name)
        except SwitchProcessError as e:
            log.warning("%s: %s", sw.name, e)
            return
        log.warning("%s: its process is gone; its data plane is taken down too", sw.name)
        with self.lock:
            self.push_shims()

    def _check_fail(self, sw: Switch) -> None:
        """ControllerError if ``sw`` cannot be failed now."""
        if sw.name in self.state.failed:
            raise ControllerError(
                f"{sw.name} is already failed ({self.state.failed[sw.name].reason}); "
                f"use `distcache-ctl recover {sw.name}`"
            )
        if sw.role == Role.SPINE and self.partition.live() == {sw.switch_id}:
            raise ControllerError(
                f"{sw.name} is the last spine in service: without it no rack reaches another; "
                "recover another spine first"
            )

    def fail(self, name: str, keep_running: bool = False) -> tuple[str, int, float]:
        """Operator: take ``name`` out of service, and stop its process if the deployment lets the
        controller do so and ``keep_running`` is not asked for (a drain: the switch stays up, serves
        nothing, and is flushed before it serves again).

        A spine is drained first and stopped after: its buckets move while it still forwards, so no read
        is sent to a switch that is already gone (stopped first, every read the leaves sent it until they
        found it dead was lost and retried).  Stopping it then is a crash of a failed spine, which the
        protocol allows at any time (docs/protocol.md, "Failover")."""
        sw = self.switch(name)
        t = time.monotonic()
        with self.lock:
            self._check_fail(sw)
            ahead = None
            if sw.role == Role.SPINE and PLACEMENT[self.cluster().mechanism].warms_on_failover:
                live = self.partition.live() - {sw.switch_id}
                ahead = (self.state.epoch, self.partition.buckets(live), live, [*self.state.failed, name])
        if ahead is not None:
            # a drain: the spine still serves its buckets, so their hot keys are cached at the new owners before
            # the routes move (off the lock; inserting any key at any time is coherent, see warmup.py), and
            # their reads meet a warm cache instead of the storage servers
            self._warm_new_owners(*ahead, drain=True, ahead=True)
        with self.lock:
            self._check_fail(sw)
            t_failover = time.monotonic()
            stopped = self.procs is not None and name in self.procs and not keep_running
            self.state.failed[name] = Failure(
                admin=True, since=time.time(), reason="failed by the operator", stopped=stopped
            )
            self.instruments.switch_failures.labels("operator").inc()
            moved, waiting = 0, list[str]()
            if sw.role == Role.SPINE:
                moved, waiting = self.failover(warmed=ahead is not None)
                self.state.failovers += 1
                self.state.last_failover_s = time.monotonic() - t_failover
                self.instruments.failover_seconds.observe(self.state.last_failover_s)
            if stopped:
                assert self.procs is not None
                try:
                    self.procs.stop(name)
                except SwitchProcessError as e:  # failed over all the same; its data plane may live on
                    log.error("%s: %s", name, e)
                    self.save()
                    raise ControllerError(f"{name} is out of service but {e}; take it down by hand") from None
                self.health[name].alive = False
            self.save()
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
        sw = self.switch(name)
        t = time.monotonic()
        with self.lock:
            failure = self.state.failed.get(name)
            if failure is None:
                raise ControllerError(f"{name} is not failed; nothing to recover (see `distcache-ctl status`)")
            if name in self.recovering:
                raise ControllerError(f"{name} is being recovered already; see `distcache-ctl status`")
            self.recovering.add(name)
        try:
            if failure.stopped and self.procs is not None and not self.procs.running(name):
                try:
                    self.procs.start(name)
                except SwitchProcessError as e:
                    raise ControllerError(f"cannot start {name} again: {e}") from None
            self._wait_back(sw, timeout)
            if sw.role == Role.SPINE:
                self._rejoin(sw)
            with self.lock:
                before = self.partition.buckets()
                if sw.role == Role.SPINE:
                    self.state.failed.pop(name)
                    self.state.epoch += 1
                    self.save()
                    self.push_shims()
                    self.configure({Role.STORAGE_LEAF, Role.CLIENT_LEAF})
                    self.configure({Role.SPINE})
                    self.partition.remember(self.partition.buckets())
                else:
                    # configured first, in service after: a client leaf's routes are current before the
                    # shims may count on them (shim_down)
                    self.sessions.stale.pop(name, None)
                    try:
                        if sw.role == Role.CLIENT_LEAF:
                            self.configurer.bring_up_client_leaf(self.cluster(), sw, self.state.replicated_keys())
                        else:
                            # a storage leaf comes back empty, as a spine does: failed but kept running (or
                            # paused, or a kernel leaf whose programs outlived their process) its copies were
                            # invalidated by every write all along (shim_down never names it), so this is
                            # no fix of coherence but what `fail` promises (recover flushes) and a clean slate
                            self._flush(sw)
                            self._configure_agent(sw)
                    except (ConnectionError, grpc.RpcError, P4RuntimeError) as e:
                        raise ControllerError(
                            f"{name} answers but could not be configured: {failure_reason(e)}"
                        ) from None
                    self.state.failed.pop(name)
                    self.save()
                    self.push_shims()
                h = self.health[name]
                h.alive, h.misses, h.detected = True, 0, None
                self.state.recoveries += 1
                self.save()
                moved = sum(a != b for a, b in zip(before, self.partition.buckets(), strict=True))
        finally:
            with self.lock:
                self.recovering.discard(name)
                if name in self.shims.rejoining:
                    self.shims.rejoining.discard(name)
                    if name in self.state.failed:  # it did not make it back: the shims skip it again
                        self.push_shims()
        return f"{name}: back in service; {moved} buckets moved back to it", moved, time.monotonic() - t

    def _rejoin(self, sw: Switch) -> None:
        """Steps 1-2 of a spine's recovery, and its warm-up: the shims stop skipping it before its cache
        is flushed (it still owns no bucket), so nothing it caches from then on can be missed by a write
        (it stays out of every push's down-set while ``_rejoining``); then, off the lock, the hottest keys
        of the buckets it gets back are cached at it, as their current owners count them
        (:mod:`controller.warmup`, paced), so their reads meet a warm cache once the routes lead to it."""
        with self.lock:
            self.shims.rejoining.add(sw.name)
            self.push_shims()
            self._flush(sw)
            warm = None
            if PLACEMENT[self.cluster().mechanism].warms_on_failover:
                live = self.partition.live() | {sw.switch_id}
                owners = sorted(self.cluster().switch_by_id(i).name for i in self.partition.live())
                warm = (self.state.epoch, self.partition.buckets(live), live, owners)
        if warm is not None:
            self._warm_new_owners(*warm, drain=True, ahead=True)

    def _flush(self, sw: Switch) -> None:
        try:
            st = self.agents[sw.name].flush()
            log.info("%s: cache flushed before it serves again (%d keys left)", sw.name, st.occupied)
        except grpc.RpcError as e:
            raise ControllerError(
                f"{sw.name}: its agent could not flush the cache ({failure_reason(e)}); start "
                f"the agent (python -m agent --switch {sw.name} ...) and retry"
            ) from None

    def _wait_back(self, sw: Switch, timeout: float) -> None:
        """Until the switch answers again and, for a cache switch, its agent is configured and connected to
        it; an agent that says it has no configuration (it restarted while its switch was failed) is
        configured here, with the partition as it stands (its switch still owns nothing)."""
        deadline = time.monotonic() + timeout
        missing = "its P4Runtime server does not answer"
        while True:
            probe = self.monitor.connect(sw)
            back = probe.probe(PROBE_TIMEOUT)
            probe.close()
            if back and not is_cache_switch(sw):
                return
            if back:
                st = self.monitor.poll_agent(sw.name)  # also tells the health view that it answers again
                if st is None:
                    missing = (
                        f"its agent at {self.cluster().agent_address(sw)} does not answer "
                        f"({self.health[sw.name].agent_error})"
                    )
                elif not st.configured:
                    log.info("%s: its agent restarted while the switch was failed; configuring it", sw.name)
                    try:
                        with self.lock:
                            self._configure_agent(sw)
                        continue
                    except grpc.RpcError as e:
                        missing = f"its agent could not be configured ({failure_reason(e)})"
                elif st.switch_connected:
                    return
                else:
                    missing = "its agent is not connected to it yet"
            else:
                missing = f"its P4Runtime server at {self.grpc_host}:{sw.grpc_port} does not answer"
            if time.monotonic() >= deadline:
                raise ControllerError(f"{sw.name} is not back after {timeout:.0f}s: {missing}; start it first")
            time.sleep(0.2)

    def switch(self, name: str) -> Switch:
        """The switch called ``name``; ControllerError naming the switches there are if none is."""
        try:
            return self.cluster().switch(name)
        except KeyError:
            raise ControllerError(
                f"no switch named {name!r}; switches: {', '.join(sw.name for sw in self.cluster().switches())}"
            ) from None
