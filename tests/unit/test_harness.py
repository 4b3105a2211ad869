"""The harness library the tests, the benchmarks and dcnet share: redis-server, profiles, processes, switch
processes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from harness.ports import port_list
from harness.processes import (
    SHIM_BINARY,
    SHIM_BREAKS_BINARY,
    Service,
    ServiceError,
    python_argv,
    shim_argv,
    wait_for_path,
    wait_for_port,
)
from harness.profile import summarize_profile
from harness.redis import redis_argv, wait_for_redis
from harness.switch import (
    BMV2_FAST_SWITCH,
    BMV2_SWITCH,
    CPU_PORT,
    SwitchProcess,
    SwitchSpec,
    SwitchStartError,
    bmv2_binary,
)

needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")


@needs_redis
def test_a_durable_redis_keeps_what_it_acknowledged_across_a_kill(tmp_path: Path) -> None:
    sock = tmp_path / "r.sock"
    argv = redis_argv(sock, tmp_path, durable=True, appendfsync="always", name="r", logfile=tmp_path / "r.log")
    proc = subprocess.Popen(argv)
    try:
        wait_for_redis(sock, proc)
        redis.Redis(unix_socket_path=str(sock)).set("k", "v")
        proc.kill()
        proc.wait(5)
        proc = subprocess.Popen(argv)
        wait_for_redis(sock, proc)
        assert redis.Redis(unix_socket_path=str(sock)).get("k") == b"v"
        assert (tmp_path / "r.aof").is_dir()
    finally:
        proc.kill()
        proc.wait(5)


@needs_redis
def test_a_redis_that_cannot_start_is_one_clear_error(tmp_path: Path) -> None:
    sock = tmp_path / "r.sock"
    proc = subprocess.Popen(redis_argv(sock, tmp_path / "missing"), stdout=subprocess.DEVNULL)
    with pytest.raises(RuntimeError, match="exited with code"):
        wait_for_redis(sock, proc, timeout=5)


def _child_of_killed_parent(tmp_path: Path, spawn: str) -> bool:
    """Run ``spawn`` (Python that starts a child and writes its pid to ``pidfile``) in a parent process,
    SIGKILL the parent (no cleanup of its own), and say whether the child is still alive after 5 s."""
    pidfile = tmp_path / "child.pid"
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys, time\npidfile = {str(pidfile)!r}\n{spawn}\ntime.sleep(60)\n"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    deadline = time.monotonic() + 20
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pidfile.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait(5)

    def alive() -> bool:
        stat = Path(f"/proc/{child}/stat")
        return stat.exists() and stat.read_text().split()[2] not in ("Z", "X")

    deadline = time.monotonic() + 5
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    still = alive()
    if still:
        os.kill(child, signal.SIGKILL)
    return still


def test_a_child_dies_with_its_parent(tmp_path: Path) -> None:
    """tied_argv: killing the parent takes the child with it."""
    spawn = (
        "from harness.processes import tied_argv\n"
        "p = subprocess.Popen(tied_argv(['sleep', '60']))\n"
        "open(pidfile, 'w').write(str(p.pid))"
    )
    assert not _child_of_killed_parent(tmp_path, spawn), "the child outlived its parent"


@pytest.mark.parametrize("tied", [True, False])
def test_switches_die_with_a_test_bed_not_with_the_controller(tied: bool, tmp_path: Path) -> None:
    """A test bed's switches (tied) go when the bed is killed; the controller's (not tied) keep running when
    it dies, since a controller restart must leave the data plane untouched."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    listen = f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(60)"
    spec = {"cmd": [sys.executable, "-c", listen], "pid_file": str(tmp_path / "sw.pid"),
            "log": str(tmp_path / "sw.out"), "grpc": f"127.0.0.1:{port}"}  # fmt: skip
    (tmp_path / "switches.json").write_text(json.dumps({"sw": spec}))
    spawn = (
        "from pathlib import Path\n"
        "from harness.processes import SwitchProcesses\n"
        f"procs = SwitchProcesses(Path({str(tmp_path / 'switches.json')!r}), tied={tied})\n"
        "open(pidfile, 'w').write(str(procs.start('sw')))"
    )
    assert _child_of_killed_parent(tmp_path, spawn) is not tied


def test_a_profile_counts_the_main_thread_and_leaves_torn_stacks_out(tmp_path: Path) -> None:
    raw = tmp_path / "p.txt"
    raw.write_text(
        "thread (0x1): MainThread;<module> (a.py:1);loop (a.py:5);parse (b.py:9) 6\n"
        "thread (0x1): MainThread;<module> (a.py:1);loop (a.py:5);send (c.py:3) 3\n"
        "thread (0x1): MainThread;parse (b.py:9) 1\n"  # torn: not the usual outermost frame
        "thread (0x2): grpc-worker;<module> (a.py:1);serve (g.py:1) 50\n"  # another thread
    )
    p = summarize_profile(raw, categories=[("parsing", lambda f, _file: f == "parse")])
    assert p["samples"] == 9 and p["torn_samples"] == 1
    assert p["own_percent"] == {"parse (b.py)": 66.7, "send (c.py)": 33.3}
    assert p["own_percent_by_file"] == {"b.py": 66.7, "c.py": 33.3}
    assert "loop (a.py)" not in p["inclusive_percent"]  # on every stack: says nothing
    assert p["category_percent"] == {"parsing": 66.7, "other": 33.3}


def test_a_missing_p4_tool_is_one_line_saying_where_users_get_it() -> None:
    """p4c, BMv2 and p4c-ebpf are p4lang's, installed as p4lang documents; never a bundle of this project's."""
    from harness.switch import BMV2_INSTALL, P4C_INSTALL, how_to_get

    line = how_to_get(["simple_switch_grpc", "p4c-bm2-ss", "p4c-ebpf", "llc"])
    assert "\n" not in line and line.startswith("missing from PATH: ")
    assert f"p4c-bm2-ss, p4c-ebpf: install p4c as p4lang documents ({P4C_INSTALL})" in line
    assert f"simple_switch_grpc: install BMv2 with P4Runtime support as p4lang documents ({BMV2_INSTALL})" in line
    assert "llc: apt-get install clang llvm" in line and "shared" not in line


def test_only_the_kernel_target_names_a_command_that_takes_its_data_plane_down() -> None:
    """A kernel switch's programs outlive its process; the others' data planes die with it."""
    ports = [(1, "veth1"), (2, "veth3")]
    for target in ("softswitch", "bmv2"):
        assert SwitchSpec(target, ports).detach_argv() is None
    kernel = SwitchSpec("ebpf", ports, device_id=7)
    assert kernel.detach_argv() == [*kernel.argv(), "--cleanup"]
    assert kernel.argv()[3:5] == ["--device-id", "7"] and "1@veth1" in kernel.argv()


def test_one_command_line_per_switch_target(tmp_path: Path) -> None:
    """The two targets take the same facts, each spelled its own way; BMv2 starts with no pipeline."""
    ports = [(1, "veth1"), (2, "veth3")]
    soft = SwitchSpec("softswitch", ports, grpc_addr="127.0.0.1:50001", device_id=3, log_file=tmp_path / "s.log",
                      log_level="warning")  # fmt: skip
    assert soft.argv() == [
        sys.executable, "-m", "softswitch", "--device-id", "3", "--grpc-addr", "127.0.0.1:50001",
        "-i", "1@veth1", "-i", "2@veth3", "--log-file", str(tmp_path / "s.log"), "--log-level", "warning",
    ]  # fmt: skip
    bmv2 = SwitchSpec("bmv2", ports, grpc_addr="127.0.0.1:50002", thrift_port=9191)
    assert bmv2.argv() == [
        bmv2_binary(None), "--device-id", "1", "-i", "1@veth1", "-i", "2@veth3", "--no-p4",
        "--thrift-port", "9191", "--", "--grpc-server-addr", "127.0.0.1:50002", "--cpu-port", str(CPU_PORT),
    ]  # fmt: skip
    assert CPU_PORT != 511  # BMv2's drop port
    inside = SwitchProcess(bmv2, tmp_path / "out", netns="dcptf-1")
    assert inside.argv() == ["ip", "netns", "exec", "dcptf-1", *bmv2.argv()]
    with pytest.raises(ValueError, match="unknown switch target"):
        SwitchSpec("tofino", ports)


def test_bmv2_is_the_fast_build_unless_a_packet_trace_is_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast build where it is on PATH, but the logging build for a trace (the fast one has no such lines)
    and wherever the fast one is missing."""
    for name in (BMV2_SWITCH, BMV2_FAST_SWITCH):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    ports = [(1, "veth1")]
    assert SwitchSpec("bmv2", ports).argv()[0] == BMV2_FAST_SWITCH
    assert SwitchSpec("bmv2", ports, log_level="info", log_file=tmp_path / "sw").argv()[0] == BMV2_FAST_SWITCH
    assert SwitchSpec("bmv2", ports, log_level="trace", log_flush=True).argv()[0] == BMV2_SWITCH
    assert SwitchSpec("bmv2", ports, log_level="debug").argv()[0] == BMV2_SWITCH
    (tmp_path / BMV2_FAST_SWITCH).unlink()
    assert SwitchSpec("bmv2", ports).argv()[0] == BMV2_SWITCH


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("target", ["softswitch", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_a_switch_answers_on_its_grpc_address_and_stops_with_its_group(target: str, tmp_path: Path) -> None:
    """Started with no ports (nothing to attach to), the switch serves P4Runtime where its spec says; stop()
    takes its whole process group and the port closes."""
    if target == "bmv2" and shutil.which("simple_switch_grpc") is None:
        pytest.skip("needs simple_switch_grpc on PATH")
    from p4rt.client import SwitchConnection

    addr = f"127.0.0.1:{free_port()}"
    spec = SwitchSpec(target, [], grpc_addr=addr, thrift_port=free_port(), log_file=tmp_path / f"{target}.log")
    switch = SwitchProcess(spec, tmp_path / f"{target}.out")
    switch.start()
    try:
        assert switch.wait_ready(60) >= 0
        assert switch.pid is not None and os.getpgid(switch.pid) == switch.pid  # leads its own group
        conn = SwitchConnection(addr, spec.device_id, name=target)
        try:
            conn.wait_ready(10)  # a P4Runtime server, not only an open port
        finally:
            conn.close()
    finally:
        switch.stop()
    assert switch.returncode() is not None
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(addr.rsplit(":", 1)[1])), timeout=1).close()


def test_a_switch_that_exits_at_once_is_one_clear_error_with_its_log(tmp_path: Path) -> None:
    spec = SwitchSpec("softswitch", [(1, "veth1")], grpc_addr="127.0.0.1:65536")  # no such port: exits with 2
    switch = SwitchProcess(spec, tmp_path / "sw.out")
    switch.start()
    try:
        with pytest.raises(SwitchStartError, match=r"(?s)exited with code 2 before serving.*--- sw.out ---.*65536"):
            switch.wait_ready(30)
    finally:
        switch.stop()


def _listener(sock: Path, delay: float) -> list[str]:
    """A process that listens on Unix socket ``sock`` after ``delay`` s and then serves until killed."""
    code = (
        "import socket, sys, time\n"
        f"time.sleep({delay})\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"s.bind({str(sock)!r}); s.listen()\n"
        "while True: s.accept()[0].close()\n"
    )
    return [sys.executable, "-c", code]


def test_waiting_for_a_path_ends_when_it_appears_or_the_process_exits(tmp_path: Path) -> None:
    flag = tmp_path / "up"
    proc = subprocess.Popen(["sh", "-c", f"sleep 0.3; touch {flag}; sleep 30"])
    try:
        wait_for_path(flag, proc, 10, "toucher")
        assert flag.exists()
    finally:
        proc.kill()
        proc.wait(5)
    dead = subprocess.Popen(["sh", "-c", "exit 3"])
    with pytest.raises(ServiceError, match=re.escape("quitter exited with code 3; see /x.log")):
        wait_for_path(tmp_path / "never", dead, 10, "quitter", Path("/x.log"))
    slow = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(ServiceError, match=re.escape(f"sleeper did not create {tmp_path / 'never'} within 0 s")):
            wait_for_path(tmp_path / "never", slow, 0.3, "sleeper")
    finally:
        slow.kill()
        slow.wait(5)


def test_waiting_for_a_port_ends_when_it_listens_or_the_process_exits() -> None:
    """How a deployment and the controller's recover wait for a switch's gRPC server."""
    code = (
        "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); time.sleep(0.3); s.listen(); "
        "print(s.getsockname()[1], flush=True); time.sleep(30)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        wait_for_port(f"127.0.0.1:{port}", proc, 10, "listener")
    finally:
        proc.kill()
        proc.wait(5)
    # the listener is gone: nothing accepts on its port any more
    dead = subprocess.Popen(["sh", "-c", "exit 3"])
    with pytest.raises(ServiceError, match=re.escape("quitter exited with code 3; see /x.log")):
        wait_for_port(f"127.0.0.1:{port}", dead, 10, "quitter", Path("/x.log"))
    slow = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(ServiceError, match=re.escape(f"sleeper did not open 127.0.0.1:{port} within 0 s")):
            wait_for_port(f"127.0.0.1:{port}", slow, 0.3, "sleeper")
    finally:
        slow.kill()
        slow.wait(5)


def test_a_service_is_ready_when_it_listens_not_when_a_stale_socket_is_there(tmp_path: Path) -> None:
    sock = tmp_path / "svc.sock"
    sock.write_text("left by a killed predecessor")
    svc = Service("svc", _listener(sock, 0.5), out=tmp_path / "svc.out", socket=sock, timeout=10)
    try:
        svc.start()
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(sock))  # it answers: start waited for the real socket
        with pytest.raises(ServiceError, match="already running"):
            svc.start()
        first = svc.proc
        svc.kill()  # a crash: SIGKILL, reaped
        assert first is not None and first.returncode == -signal.SIGKILL and not svc.running
        svc.start()  # the killed one's socket is still on disk: removed before the start
        assert svc.running and svc.proc is not first
    finally:
        svc.stop()
    assert svc.proc is not None and svc.proc.returncode == -signal.SIGTERM  # a shutdown: SIGTERM


def test_a_service_restarts_with_or_without_its_state_and_says_why_it_did_not_start(tmp_path: Path) -> None:
    sock, state = tmp_path / "r.sock", tmp_path / "r.state"
    svc = Service(
        "redis-r",
        redis_argv(sock, tmp_path, durable=True, appendfsync="always", name="r"),
        out=tmp_path / "redis-r.out",
        state_file=state,
        socket=sock,
        ready=lambda proc, timeout: wait_for_redis(sock, proc, timeout),
    )
    try:
        svc.start()
        redis.Redis(unix_socket_path=str(sock)).set("k", "v")
        state.write_text("{}")
        svc.restart()  # killed and started again: the state file stays
        assert state.exists() and redis.Redis(unix_socket_path=str(sock)).get("k") == b"v"
        svc.restart(keep_state=False)
        assert not state.exists() and svc.running
    finally:
        svc.stop()
    assert (tmp_path / "redis-r.out").stat().st_size > 0  # every life's output, appended
    broken = Service("broken", ["sh", "-c", "echo no; exit 2"], out=tmp_path / "b.out", socket=tmp_path / "b.sock")
    with pytest.raises(ServiceError, match=re.escape(f"broken exited with code 2; see {tmp_path / 'b.out'}")):
        broken.start()


def test_python_argv_runs_a_module_with_this_interpreter() -> None:
    argv = python_argv("agent", {"--cluster": Path("/c.json"), "--fresh": None, "--port": 7})
    assert argv == [sys.executable, "-m", "agent", "--cluster", "/c.json", "--fresh", "--port", "7"]


def test_the_shim_runs_compiled_and_its_breaks_only_in_the_breaks_build() -> None:
    """The normal build has no --breaks flag: a deployment's shim arms a break only through the breaks build,
    and only the shim's breaks (the others are other services')."""
    assert shim_argv({"--fresh": None}) == [str(SHIM_BINARY), "--fresh"]
    argv = shim_argv({"--fresh": None}, ["no-flush-on-recover", "reuse-seq", "clock-back"])
    assert argv == [str(SHIM_BREAKS_BINARY), "--breaks", "reuse-seq,clock-back", "--fresh"]
    assert shim_argv({}, ["no-flush-on-recover"]) == [str(SHIM_BINARY)]
    res = subprocess.run([str(SHIM_BINARY), "--breaks", "reuse-seq"], capture_output=True, text=True, timeout=10)
    assert res.returncode == 2 and "flag provided but not defined: -breaks" in res.stderr


def test_softirq_threads_run_above_the_switches_while_a_deployment_runs() -> None:
    """Under load the kernel delivers packets between veths in its ksoftirqd threads; a deployment raises
    them above the switches (SOFTIRQ_NICE) and gives them back their nice value when it stops."""
    from harness.processes import SOFTIRQ_NICE, SWITCH_NICE, SoftirqPriority, _kernel_threads

    if os.geteuid() != 0:
        pytest.skip("renicing kernel threads needs root")
    threads = _kernel_threads("ksoftirqd/")
    assert threads, "no ksoftirqd threads found"
    before = {t: os.getpriority(os.PRIO_PROCESS, t) for t in threads}
    assert SOFTIRQ_NICE < SWITCH_NICE
    with SoftirqPriority():
        assert {os.getpriority(os.PRIO_PROCESS, t) for t in threads} == {SOFTIRQ_NICE}
    assert {t: os.getpriority(os.PRIO_PROCESS, t) for t in threads} == before


def test_port_list_folds_runs_into_ranges() -> None:
    assert port_list([50054, 9464, 50051, 50050, 50052, 50052]) == "9464,50050-50052,50054"
    assert port_list([]) == ""


_RESERVE_IN_A_NEW_NETNS = """
import socket, sys
from pathlib import Path
from harness.ports import RESERVED, ReservedPorts
Path("/proc/sys/net/ipv4/ip_local_port_range").write_text("40000 40003")
RESERVED.write_text("9464\\n")

def two_free_ports():
    socks = [socket.socket() for _ in range(2)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = sorted(s.getsockname()[1] for s in socks)
    for s in socks:
        s.close()
    return ports

with ReservedPorts([40001, 40002]):
    print(RESERVED.read_text().strip(), two_free_ports())
print(RESERVED.read_text().strip())
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
def test_reserved_ports_are_not_handed_out_and_the_old_list_comes_back() -> None:
    """In a network namespace of its own (the sysctls are per namespace) whose ephemeral range is four
    ports: while two are reserved, the kernel's free ports are the other two; after, the old list is back."""
    out = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", _RESERVE_IN_A_NEW_NETNS],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    assert out == ["9464,40001-40002 [40000, 40003]", "9464"]
