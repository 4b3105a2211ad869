"""The controller daemon under faults of the processes around it (issue 15, defects 4 and 5 and the
client-leaf reconfiguration order), with every part a real process on loopback and no Mininet.

The bed runs what a deployment runs, minus the hosts: one softswitch process per switch (no
interfaces: the P4Runtime side is what is under test), one agent process per cache switch, a
redis-server and the storage shim (its coherence packets go to a loopback port nobody answers),
and the controller daemon with a ``switches.json``, so ``fail`` stops and ``recover`` starts switch
processes as in Mininet.  The tests drive it as an operator does, through ``distcache-ctl``, and
by killing, restarting and stopping (SIGSTOP) processes behind everyone's back; they read the
outcome back from the switches' tables, the agents and the shim.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import text_format

from distcache import p4names
from distcache.cluster import Cluster
from distcache.hashing import h0
from distcache.partition import spine_buckets
from distcache.rpc.agent import AgentClient
from distcache.rpc.controller import ControllerClient
from distcache.rpc.protos import message_dict
from distcache.rpc.shim import ShimLink
from harness.processes import SHIM_BINARY, SwitchProcesses, pid_alive, tied_argv
from p4rt.client import SwitchConnection
from p4rt.p4info import load_p4info
from softswitch.dataplane import PROGRAM
from tests.common.keys import digest
from tests.common.softswitch_helpers import ports_free

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
INVALIDATE_DEADLINE = 2.5  # seconds a shim retries a path's INVALIDATE before it gives up (shim/coherence.go)


def _cluster() -> Cluster:
    """Two spines, one storage rack, one client rack, on loopback ports nobody else holds."""
    rng = random.Random()
    for _ in range(50):
        base = rng.randrange(20000, 60000)
        c = Cluster(
            spines=2,
            storage_racks=1,
            client_racks=1,
            cache_slots=16,
            grpc_base_port=base,
            agent_base_port=base + 256,
            controller_address=f"127.0.0.1:{base + 255}",
        )
        ports = (
            [sw.grpc_port for sw in c.switches()]
            + [base + 255]
            + [c.agent_base_port + sw.switch_id for sw in c.switches()]
        )
        if ports_free(ports):
            return c
    raise RuntimeError("no free loopback ports for the test bed")


def wait_for(what: str, cond: Callable[[], object], timeout: float) -> float:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, f"timed out after {timeout:.0f}s waiting for {what}"
        time.sleep(0.05)
    return time.monotonic() - t0


class LoopbackDeployment:
    """Every process of a small deployment, on loopback."""

    def __init__(self, run: Path) -> None:
        self.run = run
        self.cluster = _cluster()
        self.cluster_path = run / "cluster.json"
        self.cluster.save(self.cluster_path)
        self.p4info = run / "p4info.txt"
        self.p4info.write_text(text_format.MessageToString(PROGRAM.p4info()))
        self.server = self.cluster.server(0, 0)
        self.procs: dict[str, subprocess.Popen] = {}  # everything started here except the switches
        specs = {}
        for sw in self.cluster.switches():
            specs[sw.name] = {
                "cmd": [
                    sys.executable,
                    "-m",
                    "softswitch",
                    "--device-id",
                    str(sw.device_id),
                    "--grpc-addr",
                    f"127.0.0.1:{sw.grpc_port}",
                    "--log-file",
                    str(run / f"{sw.name}.log"),
                ],
                "pid_file": str(run / f"{sw.name}.pid"),
                "log": str(run / f"{sw.name}.out"),
                "grpc": f"127.0.0.1:{sw.grpc_port}",
            }
        (run / "switches.json").write_text(json.dumps(specs))
        self.switches = SwitchProcesses(run / "switches.json", tied=True)  # a killed test run leaves none behind
        try:
            for sw in self.cluster.switches():
                self.switches.start(sw.name)
            self._start_storage()
            for sw in self.cluster.switches():
                if sw.role.name != "CLIENT_LEAF":
                    self.start_agent(sw.name)
            self.start_controller()
        except BaseException:
            self.close()
            raise

    # -- processes ------------------------------------------------------------------------------
    def _popen(self, what: str, cmd: list[str]) -> subprocess.Popen:
        with open(self.run / f"{what}.out", "ab") as out:
            p = subprocess.Popen(
                tied_argv(cmd),  # a killed test run leaves nothing behind
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=REPO,
            )
        self.procs[what] = p
        return p

    def _start_storage(self) -> None:
        sock = self.run / "redis.sock"
        self._popen(
            "redis",
            [
                "redis-server",
                "--port",
                "0",
                "--unixsocket",
                str(sock),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.run),
            ],
        )
        wait_for("redis-server", sock.exists, 10)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # a port that answers nothing
            s.bind(("127.0.0.1", 0))
            peer = s.getsockname()[1]
        control = self.run / f"shim-{self.server.name}.sock"
        base = self.cluster.grpc_base_port  # a loopback address of its own: port 8888 is the shim's everywhere
        self.shim_ip = f"127.{base >> 8 & 255}.{base & 255}.9"
        self._popen(
            "shim",
            [
                str(SHIM_BINARY),
                "--cluster",
                str(self.cluster_path),
                "--server",
                self.server.name,
                "--listen",
                self.shim_ip,
                "--redis-url",
                f"unix://{sock}",
                "--control",
                f"unix:{control}",
                "--coherence-peer",
                f"127.0.0.1:{peer}",
                "--state-file",
                str(self.run / "shim.state.json"),
                "--log-file",
                str(self.run / "shim.log"),
            ],
        )
        wait_for("the shim's control socket", control.exists, 15)
        self.shim = ShimLink(f"unix:{control}")

    def start_agent(self, name: str, state_file: bool = True) -> None:
        state = ["--state-file", str(self.run / f"agent-{name}.state.json")] if state_file else []
        self._popen(
            f"agent-{name}",
            [
                sys.executable,
                "-m",
                "agent",
                "--cluster",
                str(self.cluster_path),
                "--switch",
                name,
                "--p4info",
                str(self.p4info),
                "--shim-dir",
                str(self.run),
                *state,
                "--log-file",
                str(self.run / f"agent-{name}.log"),
            ],
        )

    def kill_agent(self, name: str) -> None:
        p = self.procs.pop(f"agent-{name}")
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(5)

    def start_controller(self) -> None:
        self._popen(
            "controller",
            [
                sys.executable,
                "-m",
                "controller",
                "--cluster",
                str(self.cluster_path),
                "--p4info",
                str(self.p4info),
                "--shim-dir",
                str(self.run),
                "--state-file",
                str(self.run / "controller.state.json"),
                "--switches",
                str(self.run / "switches.json"),
                "--log-file",
                str(self.run / "controller.log"),
            ],
        )
        wait_for("the controller", lambda: self.ctl_rc("status") == 0, 60)
        agents = [self.agent(sw.name) for sw in self.cluster.switches() if sw.role.name != "CLIENT_LEAF"]
        wait_for("every agent configured", lambda: all(_answers(a) and a.status().configured for a in agents), 60)

    def agent(self, name: str) -> AgentClient:
        # an insert's populate waits out the shim's invalidate deadline here (nobody acknowledges the bed's
        # coherence packets): the agent answers after it, so the client waits longer (at 2 s it gave up first)
        return AgentClient(self.cluster.agent_address(self.cluster.switch(name)), timeout=INVALIDATE_DEADLINE + 3)

    def signal(self, what: str, sig: signal.Signals) -> None:
        """Send ``sig`` to a process this bed started: an agent (``agent-sp0``) or a switch (``sp0``)."""
        pid = self.procs[what].pid if what in self.procs else self.switches.pid(what)
        assert pid is not None
        os.kill(pid, sig)

    # -- the operator's view -----------------------------------------------------------------------
    def ctl(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "controller.ctl", "--cluster", str(self.cluster_path), *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
        )

    def ctl_rc(self, *argv: str) -> int:
        return self.ctl("--timeout", "2", *argv).returncode

    def status(self) -> dict:
        """``distcache-ctl status --json``'s object, through the same API (no CLI start-up per poll)."""
        client = ControllerClient(self.cluster.controller_address, timeout=10)
        try:
            return message_dict(client.status())
        finally:
            client.close()

    def switch_status(self, name: str) -> dict:
        return next(s for s in self.status()["switches"] if s["name"] == name)

    def owner(self) -> list[int]:
        """The spine id owning each bucket, as ``distcache-ctl partitions`` shows it."""
        client = ControllerClient(self.cluster.controller_address, timeout=10)
        try:
            return list(client.partitions().owner)
        finally:
            client.close()

    def read(self, name: str, table: str) -> list:
        """``table`` of switch ``name`` as it holds it now (a read-only P4Runtime session)."""
        sw = self.cluster.switch(name)
        conn = SwitchConnection(f"127.0.0.1:{sw.grpc_port}", sw.device_id, name=f"test-{name}")
        try:
            conn.use_p4info(load_p4info(self.p4info))
            return conn.read_table(table)
        finally:
            conn.close()

    def log(self) -> str:
        return (self.run / "controller.log").read_text()

    def close(self) -> None:
        for p in self.procs.values():  # SIGCONT first: a stopped process cannot act on SIGTERM
            if p.poll() is None:
                for sig in (signal.SIGCONT, signal.SIGTERM):
                    os.killpg(p.pid, sig)
        for p in self.procs.values():
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
        for sw in self.cluster.switches():
            pid = self.switches.pid(sw.name)  # whichever process runs last (the controller may have started it)
            if pid is not None and pid_alive(pid):
                os.kill(pid, signal.SIGCONT)
                os.killpg(pid, signal.SIGKILL)
                wait_for(f"{sw.name} to exit", lambda p=pid: not pid_alive(p), 10)


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[LoopbackDeployment]:
    b = LoopbackDeployment(tmp_path)
    try:
        yield b
    finally:
        b.close()


def key_of(cluster: Cluster, spine: int, n_: int = 1) -> list[str]:
    """``n_`` keys whose bucket spine ``spine`` owns with every spine in service."""
    owner = spine_buckets([cluster.spine(i).switch_id for i in range(cluster.spines)])
    sid = cluster.spine(spine).switch_id
    return [k for k in (f"key{i}" for i in range(1000)) if owner[h0(digest(k))] == sid][:n_]


# -- defect 4: a failed switch whose agent restarted while it was failed ------------------------------
@pytest.mark.parametrize(
    ("keep_running", "state_file"),
    [(True, True), (True, False), (False, False)],
    ids=["drained-agent-state-kept", "drained-agent-state-lost", "stopped-agent-state-lost"],
)
def test_recover_configures_an_agent_that_restarted_while_its_switch_was_failed(
    bed: LoopbackDeployment, keep_running: bool, state_file: bool
) -> None:
    """``recover`` gives the restarted agent its configuration itself, flushes the switch's cache
    (a drained spine kept copies that went stale), and only then gives the spine its buckets back."""
    original = bed.owner()
    keys = [digest(k) for k in key_of(bed.cluster, 0, 3)]
    sp0 = bed.agent("sp0")
    for k in keys:
        sp0.cache(k)
    assert {int(m[p4names.KEY_DC_KEY]).to_bytes(16, "big") for m, _, _ in bed.read("sp0", p4names.CACHE_LOOKUP)} == set(
        keys
    )
    res = bed.ctl("fail", "sp0", *(["--keep-running"] if keep_running else []))
    assert res.returncode == 0, res.stderr
    assert set(bed.owner()) == {bed.cluster.spine(1).switch_id}
    bed.kill_agent("sp0")
    if not state_file:
        (bed.run / "agent-sp0.state.json").unlink()
    bed.start_agent("sp0", state_file=state_file)
    wait_for("the restarted agent", lambda: _answers(sp0), 20)
    assert not sp0.status().configured  # nobody configures the agent of a failed switch ...
    t0 = time.monotonic()
    res = bed.ctl("recover", "sp0", timeout=60)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr  # ... except recover itself
    assert "back in service" in res.stdout and took < 10, f"recover took {took:.1f}s"
    assert bed.owner() == original
    st = sp0.status()
    assert st.configured and st.switch_connected and st.occupied == 0
    assert bed.read("sp0", p4names.CACHE_LOOKUP) == []  # flushed: no stale copy is left to answer a read
    owned = {int(m[p4names.KEY_BUCKET]) for m, _, _ in bed.read("sp0", p4names.HH_BUCKETS)}
    assert owned == {b for b, sid in enumerate(original) if sid == bed.cluster.spine(0).switch_id}
    sp0_status = bed.switch_status("sp0")
    assert sp0_status["alive"] and not sp0_status["failed"] and sp0_status["agent_alive"]
    assert bed.shim.stats()["down"] == []


def _answers(agent: AgentClient) -> bool:
    try:
        agent.status()
        return True
    except Exception:  # noqa: BLE001 - not up yet
        return False


def test_detected_failure_comes_back_by_itself_after_its_agent_restarted_and_never_blocks_detection(
    bed: LoopbackDeployment,
) -> None:
    """A spine crashes (detected), its agent is restarted without its state while the spine is down; when
    the spine answers again the controller brings it back by itself.  While that recovery cannot finish
    (the agent is not running yet), the controller keeps detecting other failures at full speed."""
    original = bed.owner()
    bed.switches.stop("sp1")
    wait_for("sp1 declared dead", lambda: bed.switch_status("sp1")["failed"], 10)
    bed.kill_agent("sp1")
    (bed.run / "agent-sp1.state.json").unlink()
    bed.switches.start("sp1")  # back, but its agent is not: its recovery cannot finish
    time.sleep(1.5)
    assert bed.switch_status("sp1")["failed"]
    bed.switches.stop("sl0")
    took = wait_for("sl0 declared dead", lambda: bed.switch_status("sl0")["failed"], 20)
    assert took < 2.0, f"sl0's crash was declared after {took:.1f}s"
    assert 0 < bed.status()["last_detection_s"] < 1.0
    bed.start_agent("sp1", state_file=False)
    wait_for("sp1 brought back", lambda: not bed.switch_status("sp1")["failed"], 15)
    bed.switches.start("sl0")
    wait_for("sl0 brought back", lambda: not bed.switch_status("sl0")["failed"], 15)
    assert bed.owner() == original
    st = bed.agent("sp1").status()
    assert st.configured and st.switch_connected
    owned = {int(m[p4names.KEY_BUCKET]) for m, _, _ in bed.read("sp1", p4names.HH_BUCKETS)}
    assert owned == {b for b, sid in enumerate(original) if sid == bed.cluster.spine(1).switch_id}
    assert bed.status()["recoveries"] == 2


def test_an_agent_whose_switch_is_gone_answers_configure_without_waiting_it_out(bed: LoopbackDeployment) -> None:
    """The controller waits for an agent's Configure under its lock, where no switch's death can be handled. A
    spine killed just as a recovery configured it held the fault matrix's controller that way for 22 s (10 s per
    Configure, the agent trying to connect to its dead switch, then the reconciler's retry), every write to a key
    the spine held timing out meanwhile.  The agent gives up on its switch in agent.agent.CONNECT_TIMEOUT and
    answers UNAVAILABLE, well inside the controller's deadline for the call; the controller retries it later."""
    bed.switches.stop("sp0")
    wait_for("sp0 declared dead", lambda: bed.switch_status("sp0")["failed"], 10)
    sp0 = bed.cluster.spine(0)
    client = AgentClient(bed.cluster.agent_address(sp0), timeout=5.0)
    try:
        with pytest.raises(grpc.RpcError) as err:
            client.configure(bed.cluster, bed.owner(), {bed.cluster.spine(1).switch_id})
    finally:
        client.close()
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value
    bed.switches.start("sp0")
    wait_for("sp0 brought back", lambda: not bed.switch_status("sp0")["failed"], 20)


# -- defect 5: one hung agent must not blind failure detection -----------------------------------------
def test_hung_agents_neither_delay_detection_nor_hang_status(bed: LoopbackDeployment) -> None:
    """With two agents stopped (SIGSTOP, as a long GC pause or a hung thread would), a spine crash is
    declared dead at the usual speed and failed over; ``distcache-ctl status`` answers within 2 s and names
    the hung agents; when they resume they get the configuration they missed."""
    bed.signal("agent-sp0", signal.SIGSTOP)
    bed.signal("agent-sl0", signal.SIGSTOP)
    try:
        wait_for(
            "the health poll to see the agents hung",
            lambda: not any(s["agent_alive"] for s in bed.status()["switches"] if s["name"] in ("sp0", "sl0")),
            10,
        )
        bed.switches.stop("sp1")
        took = wait_for("sp1 declared dead", lambda: bed.switch_status("sp1")["failed"], 20)
        assert took < 1.5, f"sp1's crash was declared after {took:.1f}s"
        st = bed.status()
        assert 0 < st["last_detection_s"] < 1.0
        wait_for("sp1's buckets to move", lambda: set(bed.owner()) == {bed.cluster.spine(0).switch_id}, 5)
        t0 = time.monotonic()
        st = bed.status()
        assert time.monotonic() - t0 < 2.0
        res = bed.ctl("status")
        assert res.returncode == 0
        by = {s["name"]: s for s in st["switches"]}
        for name in ("sp0", "sl0"):
            assert not by[name]["agent_alive"] and "agent: not answering" in by[name]["detail"]
        assert by["sp0"]["alive"] and not by["sp0"]["failed"]  # the switch itself is fine
        assert " ".join(res.stdout.split()).count("agent: not answering") == 2
        # the data plane was failed over all the same: the client leaf and the shim
        cl0 = {int(m[p4names.KEY_BUCKET]): p["spine_id"] for m, _, p in bed.read("cl0", p4names.SPINE_PARTITION)}
        assert set(cl0.values()) == {bed.cluster.spine(0).switch_id}
        assert bed.shim.stats()["down"] == [bed.cluster.spine(1).switch_id]
    finally:
        bed.signal("agent-sp0", signal.SIGCONT)
        bed.signal("agent-sl0", signal.SIGCONT)
    # resumed, the agents get what they missed: sp0 now owns every bucket
    wait_for(
        "sp0's agent to take every bucket",
        lambda: len(bed.read("sp0", p4names.HH_BUCKETS)) == p4names.SPINE_BUCKETS,
        15,
    )
    wait_for(
        "the agents to answer again",
        lambda: all(s["agent_alive"] for s in bed.status()["switches"] if s["name"] in ("sp0", "sl0")),
        10,
    )


# -- suspected: failover going on when reconfiguring a client leaf fails ---------------------------------
def test_failover_waits_for_every_client_leaf_before_the_shims_skip_the_spine(bed: LoopbackDeployment) -> None:
    """The shims may stop waiting for a spine only once no client leaf can send it a read.  Here the
    client leaf refuses the controller's writes (another P4Runtime client took mastership, as a second
    controller started by mistake would) while sp0 is drained (``fail --keep-running``): sp0 keeps its
    copies and keeps answering what reaches it, and cl0 keeps targeting it.  The shims must keep sp0's
    acks until cl0 has taken the new routes; then the failover completes by itself."""
    sp0 = bed.cluster.spine(0).switch_id
    cl0 = bed.cluster.client_leaf(0)
    intruder = SwitchConnection(f"127.0.0.1:{cl0.grpc_port}", cl0.device_id, election_id=1000, name="intruder")
    intruder.connect(5)
    try:
        res = bed.ctl("fail", "sp0", "--keep-running")
        assert res.returncode == 0, res.stderr
        time.sleep(2.5)  # retries while cl0 still refuses
        routes = {p["spine_id"] for _, _, p in bed.read("cl0", p4names.SPINE_PARTITION)}
        assert sp0 in routes  # cl0 did not take the new routes: it still sends sp0 reads ...
        assert sp0 not in bed.shim.stats()["down"]  # ... so writes must still invalidate sp0
        by = {s["name"]: s for s in bed.status()["switches"]}
        assert "routes not updated" in by["cl0"]["detail"]
        assert "cl0" in by["sp0"]["detail"] and "acks" in by["sp0"]["detail"]
        assert "cl0: not fenced" in bed.log()  # the failover's first write to it, then the reconciler's
    finally:
        intruder.close()
    wait_for("the shim to skip sp0", lambda: sp0 in bed.shim.stats()["down"], 10)
    assert sp0 not in {p["spine_id"] for _, _, p in bed.read("cl0", p4names.SPINE_PARTITION)}
    assert "routes not updated" not in {s["name"]: s for s in bed.status()["switches"]}["cl0"]["detail"]
    assert bed.ctl("recover", "sp0").returncode == 0


def test_a_hung_client_leaf_keeps_the_shims_waiting_until_it_has_the_new_routes(bed: LoopbackDeployment) -> None:
    """A client leaf that hangs (SIGSTOP) while a spine is drained cannot take the new routes, and is
    declared dead; but a hung process resumes with the routes it had, so the shims must not skip the
    spine until the leaf has been given routes without it (a leaf whose process is gone would not
    count: a new one starts empty).  ``fail`` returns within the write deadline, not never."""
    sp0 = bed.cluster.spine(0).switch_id
    bed.signal("cl0", signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        res = bed.ctl("fail", "sp0", "--keep-running", timeout=60)
        assert res.returncode == 0, res.stderr
        assert time.monotonic() - t0 < 20
        wait_for("cl0 declared dead", lambda: bed.switch_status("cl0")["failed"], 10)
        time.sleep(1.5)  # the reconciler has had its rounds
        assert sp0 not in bed.shim.stats()["down"]  # cl0 may still send sp0 reads once it resumes
        assert "cl0 may still send it reads" in bed.switch_status("sp0")["detail"]
    finally:
        bed.signal("cl0", signal.SIGCONT)
    wait_for("cl0 brought back", lambda: not bed.switch_status("cl0")["failed"], 15)
    assert sp0 not in {p["spine_id"] for _, _, p in bed.read("cl0", p4names.SPINE_PARTITION)}
    wait_for("the shim to skip sp0", lambda: sp0 in bed.shim.stats()["down"], 10)
    assert "may still send it reads" not in bed.switch_status("sp0")["detail"]
