"""The controller as a service, end to end in Mininet (softswitch; BMv2 where installed).

One deployment per target (2 spines, 2 storage racks, 1 client rack), driven
the way an operator drives it: through ``distcache-ctl`` (run as a process),
and by killing processes behind everyone's back.  In order:

1. ``status --json`` and ``hot --json`` agree field by field with the
   switches' own counters and the agents' cache contents;
2. ``distcache-ctl fail sp0`` while a Zipf-0.99 workload runs: no read
   returns a wrong value, only sp0's buckets move, and sp0's hot keys are then
   served by the other spine; ``recover sp0`` puts every bucket back;
3. a spine process killed without telling anyone is detected within seconds
   and failed over; started again, it is brought back without an operator;
4. a restarted shim gets its partition and cached-key view back;
5. with the controller killed, reads and writes go on; restarted, it finds
   the same partitions and cache view and writes nothing to the data plane.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dcnet.deploy import Deployment

from distcache import p4names
from distcache.cluster import Cluster, Role
from distcache.hashing import h0
from distcache.partition import spine_buckets
from distcache.rpc.shim import ShimLink
from harness.processes import SwitchProcesses
from p4rt.probes import DP_PROBE_INTERVAL, probe_interfaces, read_probe_counts
from tests.common.history_recorder import Recorder
from tests.e2e.targets import targets

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

KEYS = 1000
CLUSTER = Cluster(spines=2, storage_racks=2, client_racks=1, cache_slots=32, hh_threshold=4)
CLIENT = CLUSTER.client(0, 0)
SP0, SP1 = CLUSTER.spine(0), CLUSTER.spine(1)
SL0 = CLUSTER.storage_leaf(0)
ORIGINAL = spine_buckets([SP0.switch_id, SP1.switch_id])

TARGETS = targets()


def ctl(dep: Deployment, *argv: str) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "controller.ctl", "--cluster", str(dep.cluster_path), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, f"distcache-ctl {' '.join(argv)}: {res.stderr}"
    return res.stdout


def ctl_json(dep: Deployment, *argv: str) -> dict:
    return json.loads(ctl(dep, *argv, "--json"))


def switches(dep: Deployment) -> dict[str, dict]:
    return {s["name"]: s for s in ctl_json(dep, "status")["switches"]}


def wait_for(what: str, cond, timeout: float = 20.0) -> float:  # noqa: ANN001
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, f"timed out waiting for {what}"
        time.sleep(0.1)
    return time.monotonic() - t0


@pytest.fixture(scope="module", params=TARGETS)
def dep(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with Deployment(CLUSTER, target=request.param, run_dir=tmp_path_factory.mktemp("run")) as d:
        c = d.client()
        for i in range(40):
            c.call("put", f"key{i}", f"value{i}")
        yield d


def read_all(dep: Deployment, expect: dict[str, str]) -> list[dict]:
    c = dep.client()
    replies = [c.call("get", k) for k in expect]
    wrong = [(k, r) for k, r in zip(expect, replies, strict=True) if r.get("value") != expect[k]]
    assert not wrong, f"wrong reads: {wrong[:3]}"
    return replies


def test_status_and_hot_json_match_the_switches(dep: Deployment) -> None:
    c = dep.client()
    for k in ("key1", "key2", "key3"):
        dep.controller.cache(k)
    for _ in range(5):
        for k in ("key1", "key2", "key3", "key7"):
            assert c.call("get", k)["value"] == f"value{k[3:]}"
    junk = (
        "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
        f"[s.sendto(b'\\x01\\x01', ('{CLUSTER.server(0, 0).ip}', 8888)) for _ in range(3)]"
    )
    dep.host(CLIENT.name).cmd(f'python3 -c "{junk}"')
    time.sleep(0.3)
    st = ctl_json(dep, "status")
    assert st["mechanism"] == "distcache" and st["failovers"] == 0 and st["epoch"] == 0
    agents = dep.controller.agent_status()
    parts = ctl_json(dep, "partitions")
    assert parts["owner"] == ORIGINAL and parts["moved"] == []
    for s in st["switches"]:
        sw = CLUSTER.switch(s["name"])
        assert (s["switch_id"], s["alive"], s["failed"]) == (sw.switch_id, True, False)
        stats = dep.controller.conns[s["name"]].read_counter(p4names.DC_STATS)
        drops = dep.controller.conns[s["name"]].read_counter(p4names.DC_DROPS)
        # the controller's probes keep these moving between the two reads: a spine reflects them, a leaf skips
        # those for a spine its traffic answered lately
        moving = {"PROBE_REFLECTED", "PROBE_SKIPPED"}
        assert {k: v for k, v in s["stats"].items() if k not in moving} == {
            x.name: stats.get(int(x), (0, 0))[0] for x in p4names.Stat if x.name not in moving
        }
        assert all(stats.get(int(p4names.Stat[k]), (0, 0))[0] >= s["stats"][k] for k in moving)
        assert s["drops"] == {d.name: drops[int(d)][0] for d in p4names.DropReason if drops.get(int(d), (0, 0))[0]}
        assert (s["hits"], s["misses"]) == (s["stats"]["READ_HIT"], s["stats"]["READ_MISS"])
        if s["hits"] + s["misses"]:
            assert s["hit_ratio"] == pytest.approx(s["hits"] / (s["hits"] + s["misses"]))
        if sw.name in agents:
            a = agents[sw.name]
            assert (s["occupied"], s["slots"], s["digests"], s["agent_alive"]) == (a.occupied, a.slots, a.digests, True)
        if sw.role.name == "SPINE":
            assert s["buckets"] == ORIGINAL.count(sw.switch_id)
    by_name = {s["name"]: s for s in st["switches"]}
    assert by_name["cl0"]["drops"].get("TRUNCATED", 0) >= 3  # the junk was counted and dropped at the client leaf
    assert sum(by_name[x]["hits"] for x in ("sp0", "sp1", "sl0", "sl1")) >= 15  # three cached keys read 5 times

    hot = ctl_json(dep, "hot", "--top", "50")
    for sh in hot["switches"]:
        slots = dep.controller.conns[sh["switch"]].read_counter(p4names.CACHE_HITS)
        held = {k.key.hex(): k for k in dep.controller.agent_status(with_keys=True)[sh["switch"]].keys}
        assert {k["key"] for k in sh["keys"]} == set(held)
        for k in sh["keys"]:
            assert k["slot"] == held[k["key"]].slot and k["total_hits"] == slots.get(k["slot"], (0, 0))[0]
            # shown by digest (the controller knows no more); key7 may have got hot enough on its own
            assert k["text"] in {dep.cluster.digest(n).hex() for n in ("key1", "key2", "key3", "key7")}
    assert sum(k["total_hits"] for sh in hot["switches"] for k in sh["keys"]) >= 15


def test_leaves_are_probed_through_their_probe_ports(dep: Deployment) -> None:
    """The controller (client leaves) and each storage leaf's agent write their probes into the leaf's
    probe port (p4rt.probes.ProbeSource; no PacketOut through gRPC): one per spine every 10 ms, seen leaving
    the source's end of each leaf's veth, and counted by the leaf as sent."""
    leaves = [sw for sw in CLUSTER.switches() if sw.role != Role.SPINE]

    def written() -> dict[str, int]:
        return {
            sw.name: int(Path(f"/sys/class/net/{probe_interfaces(sw)[1]}/statistics/tx_packets").read_text())
            for sw in leaves
        }

    def sent() -> int:
        return sum(c.sent for c in read_probe_counts(dep.controller.conns["cl0"]).values())

    a, sent_a = written(), sent()
    time.sleep(1.0)
    b, sent_b = written(), sent()
    per_second = CLUSTER.spines / DP_PROBE_INTERVAL
    for sw in leaves:
        assert b[sw.name] - a[sw.name] >= per_second / 4, (sw.name, a, b)
    assert sent_b - sent_a >= per_second / 4, (sent_a, sent_b)


def test_the_switches_whose_silence_counts_run_at_a_real_time_priority(dep: Deployment) -> None:
    """A spine silent for 30 ms is dead to its leaves, and on a loaded host a switch waiting for a CPU is
    silent (dcnet.p4switch.P4RuntimeSwitch): softswitch spines run at SCHED_RR (their leaves stamp frames with
    the kernel's time), and with BMv2's fast build every switch does (a BMv2 leaf stamps a frame when it reads
    it, so its own wait counts against the spine too), every thread of each; the logging build none."""
    import os

    from harness.processes import SPINE_RT_PRIORITY, SWITCH_NICE
    from harness.switch import BMV2_FAST_SWITCH

    fast_bmv2 = dep.target == "bmv2" and shutil.which(BMV2_FAST_SWITCH) is not None
    procs = SwitchProcesses(dep.run_dir / "switches.json")
    for sw in CLUSTER.switches():
        pid = procs.pid(sw.name)
        assert pid is not None, sw.name
        threads = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        want_rt = fast_bmv2 if dep.target == "bmv2" else sw.role == Role.SPINE
        policies = {os.sched_getscheduler(t) for t in threads}
        assert policies == {os.SCHED_RR if want_rt else os.SCHED_OTHER}, (sw.name, policies)
        if want_rt:
            assert {os.sched_getparam(t).sched_priority for t in threads} == {SPINE_RT_PRIORITY}, sw.name
        assert os.getpriority(os.PRIO_PROCESS, pid) == SWITCH_NICE, sw.name


def zipf_workload(dep: Deployment, result: dict, duration: float, load: bool = True) -> threading.Thread:
    """A Zipf workload on CLIENT in a thread (started): ``result`` gets its last second ("t") and its report."""

    def workload() -> None:
        seconds = []
        for msg in dep.bench(
            CLIENT,
            {
                "keys": KEYS,
                "zipf": 0.99,
                "read_ratio": 0.95,
                "value_size": 32,
                "concurrency": 8,
                "duration": duration,
                "load_keys": KEYS if load else 0,
                "seed": 3,
                "prefix": "zipf",
            },
        ):
            if msg["type"] == "second":
                seconds.append(msg)
                result["t"] = msg["t"]
            elif msg["type"] == "report":
                result["report"] = msg
        result["seconds"] = seconds

    bench = threading.Thread(target=workload)
    bench.start()
    return bench


def test_fail_spine_under_zipf_workload(dep: Deployment) -> None:
    result: dict = {}
    bench = zipf_workload(dep, result, 18)
    wait_for("the workload to warm the caches", lambda: result.get("t", -1) >= 6, timeout=120)
    before = {
        k["key"]
        for sh in ctl_json(dep, "hot", "--switch", "sp0", "--top", "200")["switches"]
        for k in sh["keys"]
        if k["total_hits"] > 0
    }
    assert before, "sp0 cached no hot key during warm-up"
    out = ctl(dep, "fail", "sp0")
    assert f"{ORIGINAL.count(SP0.switch_id)} buckets moved" in out
    # a drain: the controller had sp1 cache sp0's hottest keys before the routes moved (not from sp1's own
    # reports, which come at its insertion budget, after its reads missed): when `fail` returns, sp1 holds
    # entries of sp0's hot keys that no report placed, and the controller's log has them before the move
    keys = dep.controller.agent_status(with_keys=True)["sp1"].keys
    assert {k.key.hex() for k in keys if not k.auto} & before, "sp0's hot keys not placed at sp1 by the controller"
    log = (dep.run_dir / "controller.log").read_text()
    ahead = re.search(r"sp1: ([1-9]\d*) of \d+ hot keys of its new buckets cached before its buckets move", log)
    assert ahead and ahead.start() < log.index("failover complete: sp0 routed away"), log[-3000:]
    bench.join(120)
    report = result["report"]
    assert report["error_count"] == 0, report["errors"]  # every read returned what was last written
    assert report["reads"] > 1000

    parts = ctl_json(dep, "partitions")
    assert parts["owner"] == [SP1.switch_id] * len(ORIGINAL)
    moved = {m["bucket"] for m in parts["moved"]}
    assert moved == {b for b, sid in enumerate(ORIGINAL) if sid == SP0.switch_id}  # only sp0's buckets
    assert all(m["from_spine"] == "sp0" and m["to_spine"] == "sp1" for m in parts["moved"])
    st = ctl_json(dep, "status")
    assert st["failovers"] == 1
    sp0 = {s["name"]: s for s in st["switches"]}["sp0"]
    assert sp0["failed"] and sp0["admin_failed"] and not sp0["alive"]

    # sp0's hot keys now cache at sp1 (its detector reports them) and sp1 serves them
    sp1_agent = dep.controller.agent_status(with_keys=True)["sp1"]
    after = {k.key.hex() for k in sp1_agent.keys}
    taken_over = before & after
    counters = {f.name: v for f, v in sp1_agent.ListFields() if f.name not in ("keys", "slot_hits")}
    assert taken_over, ("none of sp0's hot keys is cached at sp1 after the failover", counters)
    c = dep.client()
    names = {dep.cluster.digest(f"zipf{i}").hex(): f"zipf{i}" for i in range(KEYS)}  # the workload's keys
    served: dict[int, int] = {}
    # the loads the workload left at the client leaf (sp1's the highest) steer reads to the storage
    # leaves until they age out (two load windows, 2^LOAD_WINDOW_SHIFT us each): read for some seconds
    deadline = time.monotonic() + 5
    while SP1.switch_id not in served and time.monotonic() < deadline:
        for key in sorted(taken_over)[:5]:
            for _ in range(4):
                by = c.call("get", names[key])["served_by"]
                served[by] = served.get(by, 0) + 1
    why = {
        "served_by": served,
        "sp1 entries": {
            k.key.hex(): k.state
            for k in dep.controller.agent_status(with_keys=True)["sp1"].keys
            if k.key.hex() in sorted(taken_over)[:5]
        },
        "cl0": switches(dep)["cl0"],
    }
    assert SP1.switch_id in served and SP0.switch_id not in served, why

    # recovered under load: before its buckets move back, sp0 is warmed with their hottest keys as sp1
    # counts them (controller/failover.py _rejoin), after its flush, so it serves them from its first read
    during: dict = {}
    bench = zipf_workload(dep, during, 8, load=False)
    wait_for("the workload to heat sp1's keys", lambda: during.get("t", -1) >= 2, timeout=60)
    out = ctl(dep, "recover", "sp0")
    assert "back in service" in out
    warmed = {k.key.hex() for k in dep.controller.agent_status(with_keys=True)["sp0"].keys if not k.auto}
    assert warmed, "sp0 was not warmed with the hot keys sp1 held in its buckets"
    assert all(ORIGINAL[h0(bytes.fromhex(k))] == SP0.switch_id for k in warmed), warmed
    log = (dep.run_dir / "controller.log").read_text()
    flushed = log.rindex("sp0: cache flushed before it serves again")
    ahead = re.search(
        r"sp0: ([1-9]\d*) of \d+ hot keys of its new buckets cached before its buckets move", log[flushed:]
    )
    assert ahead, log[flushed:]
    bench.join(120)
    assert during["report"]["error_count"] == 0, during["report"]["errors"]  # every read right, warmed or not
    assert ctl_json(dep, "partitions")["owner"] == ORIGINAL
    sp0 = switches(dep)["sp0"]
    assert sp0["alive"] and not sp0["failed"]
    sp1 = dep.controller.agent_status(with_keys=True)["sp1"]
    assert sp1.partition_evicted > 0  # it held keys of sp0's buckets during the failure ...
    assert all(ORIGINAL[h0(k.key)] == SP1.switch_id for k in sp1.keys)  # ... and gave them all up
    read_all(dep, {f"key{i}": f"value{i}" for i in range(40)})


def test_crashed_spine_is_detected_and_brought_back_without_an_operator(dep: Deployment) -> None:
    procs = SwitchProcesses(dep.run_dir / "switches.json")
    procs.stop("sp1")
    killed = time.monotonic()
    wait_for("the controller to declare sp1 dead", lambda: switches(dep)["sp1"]["failed"], timeout=10)
    # declared dead first; the failover (routes, then shims, then buckets) completes right after
    wait_for("the failover to complete", lambda: ctl_json(dep, "status")["failovers"] == 2, timeout=10)
    st = ctl_json(dep, "status")
    sp1 = {s["name"]: s for s in st["switches"]}["sp1"]
    assert not sp1["admin_failed"]
    assert 0 < st["last_detection_s"] <= time.monotonic() - killed
    assert ctl_json(dep, "partitions")["owner"] == [SP0.switch_id] * len(ORIGINAL)
    c = dep.client()
    c.call("put", "key5", "value5-during-crash")
    read_all(dep, {**{f"key{i}": f"value{i}" for i in range(40)}, "key5": "value5-during-crash"})
    procs.start("sp1")
    wait_for("the controller to bring sp1 back", lambda: not switches(dep)["sp1"]["failed"], timeout=30)
    wait_for("the recovery to complete", lambda: ctl_json(dep, "status")["recoveries"] == 2, timeout=10)
    assert ctl_json(dep, "partitions")["owner"] == ORIGINAL
    c.call("put", "key5", "value5")
    read_all(dep, {f"key{i}": f"value{i}" for i in range(40)})


def sp1_recovered_by_itself(dep: Deployment, before: dict, timeout: float) -> None:
    """The controller recovers sp1 without an operator (one more recovery than ``before``'s status) and every
    key reads right again."""
    wait_for("the controller to bring sp1 back", lambda: not switches(dep)["sp1"]["failed"], timeout=timeout)
    wait_for(
        "the recovery to complete",
        lambda: ctl_json(dep, "status")["recoveries"] == before["recoveries"] + 1,
        timeout=10,
    )
    assert ctl_json(dep, "partitions")["owner"] == ORIGINAL
    read_all(dep, {f"key{i}": f"value{i}" for i in range(40)})


def test_a_spine_whose_data_plane_dies_is_failed_over_while_its_p4runtime_answers(dep: Deployment) -> None:
    """Issue 16: every DistCache packet sp1 would send is dropped (its P4Runtime server still answers): the
    leaves' probes go unanswered, the controller declares it dead from the probe counters within a second,
    reads go on; once it forwards again it is recovered without an operator."""
    from dcnet.matrix_faults import fabric_ports
    from dcnet.netfaults import FaultConfig, PacketFaults

    before = ctl_json(dep, "status")
    sp1_ports = [p for p in fabric_ports(dep) if p.startswith("sp1-")]
    assert sp1_ports
    with PacketFaults(sp1_ports) as faults:
        faults.configure(FaultConfig(match="distcache", drop=1.0))
        died_at = time.time()
        wait_for("the controller to declare sp1 dead", lambda: switches(dep)["sp1"]["failed"], timeout=10)
        wait_for(
            "the failover to complete",
            lambda: ctl_json(dep, "status")["failovers"] == before["failovers"] + 1,
            timeout=10,
        )
        st = ctl_json(dep, "status")
        # when the controller declared it (its state file's stamp: polling distcache-ctl adds its own start-up)
        declared = json.loads((dep.run_dir / "controller.state.json").read_text())["failed"]["sp1"]["since"] - died_at
        assert declared < 2.0 and st["last_detection_s"] < 1.0, (declared, st["last_detection_s"])
        assert {s["name"]: s for s in st["switches"]}["sp1"]["alive"]  # its P4Runtime server answers
        read_all(dep, {f"key{i}": f"value{i}" for i in range(40)})
        assert faults.counters().dropped > 0
    sp1_recovered_by_itself(dep, before, timeout=30)
    # the client leaf found sp1 dead in its own data plane within tens of ms of its last packet, counted the
    # death and reported it to the controller once sp1 was heard again (distcache-ctl status shows both)
    st = ctl_json(dep, "status")
    deaths = [d for d in st.get("spine_deaths", []) if d["spine"] == "sp1" and d["at"] >= died_at]
    assert deaths and {d["leaf"] for d in deaths} == {"cl0"}, st.get("spine_deaths")
    d = max(deaths, key=lambda d: d["silent_s"])  # the drop's (a loaded softswitch may add a short false one)
    # silent until the drop ended: past the controller's 0.5 s of unanswered probes
    assert p4names.DEAD_AFTER_US / 1e6 <= d["detect_s"] < 0.5 and d["silent_s"] >= 0.5, d
    assert int({s["name"]: s for s in st["switches"]}["cl0"]["spine_deaths"]["sp1"]) >= 1
    assert re.search(r"spine deaths seen by leaves' data planes: cl0: (sp0 \d+, )?sp1 \d+", ctl(dep, "status"))


def test_a_spine_restarted_while_failed_for_its_data_plane_is_recovered(dep: Deployment) -> None:
    """sp1 is failed over for its dead data plane, then it and its agent restart (the agent without its state)
    between two of the controller's health probes (here: while the controller is stopped), so the controller
    never sees its P4Runtime server gone.  It comes back unconfigured -- its data plane cannot answer a probe
    until it is recovered -- and must be recovered like a crashed switch, not waited for: the fault matrix saw
    one stay failed 33 s, until the controller itself restarted."""
    from dcnet.matrix_faults import fabric_ports
    from dcnet.netfaults import FaultConfig, PacketFaults

    before = ctl_json(dep, "status")
    procs = SwitchProcesses(dep.run_dir / "switches.json")
    controller = dep._controller.proc  # type: ignore[union-attr]
    assert controller is not None
    with PacketFaults([p for p in fabric_ports(dep) if p.startswith("sp1-")]) as faults:
        faults.configure(FaultConfig(match="distcache", drop=1.0))
        wait_for("the controller to declare sp1 dead", lambda: switches(dep)["sp1"]["failed"], timeout=10)
        wait_for(
            "the failover to complete",
            lambda: ctl_json(dep, "status")["failovers"] == before["failovers"] + 1,
            timeout=10,
        )
        os.kill(controller.pid, signal.SIGSTOP)
        try:  # sp1 and its agent restart, the agent without its state file: nobody configures sp1 but a recovery
            dep.kill_agent("sp1")
            (dep.run_dir / "agent-sp1.state.json").unlink(missing_ok=True)
            procs.stop("sp1")
            procs.start("sp1")
            dep.start_agent(SP1)
            time.sleep(1.0)  # the agent pushes the pipeline (sp1 came up empty)
        finally:
            os.kill(controller.pid, signal.SIGCONT)
    sp1_recovered_by_itself(dep, before, timeout=15)


def test_crashed_leaves_come_back_configured(dep: Deployment) -> None:
    """A client-rack leaf has no agent: when its process restarts empty, the controller (its primary) pushes
    the pipeline and entries again.  A storage-rack leaf comes back through its agent, with an empty cache."""
    procs = SwitchProcesses(dep.run_dir / "switches.json")
    for name in ("cl0", "sl0"):
        procs.stop(name)
        wait_for(f"the controller to declare {name} dead", lambda n=name: switches(dep)[n]["failed"], timeout=10)
        assert ctl_json(dep, "partitions")["owner"] == ORIGINAL  # leaves own no buckets: nothing moves
        procs.start(name)
        wait_for(f"{name} to be back", lambda n=name: not switches(dep)[n]["failed"], timeout=30)
        read_all(dep, {f"key{i}": f"value{i}" for i in range(40)})
    assert dep.controller.agent_status()["sl0"].switch_restarts >= 1
    log = (dep.run_dir / "controller.log").read_text()
    assert "cl0: pipeline pushed" in log.split("cl0 declared dead")[-1]


def leaf_only_copy(dep: Deployment, rec: Recorder, prefix: str) -> str:
    """A key of rack 0 written (v1) and cached at its storage leaf sl0 only (reads met that copy; its spine,
    which took the key in from its own hot-key report meanwhile, evicted it again), so a write of it has no
    path through a spine that would pass the leaf."""
    digest = dep.cluster.digest
    key = next(f"{prefix}{i}" for i in range(100) if dep.cluster.server_for_key(digest(f"{prefix}{i}")).rack == 0)
    assert rec.put(key, "v1")
    assert dep.controller.agents["sl0"].cache(digest(key)).state == "valid"
    assert SL0.switch_id in {r["served_by"] for r in rec.reads(key, 30)}
    for spine in (SP0, SP1):
        dep.controller.agents[spine.name].evict(digest(key))
    return key


def test_a_storage_leaf_failed_but_running_serves_no_superseded_value(dep: Deployment, tmp_path: Path) -> None:
    """`fail sl0 --keep-running`: its copies stay where reads can reach them, so every write must go on
    invalidating them; nothing read from it before or after `recover` is older than an acknowledged write."""
    rec = Recorder(dep.client())
    key = leaf_only_copy(dep, rec, "drain-leaf")
    assert "keeps running" in ctl(dep, "fail", "sl0", "--keep-running")
    time.sleep(2.0)  # every shim has been told
    assert rec.put(key, "v2")
    rec.reads(key, 50)
    evicted = dep.controller.agent_status()["sl0"].evicted
    ctl(dep, "recover", "sl0")
    assert dep.controller.agent_status()["sl0"].evicted > evicted  # recovered flushed, as `fail` promises
    rec.reads(key, 50)
    assert rec.judged(tmp_path / "history.jsonl") == (0, 0), f"see {tmp_path / 'history.jsonl'}"


def test_a_storage_leaf_paused_until_declared_dead_serves_no_superseded_value(dep: Deployment, tmp_path: Path) -> None:
    """Its process stopped (SIGSTOP: a GC pause or a wedged host look the same) until the controller declares
    it dead, then resumed: a write right after it resumes, before the controller has recovered it, must still
    invalidate its copy."""
    rec = Recorder(dep.client())
    key = leaf_only_copy(dep, rec, "paused-leaf")
    pid = SwitchProcesses(dep.run_dir / "switches.json").pid("sl0")
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for("the controller to declare sl0 dead", lambda: switches(dep)["sl0"]["failed"], timeout=15)
        time.sleep(1.0)  # every shim has been told
    finally:
        os.kill(pid, signal.SIGCONT)
    assert rec.put(key, "v2")
    rec.reads(key, 50)
    wait_for("sl0 to be recovered", lambda: not switches(dep)["sl0"]["failed"], timeout=30)
    rec.reads(key, 50)
    assert rec.judged(tmp_path / "history.jsonl") == (0, 0), f"see {tmp_path / 'history.jsonl'}"


def test_drained_spine_serves_nothing_and_is_flushed_before_it_serves_again(dep: Deployment) -> None:
    """`fail --keep-running`: the spine stays up with its cache; writes skip it, so its copies go stale, but
    no read reaches it, and `recover` flushes it before it owns buckets again."""
    digest = dep.cluster.digest
    key = next(f"key{i}" for i in range(40) if ORIGINAL[h0(digest(f"key{i}"))] == SP1.switch_id)
    c = dep.client()
    leaf = CLUSTER.storage_leaf(dep.cluster.server_for_key(digest(key)).rack)
    dep.controller.agents[leaf.name].evict(digest(key))  # (an earlier test may have left one at its leaf)
    assert dep.controller.agents["sp1"].cache(digest(key), key.encode()).state == "valid"  # a copy at sp1 only
    # the loads earlier traffic left may steer this key's reads to its leaf for a while (two load windows): read until
    # sp1 answers one (which key this is depends on the deployment's key secret, so its loads do too)
    served: set[int] = set()
    deadline = time.monotonic() + 6
    while SP1.switch_id not in served and time.monotonic() < deadline:
        served |= {c.call("get", key)["served_by"] for _ in range(10)}
    assert SP1.switch_id in served, served
    assert "keeps running" in ctl(dep, "fail", "sp1", "--keep-running")
    sp1 = switches(dep)["sp1"]
    assert sp1["alive"] and sp1["failed"] and sp1["admin_failed"]
    assert digest(key) in {k.key for k in dep.controller.agent_status(with_keys=True)["sp1"].keys}
    c.call("put", key, "new")  # sp1's copy is now stale
    for _ in range(30):
        r = c.call("get", key)
        assert r["value"] == "new" and r["served_by"] != SP1.switch_id
    res = subprocess.run(
        [sys.executable, "-m", "controller.ctl", "--cluster", str(dep.cluster_path), "fail", "sp0"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1 and "last spine in service" in res.stderr  # refused: sp0 is all that is left
    assert not switches(dep)["sp0"]["failed"]
    evicted = dep.controller.agent_status()["sp1"].evicted
    ctl(dep, "recover", "sp1")
    assert ctl_json(dep, "partitions")["owner"] == ORIGINAL
    assert [r["value"] for r in (c.call("get", key) for _ in range(30))] == ["new"] * 30  # never the stale copy
    assert dep.controller.agent_status()["sp1"].evicted > evicted  # it was flushed
    c.call("put", key, f"value{key[3:]}")


def test_mechanism_change_applies_everywhere_and_survives_a_controller_restart(dep: Deployment) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "controller.ctl", "--cluster", str(dep.cluster_path), "mechanism", "bogus"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1 and "unknown mechanism 'bogus'" in res.stderr and "distcache" in res.stderr
    for k in ("key1", "key2"):
        dep.controller.cache(k)
    leaves = {name: st.occupied for name, st in dep.controller.agent_status().items() if name.startswith("sl")}
    assert ctl(dep, "mechanism", "partition").strip() == "mechanism distcache -> partition"
    agents = dep.controller.agent_status()
    # rack leaves keep their copies under CachePartition: they answer the reads a spine misses
    assert {name: agents[name].occupied for name in leaves} == leaves
    dep.kill_controller()
    dep.start_controller()
    assert ctl_json(dep, "status")["mechanism"] == "partition"
    placed = dep.controller.cache("key3")
    spine = CLUSTER.switch_by_id(ORIGINAL[h0(dep.cluster.digest("key3"))])
    leaf = CLUSTER.storage_leaf(dep.cluster.server_for_key(dep.cluster.digest("key3")).rack)
    assert set(placed) == {spine.name, leaf.name}  # its spine, and its rack's leaf behind it (distcache.placement)
    c = dep.client()
    served = {c.call("get", "key3")["served_by"] for _ in range(20)}
    assert served <= {0, spine.switch_id, leaf.switch_id}
    read_all(dep, {f"key{i}": f"value{i}" for i in range(40)})
    ctl(dep, "mechanism", "nocache")  # no switch owns anything: every cache is emptied
    assert all(st.occupied == 0 for st in dep.controller.agent_status().values())
    read_all(dep, {f"key{i}": f"value{i}" for i in range(40)})
    ctl(dep, "mechanism", "distcache")
    assert ctl_json(dep, "status")["mechanism"] == "distcache"


def test_restarted_shim_gets_partition_and_view_back(dep: Deployment) -> None:
    server = CLUSTER.server(0, 0)
    mine = [k for k in (f"key{i}" for i in range(40)) if dep.cluster.server_for_key(dep.cluster.digest(k)) == server]
    mine = mine[:3]
    c = dep.client()
    for k in mine:
        dep.controller.cache(k)
    expected = {
        k.key.hex()
        for st in dep.controller.agent_status(with_keys=True).values()
        for k in st.keys
        if CLUSTER.server_for_key(k.key) == server
    }
    dep.kill_shim(server.name)
    dep.start_shim(server)
    link = ShimLink(dep.shim_control(server))
    wait_for("the controller to send the view", lambda: link.stats()["view_known"], timeout=10)
    st = link.stats()
    assert st["cached_keys"] >= len(expected) and st["epoch"] == ctl_json(dep, "status")["epoch"]
    for k in mine:  # writes to cached keys still invalidate: the new value is read, from cache or server
        c.call("put", k, f"{k}-new")
        assert c.call("get", k)["value"] == f"{k}-new"
        c.call("put", k, f"value{k[3:]}")


def test_controller_restart_keeps_partitions_and_cache_view(dep: Deployment) -> None:
    def snapshot() -> tuple:
        cached = {
            name: sorted(k.key.hex() for k in st.keys)
            for name, st in dep.controller.agent_status(with_keys=True).items()
        }
        cl0 = sorted(str(e) for e in dep.controller.conns["cl0"].read_table(p4names.SPINE_PARTITION))
        p = ctl_json(dep, "partitions")
        s = ctl_json(dep, "status")
        return p["owner"], p["epoch"], s["failovers"], s["recoveries"], cached, cl0

    before = snapshot()
    stats_before = dep.controller.conns["cl0"].read_counter(p4names.DC_STATS)
    dep.kill_controller()
    c = dep.client()
    for i in range(10):  # the data plane, agents and shims carry on alone
        c.call("put", f"key{i}", f"v{i}-while-down")
    read_all(
        dep, {**{f"key{i}": f"value{i}" for i in range(10, 40)}, **{f"key{i}": f"v{i}-while-down" for i in range(10)}}
    )
    dep.start_controller()
    assert snapshot() == before
    stats_after = dep.controller.conns["cl0"].read_counter(p4names.DC_STATS)
    routed = int(p4names.Stat.ROUTED_SPINE), int(p4names.Stat.ROUTED_LEAF)
    assert sum(stats_after[i][0] for i in routed) > sum(stats_before[i][0] for i in routed)  # never reset
    log = (dep.run_dir / "controller.log").read_text().split("controller serving on")
    assert "cl0: reconciled (0 entries written)" in log[-2] and "pipeline pushed" not in log[-2]
    for i in range(10):
        c.call("put", f"key{i}", f"value{i}")
    read_all(dep, {f"key{i}": f"value{i}" for i in range(40)})


def test_controller_started_while_a_spine_is_dead_fails_it_over(dep: Deployment) -> None:
    """A controller that comes up while a spine is down (and its state does not know) must not hang or fail:
    it reconciles what answers, then its monitor fails the dead spine over; the spine comes back as usual."""
    procs = SwitchProcesses(dep.run_dir / "switches.json")
    failovers = ctl_json(dep, "status")["failovers"]
    dep.kill_controller()
    procs.stop("sp0")
    c = dep.client()
    dep.start_controller(timeout=30)
    wait_for("sp0 to be failed over", lambda: switches(dep)["sp0"]["failed"], timeout=10)
    assert ctl_json(dep, "status")["failovers"] == failovers + 1
    assert ctl_json(dep, "partitions")["owner"] == [SP1.switch_id] * len(ORIGINAL)
    c.call("put", "key9", "value9-again")
    read_all(dep, {**{f"key{i}": f"value{i}" for i in range(40)}, "key9": "value9-again"})
    procs.start("sp0")
    wait_for("sp0 to come back", lambda: not switches(dep)["sp0"]["failed"], timeout=30)
    assert ctl_json(dep, "partitions")["owner"] == ORIGINAL
    c.call("put", "key9", "value9")
