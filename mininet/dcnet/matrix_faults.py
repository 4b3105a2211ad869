"""The fault matrix's faults (``make linearizability``): the actions of a drawn schedule on one deployment.

Each action of :class:`Faults` is named after its kind in :mod:`dcnet.fault_schedule`, applies the
fault and waits for its effect (a spine declared dead and back, a process answering again as a new
process, packets the injector dropped...), and says in one line what happened; a fault counts only if
it took effect while the clients were running.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable

from dcnet.deploy import Deployment, DeploymentError
from dcnet.fault_schedule import DEDUP_FULL_MEMORY, Fault, Tally
from dcnet.netfaults import FaultConfig, PacketFaults
from distcache.cluster import Host
from distcache.rpc.controller import ControllerUnreachableError
from distcache.rpc.protos import controller_pb2
from distcache.rpc.shim import ShimLink, ShimUnavailableError
from harness.processes import SwitchProcesses

# a spine's dead data plane (spine_dp_dead): every DistCache packet to and from it, on both ends of its links
DP_DEAD = FaultConfig(match="distcache", drop=1.0)
DP_DETECT_S = 1.0  # after a death: how long the controller may still take to declare it (probe checks lag)
FLOOD_CONCURRENCY = 48  # a write flood's requests in flight, dealt over the client hosts


def _fabric_links(dep: Deployment) -> list[tuple[object, object]]:
    """(interface, its peer) for every switch interface whose link leads to another switch."""
    switches = set(dep.net.switches)  # type: ignore[union-attr]
    out = []
    for sw in switches:
        for intf in sw.intfList():
            link = intf.link
            if link is None:
                continue
            other = link.intf2 if link.intf1 is intf else link.intf1
            if other.node in switches:
                out.append((intf, other))
    return out


def switch_ports(dep: Deployment, name: str) -> list[str]:
    """Both ends of every link between switch ``name`` and another switch: with the injector on their egress,
    every frame to or from ``name`` over the fabric (all of a spine's links) crosses one of them."""
    return sorted(
        p
        for intf, other in _fabric_links(dep)
        if intf.node.name == name  # type: ignore[attr-defined]
        for p in (intf.name, other.name)
    )


def fabric_ports(dep: Deployment) -> list[str]:
    """Both ends of every switch-to-switch link: their egress carries every frame crossing the fabric, in
    each direction (every coherence path and every request from a client rack crosses it).  Host-facing
    ports are left alone: a copy a switch port sends towards a host would be read back by BMv2 as input."""
    return sorted(intf.name for intf, _ in _fabric_links(dep))  # type: ignore[attr-defined]


class Faults:
    """The actions of a schedule on one deployment, each waiting for its own effect."""

    def __init__(
        self,
        dep: Deployment,
        mechanism: str,
        tally: Tally,
        running: threading.Event,
        packets: PacketFaults | None = None,
        background: FaultConfig | None = None,
    ) -> None:
        """``packets``: the cell's injector (on every fabric port), whose ``background`` configuration a
        data-plane death replaces on the dead spine's links for its length."""
        self.dep, self.mechanism, self.tally, self.running = dep, mechanism, tally, running
        self.cluster = dep.cluster
        self.procs = SwitchProcesses(dep.run_dir / "switches.json")
        self.shifts = 0
        self.floods = 0
        self.packets, self.background = packets, background or FaultConfig(enabled=False)
        self.dp_dropped = 0  # packets the data-plane deaths dropped (the injector counts them as dropped too)
        # (kind, target, start, end) of every fault that took effect, CLOCK_MONOTONIC ns: its at-risk window
        self.windows: list[tuple[str, str, int, int]] = []

    def apply(self, f: Fault) -> None:
        """Apply one fault; count it only if it took effect while the clients were running."""
        action: Callable[..., str] = getattr(self, f.kind)
        t, start = time.monotonic(), time.monotonic_ns()
        try:
            what = action(f.target, f.hold) if f.hold else action(f.target)
        except Exception as e:  # noqa: BLE001 - a fault that could not be applied is reported, never fatal
            self.tally.could_not(f.kind, f"{f.target}: {type(e).__name__}: {e}")
            return
        if self.running.is_set():
            self.tally.took_effect(f.kind, f"{what} ({time.monotonic() - t:.1f} s)")
            self.windows.append((f.kind, f.target, start, time.monotonic_ns()))
        else:
            self.tally.could_not(f.kind, f"{f.target}: took effect after the clients stopped")

    # -- fabric ---------------------------------------------------------------------------------
    def spine_crash(self, spine: str) -> str:
        detected = self._crash(spine)
        return f"{spine} killed, declared dead after {detected:.2f} s, back by itself"

    def spine_operator(self, spine: str) -> str:
        tries = self._fail_and_recover(spine, 1.0)
        return f"distcache-ctl fail {spine}, recover {spine}" + (f" (recover tried {tries} times)" if tries > 1 else "")

    def spine_dp_dead(self, spine: str, hold: float = 1.0) -> str:
        """The spine's data plane dies for ``hold`` s while its P4Runtime server and agent answer: every
        DistCache packet to and from it is dropped on both ends of its links (coherence, requests, replies
        and the controller's probes alike).  Leaves route around it within tens of milliseconds; a death
        past the controller's 0.5 s of unanswered probes is failed over, and the controller must recover
        the spine by itself once its probes are answered again.  Takes effect only if the injector dropped
        packets while the spine was dead."""
        return self._dp_dead([spine], hold)

    def fabric_dp_dead(self, _: str, hold: float = 1.0) -> str:
        """Every spine's data plane dies at once for ``hold`` s (as ``spine_dp_dead``): no spine is left in
        service, so no read may go to any spine's cache -- those the failover left alone keep copies the
        outage's writes no longer invalidate -- until each is recovered, flushed first."""
        return self._dp_dead([self.cluster.spine(i).name for i in range(self.cluster.spines)], hold)

    def _dp_dead(self, spines: list[str], hold: float) -> str:
        if self.packets is None:
            raise DeploymentError("no packet injector in this cell")
        ports = sorted(p for spine in spines for p in switch_ports(self.dep, spine))
        st = self._status()
        failed_before, failovers = {s.name for s in st.switches if s.failed}, st.failovers
        self.packets.configure(DP_DEAD, ports=ports)
        try:
            # read after the drop began and before it ends: every packet counted between is the death's
            before = self.packets.counters(ports).dropped
            time.sleep(hold)
            dropped = self.packets.counters(ports).dropped - before
        finally:
            self.packets.configure(self.background, ports=ports)
        self.dp_dropped += dropped
        # the controller reads the leaves' probe counters every 50 ms: a death it caught is declared by now
        deadline, declared = time.monotonic() + DP_DETECT_S, set[str]()
        while time.monotonic() < deadline:
            st = self._status()
            declared |= {s.name for s in st.switches if s.name in spines and s.failed and s.name not in failed_before}
            if len(spines) == 1 and st.failovers > failovers:
                declared.add(spines[0])  # failed over and already recovered between two looks
            if len(declared) == len(spines):
                break
            time.sleep(0.1)
        for spine in sorted(declared):
            self.dep.wait_switch(spine, failed=False)
        which = spines[0] if len(spines) == 1 else ", ".join(spines)
        if dropped <= 0:
            links = f"{which} was failed over, but its links" if declared else f"{which}'s links"
            raise DeploymentError(f"{links} carried no DistCache packet in {hold:.2f} s")
        if len(spines) == 1:
            head = f"{which}'s data plane dead for {hold:.2f} s ({dropped} DistCache packets dropped); "
            return head + (
                "failed over by the controller and recovered by itself"
                if declared
                else "forwarding again before the controller failed it over"
            )
        return (
            f"the data planes of {which} dead for {hold:.2f} s ({dropped} DistCache packets dropped); "
            f"{len(declared)} of {len(spines)} failed over by the controller and recovered by themselves"
        )

    # -- every switch role: crashes, drains, pauses (issue 44) -------------------------------------
    def spine_keep_running(self, spine: str, hold: float = 2.0) -> str:
        return self._keep_running(spine, hold)

    def leaf_keep_running(self, leaf: str, hold: float = 2.0) -> str:
        return self._keep_running(leaf, hold)

    def _keep_running(self, name: str, hold: float) -> str:
        """An operator's drain: ``fail --keep-running`` (the switch goes on forwarding with its cache, out of
        service), ``hold`` s, ``recover`` (flushed first)."""
        tries = self._fail_and_recover(name, hold, "--keep-running")
        return f"distcache-ctl fail {name} --keep-running, {hold:.2f} s, recover {name}" + (
            f" (recover tried {tries} times)" if tries > 1 else ""
        )

    def _fail_and_recover(self, name: str, hold: float, *flags: str) -> int:
        """``distcache-ctl fail NAME [flags]``, ``hold`` s, ``recover NAME``, each tried until it is taken (as
        an operator would), then until the switch is in service; how many tries the recover took."""
        self._until_done(lambda: self.dep.ctl("fail", name, *flags))
        time.sleep(hold)
        tries = self._until_done(lambda: self.dep.ctl("recover", name))
        self.dep.wait_switch(name, failed=False)
        return tries

    def storage_leaf_crash(self, leaf: str) -> str:
        return f"{leaf} killed, declared dead after {self._crash(leaf):.2f} s, brought back by the controller"

    def client_leaf_crash(self, leaf: str) -> str:
        return f"{leaf} killed, declared dead after {self._crash(leaf):.2f} s, brought back by the controller"

    def _crash(self, name: str) -> float:
        """Kill the switch's process (its data plane taken down with it: SwitchProcesses.stop), wait for the
        controller to declare it dead, start it again, and wait for the controller to bring it back; how long
        the controller took to declare it (its last detection)."""
        self.procs.stop(name)
        self.dep.wait_switch(name, failed=True)
        detected = self._status().last_detection_s
        self.procs.start(name)
        self.dep.wait_switch(name, failed=False)
        return detected

    def spine_pause(self, spine: str, hold: float = 1.0) -> str:
        return self._pause(spine, hold)

    def leaf_pause(self, leaf: str, hold: float = 1.0) -> str:
        return self._pause(leaf, hold)

    def _pause(self, name: str, hold: float) -> str:
        """SIGSTOP the switch's process for ``hold`` s, then SIGCONT (a GC pause, a wedged host): a pause past
        the controller's detection is declared dead and failed over, and the switch resumes with its cache and
        the packets queued at its ports into a deployment that moved on; then wait until it is in service."""
        pid = self.procs.pid(name)
        if pid is None:
            raise DeploymentError(f"{name} has no running process to pause")
        declared = False
        os.killpg(pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + hold
            while time.monotonic() < deadline:
                if not declared:
                    declared = any(s.name == name and s.failed for s in self._status(0.2).switches)
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        finally:
            os.killpg(pid, signal.SIGCONT)
        self.dep.wait_switch(name, failed=False)
        return f"{name} paused for {hold:.2f} s, " + (
            "declared dead meanwhile, resumed and brought back by the controller" if declared else "resumed"
        )

    # -- storage: a shim's clock, write floods ------------------------------------------------------
    def shim_clock_back(self, name: str) -> str:
        """The shim restarted (with its state) under a clock stepped an hour back (tests/breaks.py's
        ``clock-back`` condition): its coherence numbers must still be newer than every earlier life's."""
        h = self._server(name)
        self.dep.kill_shim(name)
        self.dep.start_shim(h, clock_back=True)
        self._until_view_known(h)
        return f"shim {name} killed, restarted under a clock an hour back, view back"

    def shim_dedup_full(self, name: str, hold: float = 2.0) -> str:
        """The shim restarted (with its state) with a dedup table of DEDUP_FULL_MEMORY, too small for its writes:
        for ``hold`` seconds it refuses most of them BUSY (each recorded in Redis, so no copy is applied later),
        then it is restarted with its usual bound.  Took effect if it refused at least one write."""
        h = self._server(name)
        self.dep.kill_shim(name)
        self.dep.start_shim(h, dedup_memory=DEDUP_FULL_MEMORY)
        link = self._until_view_known(h)
        time.sleep(hold)
        busy = int(link.stats()["errors"].get("busy", 0))
        self.dep.kill_shim(name)
        self.dep.start_shim(h)
        self._until_view_known(h)
        if not busy:
            raise DeploymentError(f"the shim of {name} refused no write BUSY in {hold:g} s with a full dedup table")
        return f"shim {name} with {DEDUP_FULL_MEMORY >> 10} KB of dedup memory refused {busy} writes BUSY, restarted"

    def gateway_restart(self, name: str) -> str:
        """Client host ``name``'s gateway killed (SIGKILL: its connections break mid-request, the writes it had
        sent have unknown outcomes for their clients) and started again on its address; its RESP clients
        reconnect. Took effect if it was serving when killed."""
        host = self.dep.client_host(name)
        if not host.gateway.running:
            raise DeploymentError(f"the gateway of {name} was not running")
        host.gateway.kill()
        time.sleep(0.2)
        host.start_gateway()
        return f"gateway of {name} killed, started again"

    def _until_view_known(self, h: Host, timeout: float = 20.0) -> ShimLink:
        """Wait for a restarted shim to get the controller's view; its control link."""
        link = ShimLink(self.dep.shim_control(h))
        deadline = time.monotonic() + timeout
        while not self._view_known(link):
            if time.monotonic() > deadline:
                raise DeploymentError(
                    f"the restarted shim {h.name} did not get the controller's view within {timeout:g} s"
                )
            time.sleep(0.05)
        return link

    def write_flood(self, _: str) -> str:
        """Another client on every client host floods the storage servers with writes of keys of its own (and
        reads them back, judged by its own oracle) for a few seconds, beside the recorded clients: queues,
        dedup and coherence under load.  From every client rack at once, so a leaf fault in another lane
        (one rack's leaf paused or down) leaves the others flooding.  Took effect if the storage servers
        acknowledged its writes or refused requests for load (rate limit, in-flight bound)."""
        self.floods += 1
        hosts = [self.cluster.client(r, self.cluster.clients_per_rack - 1) for r in range(self.cluster.client_racks)]
        reports: dict[str, dict] = {}
        failures: list[str] = []

        def flood(i: int, host: Host) -> None:
            cfg = {
                "keys": 200,
                "zipf": 0.99,
                "read_ratio": 0.3,
                "duration": 3.0,
                "load_keys": 0,
                "concurrency": max(1, FLOOD_CONCURRENCY // len(hosts)),
                "prefix": f"flood{self.floods}-{i}-",
                "seed": 1000 * self.floods + i,
            }
            try:
                for line in self.dep.bench(host, cfg):
                    if line.get("type") == "report":
                        reports[host.name] = line
            except DeploymentError as e:
                failures.append(str(e))

        refused = -self._load_refusals()
        threads = [threading.Thread(target=flood, args=(i, h), daemon=True) for i, h in enumerate(hosts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        refused += self._load_refusals()
        bad = {name: r for name, r in reports.items() if r.get("stale", 0) > 0 or r.get("wrong", 0) > 0}
        if bad:
            raise DeploymentError(
                f"the flood's own reads were stale or wrong: {[r.get('findings') for r in bad.values()]}"
            )
        acked = sum(int(r.get("writes", 0)) - int(r.get("failed_writes", 0)) for r in reports.values())
        if acked <= 0 and refused <= 0:
            why = "; ".join(failures) or str([r.get("errors") for r in reports.values()])
            raise DeploymentError(f"the flood had no write acknowledged and none refused ({why})")
        return (
            f"{acked} writes acknowledged in 3 s by other clients on {', '.join(h.name for h in hosts)}, "
            f"{max(0, refused)} requests refused by the servers for load"
        )

    def _load_refusals(self) -> int:
        """Requests the storage servers refused for load so far (rate limit, in-flight bound), over the shims
        that answer (one restarting starts its counters again: counted as 0 then)."""
        total = 0
        for h in self.cluster.servers():
            try:
                errors = ShimLink(self.dep.shim_control(h)).stats().get("errors", {})
            except ShimUnavailableError:
                continue
            total += int(errors.get("rate_limited", 0)) + int(errors.get("overload", 0))
        return total

    def _status(self, timeout: float = 30.0) -> controller_pb2.ClusterStatus:
        """The controller's status, asked again while it restarts (another lane's fault); a status with no
        switch failed if it does not answer within ``timeout`` s (a pause's look while the controller is
        down: the pause goes on all the same)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.dep.controller.ctl.status()  # type: ignore[union-attr]
            except ControllerUnreachableError:
                if time.monotonic() > deadline:
                    if timeout < 1.0:
                        return controller_pb2.ClusterStatus()
                    raise
                time.sleep(0.1)

    @staticmethod
    def _until_done(command: Callable[[], str], timeout: float = 60.0) -> int:
        """Run an operator command until it succeeds, as an operator would (another fault may be under way:
        recover refuses while the switch's agent is restarting, saying so); returns how many tries it took."""
        deadline, tries = time.monotonic() + timeout, 0
        while True:
            tries += 1
            try:
                command()
                return tries
            except DeploymentError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def controller_restart(self, _: str) -> str:
        self.dep.kill_controller()
        time.sleep(0.5)
        self.dep.start_controller()
        return "controller killed (SIGKILL) and started again"

    def controller_mid_failover(self, spine: str) -> str:
        self.procs.stop(spine)
        time.sleep(random.uniform(0.2, 0.6))  # while the controller detects the crash and moves buckets
        self.dep.kill_controller()
        self.dep.start_controller()
        self.dep.wait_switch(spine, failed=True)
        self.procs.start(spine)
        self.dep.wait_switch(spine, failed=False)
        return f"{spine} killed, controller killed during its failover, restarted: {spine} failed over and back"

    def mechanism_change(self, away: str) -> str:
        self._until_done(lambda: self.dep.ctl("mechanism", away))
        time.sleep(1.5)
        self._until_done(lambda: self.dep.ctl("mechanism", self.mechanism))
        return f"mechanism {away} and back to {self.mechanism}"

    # -- processes ------------------------------------------------------------------------------
    def _agent_restart(self, name: str, stateless: bool) -> str:
        self.dep.kill_agent(name)
        if stateless:
            (self.dep.run_dir / f"agent-{name}.state.json").unlink(missing_ok=True)
        time.sleep(0.3)
        self.dep.restart_agent(name)
        st = self.dep.controller.agent_status()[name]  # type: ignore[union-attr]
        # without its state the agent must raise the cache epoch (a switch that came up empty meanwhile is
        # raised too)
        if stateless and st.epoch_raises < 1:
            raise DeploymentError(f"agent of {name} restarted without its state but did not raise the epoch")
        return f"agent of {name} killed, restarted {'without' if stateless else 'with'} its state file" + (
            f" (cache epoch {st.cache_epoch})" if stateless else ""
        )

    def agent_restart(self, name: str) -> str:
        return self._agent_restart(name, stateless=False)

    def agent_restart_stateless(self, name: str) -> str:
        return self._agent_restart(name, stateless=True)

    def _server(self, name: str) -> Host:
        return next(h for h in self.cluster.servers() if h.name == name)

    def _shim_restart(self, name: str, stateless: bool) -> str:
        h = self._server(name)
        self.dep.kill_shim(name)
        if stateless:
            (self.dep.run_dir / f"shim-{name}.state.json").unlink(missing_ok=True)
        self.dep.start_shim(h)
        self._until_view_known(h)
        return f"shim {name} killed, restarted {'without' if stateless else 'with'} its state file, view back"

    @staticmethod
    def _view_known(link: ShimLink) -> bool:
        try:
            return bool(link.stats()["view_known"])
        except ShimUnavailableError:  # its control socket is not accepting yet
            return False

    def shim_restart(self, name: str) -> str:
        return self._shim_restart(name, stateless=False)

    def shim_restart_stateless(self, name: str) -> str:
        return self._shim_restart(name, stateless=True)

    def redis_kill(self, name: str) -> str:
        h = self._server(name)
        link = ShimLink(self.dep.shim_control(h))
        before = link.stats()["redis_restarts"]
        self.dep.kill_redis(name)
        self.dep.start_redis(h)
        deadline = time.monotonic() + 10
        while link.stats()["redis_restarts"] == before:
            if time.monotonic() > deadline:
                raise DeploymentError(f"the shim of {name} did not notice its redis-server restart")
            time.sleep(0.05)
        return f"redis-server of {name} killed (-9) and restarted; the shim resynchronized"

    def hot_shift(self, _: str) -> str:
        """Another client makes a few other keys very hot for a while: the caches take them in (evicting the
        history's keys where those are colder).  Took effect if the caches inserted or evicted keys meanwhile."""
        self.shifts += 1
        before = self._churn()
        cfg = {
            "keys": 6,
            "zipf": 0.0,
            "read_ratio": 1.0,
            "duration": 4.0,
            "load_keys": 6,
            "concurrency": 24,
            "prefix": f"shift{self.shifts}-",
            "seed": self.shifts,
        }
        # from the first client rack whose workload runs through: another lane may have a rack's leaf paused or
        # down, and a workload that cannot load its keys exits
        tried: list[str] = []
        for rack in range(self.cluster.client_racks):
            host = self.cluster.client(rack, self.cluster.clients_per_rack - 1)
            try:
                for _line in self.dep.bench(host, cfg):
                    pass
                break
            except DeploymentError as e:
                tried.append(str(e))
        else:
            raise DeploymentError("; ".join(tried))
        after = self._churn()
        # an agent restarted meanwhile starts its counters again: count the agents that answered both times
        inserted = sum(max(0, after[n][0] - before[n][0]) for n in after.keys() & before.keys())
        evicted = sum(max(0, after[n][1] - before[n][1]) for n in after.keys() & before.keys())
        if inserted <= 0 and evicted <= 0:
            raise DeploymentError("6 other keys were made hot but no cache inserted or evicted anything")
        return f"6 other keys made hot: {inserted} insertions, {evicted} evictions"

    def _churn(self) -> dict[str, tuple[int, int]]:
        """Keys each answering agent inserted from reports and evicted, so far (an agent another fault is
        restarting is left out)."""
        out = {}
        for name, agent in self.dep.controller.agents.items():  # type: ignore[union-attr]
            try:
                st = agent.status()
            except Exception:  # noqa: BLE001 - not answering right now
                continue
            out[name] = (st.auto_inserted, st.evicted)
        return out
