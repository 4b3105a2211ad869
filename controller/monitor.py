"""Watching the switches, their agents and the shims: probe threads, data-plane probes, the health poll.

Nothing slow may stand between a switch's death and its detection, so the work is split:

* one probe thread per switch: P4Runtime Capabilities every PROBE_INTERVAL (REFUSED_RECHECK after one
  refused at once), PROBE_TIMEOUT each;
  it only records what it sees (a hung peer delays its own probe, nobody else's);
* the health poll: agents' Status, counters and shims' stats every HEARTBEAT, each call with a
  short deadline and all at once; it caches what it reads (the Status API answers from it when a
  live read does not come in time) and notes what needs work;
* the reconciler (:mod:`controller.reconcile`): every change (failover, recovery, configuration
  retries, shim pushes), under the lock, woken by the other two.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import replace

import grpc

from controller.health import Health, failure_reason
from controller.instruments import Instruments
from controller.partition import Partition
from controller.sessions import LeafSessions
from controller.shims import Shims
from controller.state import ControllerState
from controller.timing import (
    AGENT_STATUS_TIMEOUT,
    DP_CHECK_INTERVAL,
    DP_DEAD_REASON,
    DP_MISSES,
    DP_POKE_MISSES,
    HEARTBEAT,
    MISSES_TO_FAIL,
    P4RT_DEAD_REASON,
    PROBE_INTERVAL,
    PROBE_TIMEOUT,
    REFUSED_RECHECK,
    REFUSED_WITHIN,
    SPINE_DEATHS_KEPT,
)
from distcache import p4names
from distcache.cluster import Cluster, Host, Role, Switch
from distcache.rpc.agent import AgentClient
from distcache.rpc.protos import agent_pb2
from distcache.rpc.shim import ShimLink, ShimUnavailableError
from p4rt.client import P4RuntimeError, SwitchConnection
from p4rt.probes import DP_PROBE_INTERVAL, ProbeLedger, ProbeSource, SpineDeath, read_probe_counts, spine_deaths

log = logging.getLogger("controller")


class Monitor:
    """Records what the probes and polls see (``health``, the sessions' staleness, :attr:`shims_behind`, the
    probe ledger) and wakes the reconciler to act on it; it configures nothing itself.

    It takes the cluster for its topology only (the mechanism does not matter to it), the controller's state
    for the failed set and the epoch (it changes one thing there: the reason of a switch failed for its data
    plane whose process is gone too), and the connections and parts it reads through."""

    def __init__(
        self,
        cluster: Cluster,
        state: ControllerState,
        partition: Partition,
        sessions: LeafSessions,
        shims: Shims,
        health: Mapping[str, Health],
        readers: dict[str, SwitchConnection],
        connect: Callable[[Switch], SwitchConnection],
        agent_status: Mapping[str, AgentClient],
        shim_address: Callable[[Host], str],
        instruments: Instruments,
        wake: threading.Event,
        stop: threading.Event,
        pool: futures.ThreadPoolExecutor,
    ) -> None:
        self.cluster, self.state, self.partition, self.sessions, self.shims = cluster, state, partition, sessions, shims
        self.health, self.readers, self.connect, self.agent_status = health, readers, connect, agent_status
        self.shim_address, self.instruments = shim_address, instruments
        self.wake, self.stop, self.pool = wake, stop, pool  # wake: the reconciler has something to do now
        # a switch's probe thread probes now (set by dp_check, and by the controller's close to end the thread)
        self.poke = {sw.name: threading.Event() for sw in cluster.switches()}
        self._poked: set[int] = set()  # spines poked for their current silence
        self.probes = ProbeLedger(DP_MISSES)  # the client leaves' probe counters, as last read
        self.dp_dead: set[int] = set()  # spines whose probes go unanswered at every client leaf
        self._dp_silent_since: dict[int, float] = {}  # spine id -> when the ledger first found it silent
        self.spine_deaths: deque[SpineDeath] = deque(maxlen=SPINE_DEATHS_KEPT)  # reported by the client leaves
        self.shims_behind: dict[str, bool] = {}  # shim host -> needs its view again (else: partition only)

    def _spines(self) -> list[Switch]:
        return [self.cluster.spine(i) for i in range(self.cluster.spines)]

    def probe_loop(self, sw: Switch) -> None:
        wait, poke = PROBE_INTERVAL, self.poke[sw.name]
        while True:
            poke.wait(wait)
            poke.clear()
            if self.stop.is_set():
                return
            try:
                wait = self.probe(sw)
            except Exception:
                log.exception("%s: probe handling failed", sw.name)
                wait = PROBE_INTERVAL

    def probe(self, sw: Switch) -> float:
        """Probe ``sw`` once and record it; returns how long to wait before the next probe."""
        h = self.health[sw.name]
        reader = self.readers[sw.name]
        t = time.monotonic()
        ok = reader.probe(PROBE_TIMEOUT)
        if ok:
            h.misses, h.alive, h.detected = 0, True, None
            if sw.name in self.state.failed:
                self.wake.set()  # it may come back
            return PROBE_INTERVAL
        now = time.monotonic()
        refused = now - t < REFUSED_WITHIN
        self.readers[sw.name] = self.connect(sw)  # a fresh channel: no reconnect backoff hides its return
        reader.close()
        if h.misses == 0:
            h.first_miss = now - PROBE_INTERVAL / 2  # it stopped answering somewhere since the last good probe
        h.misses += 1
        failure = self.state.failed.get(sw.name)
        if failure is not None and failure.reason == DP_DEAD_REASON and h.misses >= MISSES_TO_FAIL:
            # failed for its data plane, now its process is gone too: it comes back unconfigured (no probe
            # answers until recovered), so recover it like a crashed switch once it answers
            self.state.failed[sw.name] = replace(failure, reason=P4RT_DEAD_REASON)
        if h.misses >= MISSES_TO_FAIL and h.alive:
            h.alive = False
            if sw.name not in self.state.failed:
                h.detected = (h.first_miss, now)
                self.wake.set()
        return REFUSED_RECHECK if refused and h.alive else PROBE_INTERVAL

    def dp_probe_loop(self) -> None:
        """Probe every spine's data plane through every client leaf, and watch the answers."""
        next_check = time.monotonic()
        spines = self._spines()
        sources: dict[str, ProbeSource] = {}  # per client leaf: its probe port where it has one (p4rt.probes)
        try:
            while not self.stop.wait(DP_PROBE_INTERVAL):
                for name, conn in list(self.sessions.conns.items()):
                    source = sources.get(name)
                    if source is None:
                        source = sources[name] = ProbeSource(self.cluster.switch(name))
                    with contextlib.suppress(P4RuntimeError):  # its stream is down: the reconciler brings it back
                        source.round(conn, spines)
                    self.take_deaths(name, conn)
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + DP_CHECK_INTERVAL
                    try:
                        self.dp_check()
                    except Exception:
                        log.exception("data-plane probe check failed")
        finally:
            for source in sources.values():
                source.close()

    def take_deaths(self, name: str, conn: SwitchConnection) -> None:
        """Keep the spine deaths client leaf ``name`` reported since the last look."""
        try:
            deaths = spine_deaths(conn, self.cluster.switch(name), self.cluster, time.time())
        except P4RuntimeError:
            return
        for d in deaths:
            self.instruments.leaf_detection_seconds.observe(d.detect_s)
            log.info(
                "%s: %s was dead in its data plane: found dead %.1f ms after it was last heard, silent %.0f ms",
                d.leaf,
                d.spine,
                d.detect_s * 1e3,
                d.silent_s * 1e3,
            )
        self.spine_deaths.extend(deaths)

    def dp_check(self) -> None:
        """Read the client leaves' probe counters; a spine silent at all of them is declared dead."""
        for name in list(self.sessions.conns):
            try:
                self.probes.update(name, read_probe_counts(self.readers[name], self.partition.spine_ids))
            except P4RuntimeError:
                continue
        now = time.monotonic()
        quiet = self.probes.dead(self.partition.spine_ids, DP_POKE_MISSES)
        for sw in self._spines():
            if sw.switch_id in quiet and sw.switch_id not in self._poked and sw.name not in self.state.failed:
                self.poke[sw.name].set()  # silent at every client leaf: is its P4Runtime server gone too?
        self._poked = quiet
        dead = self.probes.dead(self.partition.spine_ids)
        for sid in dead - set(self._dp_silent_since):
            self._dp_silent_since[sid] = now - DP_MISSES * DP_PROBE_INTERVAL
        for sid in set(self._dp_silent_since) - dead:
            del self._dp_silent_since[sid]
        self.dp_dead = dead
        for sw in self._spines():
            if sw.switch_id in dead and sw.name not in self.state.failed and self.health[sw.name].dp_detected is None:
                self.health[sw.name].dp_detected = (self._dp_silent_since[sw.switch_id], now)
                self.wake.set()

    def health_loop(self) -> None:
        while not self.stop.is_set():
            try:
                self.poll()
            except Exception:
                log.exception("health poll failed")
            self.stop.wait(HEARTBEAT)

    def read_stats(self, name: str) -> tuple[dict[int, tuple[int, int]], dict[int, tuple[int, int]]]:
        """dc_stats and dc_drops of switch ``name``, read now (READ_TIMEOUT each)."""
        reader = self.readers[name]
        return reader.read_counter(p4names.DC_STATS), reader.read_counter(p4names.DC_DROPS)

    def read_deaths(self, name: str) -> dict[str, int]:
        """Leaf ``name``'s spine_deaths counter by spine name (deaths that ended), read now."""
        out, spines = {}, set(self.partition.spine_ids)
        for sid, (packets, _) in self.readers[name].read_counter(p4names.SPINE_DEATHS).items():
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
            h.agent_alive, h.agent_error = (
                False,
                f"no reply within {AGENT_STATUS_TIMEOUT:g} s" if hung else failure_reason(e),
            )
            return None
        h.agent, h.agent_alive, h.agent_error = st, True, ""
        return st

    def poll(self) -> None:
        now = time.monotonic()
        agents = {name: self.pool.submit(self.poll_agent, name) for name in self.agent_status}
        reads = {
            sw.name: self.pool.submit(self.read_stats, sw.name)
            for sw in self.cluster.switches()
            if sw.name not in self.state.failed
        }
        for name, job in agents.items():
            st = job.result()
            if st is None:
                continue
            if not st.configured and name not in self.state.failed and name not in self.sessions.stale:
                log.warning("%s: its agent restarted; configuring it again", name)
                self.sessions.stale[name] = "its agent restarted"
            if name in self.sessions.stale:
                self.wake.set()
        for name, read in reads.items():
            try:
                stats, drops = read.result()
            except (P4RuntimeError, ValueError):  # ValueError: its reader was replaced (closed) meanwhile
                continue
            sw = self.cluster.switch(name)
            h = self.health[name]
            h.stats, h.drops = stats, drops
            idx = (
                (p4names.Stat.ROUTED_SPINE, p4names.Stat.ROUTED_LEAF)
                if sw.role == Role.CLIENT_LEAF
                else (p4names.Stat.READ_HIT, p4names.Stat.READ_MISS)
            )
            h.samples = ([*h.samples, (now, sum(stats.get(int(i), (0, 0))[0] for i in idx))])[-2:]
        for name, conn in list(self.sessions.conns.items()):
            if conn.stream_closed.is_set() and name not in self.state.failed and name not in self.sessions.stale:
                log.warning("%s: lost its stream (restarted?); reconnecting", name)
                self.sessions.stale[name] = "lost its P4Runtime stream (restarted?)"
                self.wake.set()
        down = self.shims.down(self.state.failed)
        for host in self.cluster.servers():
            try:
                st = ShimLink(self.shim_address(host), timeout=2.0).stats()
            except ShimUnavailableError:
                continue
            if not st.get("view_known") or st.get("epoch") != self.state.epoch:
                if not self.shims_behind.get(host.name):
                    log.warning(
                        "%s: shim restarted or behind (epoch %s); sending partition and view",
                        host.name,
                        st.get("epoch"),
                    )
                self.shims_behind[host.name] = True
                self.wake.set()
            elif sorted(st.get("down", [])) != down:
                self.shims_behind.setdefault(host.name, False)
                self.wake.set()

    def detail(self, name: str) -> str:
        """What is wrong with switch ``name``, for the Status API (empty: nothing)."""
        sw = self.cluster.switch(name)
        notes = []
        failure = self.state.failed.get(name)
        if failure is not None:
            notes.append(failure.reason)
            if sw.role == Role.SPINE and sw.switch_id not in self.shims.down(self.state.failed):
                leaves = self.shims.routing_to(sw)
                if leaves:
                    notes.append(f"writes still wait for its acks: {', '.join(leaves)} may still send it reads")
        stale = self.sessions.stale.get(name)
        if stale is not None and failure is None:  # a failed switch is configured by its recovery
            what = "routes not updated" if sw.role == Role.CLIENT_LEAF else "not reconfigured"
            notes.append(f"{what} (retrying): {stale}")
        return "; ".join(notes)

    def load(self, name: str) -> float:
        """Reads per second between the last two polls of switch ``name``'s counters; 0 until there are two,
        and 0 when they went down (its process restarted and began counting from zero again: not a
        negative load)."""
        s = self.health[name].samples
        if len(s) < 2 or s[1][0] <= s[0][0] or s[1][1] < s[0][1]:
            return 0.0
        return (s[1][1] - s[0][1]) / (s[1][0] - s[0][0])
