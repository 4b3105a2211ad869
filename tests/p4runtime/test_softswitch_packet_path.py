"""``python -m softswitch`` as a process on veth pairs: frames in one port, out the other.

Two host namespaces (``dct-<tag>-h1/h2``) each hold one end of a veth pair;
the other ends stay in the test's namespace for the switch.  No interface has
an address or route, so nothing can leave the machine.  Namespaces, links and
the switch process are removed even when a test fails.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from finsy.proto import p4r

from distcache import p4names
from softswitch.dataplane import PROGRAM
from softswitch.ports import read_pcap
from tests.common.softswitch_helpers import (
    REPO_ROOT,
    Client,
    VethNet,
    env_with_repo_path,
    free_tcp_port,
    ipv4_udp_frame,
    socket_in_netns,
    terminated,
    wait_line,
)

pytestmark = pytest.mark.timeout(60)  # needs root (namespaces, raw sockets): fails loudly otherwise

H1_MAC, H2_MAC = 0x02000000AA01, 0x02000000AA02


@pytest.fixture
def net() -> Iterator[VethNet]:
    v = VethNet(2)
    try:
        v.setup()
        yield v
    finally:
        v.teardown()


def route(prefix: str, plen: int, dmac: int, port: int) -> p4r.Update:
    te = p4r.TableEntry(table_id=PROGRAM.id_of(p4names.IPV4_LPM))
    fm = te.match.add(field_id=1)
    fm.lpm.value, fm.lpm.prefix_len = socket.inet_aton(prefix), plen
    te.action.action.action_id = PROGRAM.id_of(p4names.SET_NHOP)
    te.action.action.params.add(param_id=1, value=dmac.to_bytes(6, "big"))
    te.action.action.params.add(param_id=2, value=port.to_bytes(2, "big"))
    return p4r.Update(type=p4r.Update.INSERT, entity=p4r.Entity(table_entry=te))


def receive(sock: socket.socket, marker: bytes, timeout: float = 3.0) -> bytes | None:
    """The first frame on ``sock`` containing ``marker`` within ``timeout`` (None if none came)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            frame = sock.recv(65536)
        except TimeoutError:
            continue
        if marker in frame:
            return frame
    return None


def test_frames_cross_the_switch(net: VethNet, tmp_path: Path) -> None:
    port = free_tcp_port()
    pcap_dir, log_file = tmp_path / "pcap", tmp_path / "switch.log"
    cmd = [
        sys.executable,
        "-m",
        "softswitch",
        "--device-id",
        "4",
        "--grpc-addr",
        f"127.0.0.1:{port}",
        "-i",
        f"1@{net.switch_ifaces[0]}",
        "-i",
        f"2@{net.switch_ifaces[1]}",
        "--pipeline",
        "tests.common.softswitch_helpers:ForwardPipeline",
        "--pcap-dir",
        str(pcap_dir),
        "--log-file",
        str(log_file),
    ]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env_with_repo_path(), stdout=subprocess.PIPE, text=True)
    with terminated(proc):
        line = wait_line(proc, "softswitch ready", timeout=20)
        assert f"device_id=4 grpc=127.0.0.1:{port}" in line and net.switch_ifaces[0] in line
        h1 = socket_in_netns(net.netns[0], "eth0")
        h2 = socket_in_netns(net.netns[1], "eth0")
        client = Client(f"127.0.0.1:{port}", device_id=4)
        try:
            # before any pipeline config: dropped
            early = ipv4_udp_frame("10.0.2.5", b"early-frame")
            h1.send(early)
            assert receive(h2, b"early-frame", timeout=0.5) is None

            client.become_primary(1)
            client.set_pipeline(PROGRAM.p4info())
            client.write([route("10.0.2.0", 24, H2_MAC, 2), route("10.0.1.0", 24, H1_MAC, 1)])

            there = ipv4_udp_frame("10.0.2.5", b"there-frame")
            h1.send(there)
            got = receive(h2, b"there-frame")
            assert got == H2_MAC.to_bytes(6, "big") + there[6:]

            back = ipv4_udp_frame("10.0.1.9", b"back-frame", src_ip="10.0.2.5")
            h2.send(back)
            assert receive(h1, b"back-frame") == H1_MAC.to_bytes(6, "big") + back[6:]

            # a frame the host itself sends on a switch interface is outgoing there: not switch input
            with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as tap:
                tap.bind((net.switch_ifaces[0], 0))
                tap.send(ipv4_udp_frame("10.0.2.5", b"host-outgoing"))
            assert receive(h1, b"host-outgoing") is not None
            assert receive(h2, b"host-outgoing", timeout=0.5) is None

            h1.send(ipv4_udp_frame("10.0.2.5", b"BOOM-frame"))  # the pipeline raises on this one
            h1.send(ipv4_udp_frame("10.0.2.5", b"after-boom"))
            assert receive(h2, b"after-boom") is not None
            assert receive(h2, b"BOOM-frame", timeout=0.3) is None
            assert proc.poll() is None

            (ce,) = client.read(
                p4r.Entity(
                    counter_entry=p4r.CounterEntry(counter_id=PROGRAM.id_of(p4names.DC_STATS), index=p4r.Index(index=0))
                )
            )
            assert ce.counter_entry.data.packet_count == 3
        finally:
            client.close()
            h1.close()
            h2.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0

    log = log_file.read_text()
    assert "dropped_no_config=1" in log and "dropped_pipeline_error=1" in log, log
    assert "pipeline failed" in log and "pipeline 'distcache' committed" in log
    inbound = read_pcap(pcap_dir / f"{net.switch_ifaces[0]}_in.pcap")
    outbound = read_pcap(pcap_dir / f"{net.switch_ifaces[1]}_out.pcap")
    assert any(b"there-frame" in f for f in inbound)
    assert [f for f in outbound if b"there-frame" in f] == [got]


def test_cli_errors() -> None:
    env = env_with_repo_path()
    bad_iface = subprocess.run(
        [
            sys.executable,
            "-m",
            "softswitch",
            "--grpc-addr",
            "127.0.0.1:0",
            "-i",
            "1@dct-no-such-if",
            "--pipeline",
            "tests.common.softswitch_helpers:ForwardPipeline",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad_iface.returncode == 1 and "dct-no-such-if" in bad_iface.stderr
    for args in (["-i", "511@lo"], ["-i", "lo"], ["-i", "1@a", "-i", "1@b"], ["--device-id", "0"]):
        r = subprocess.run(
            [sys.executable, "-m", "softswitch", *args],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 2, (args, r.stderr)
    no_pipeline = subprocess.run(
        [sys.executable, "-m", "softswitch", "--grpc-addr", "127.0.0.1:0", "--pipeline", "nosuchmodule:X"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert no_pipeline.returncode == 1 and "nosuchmodule" in no_pipeline.stderr


def test_sigint_without_ports_exits_cleanly() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "softswitch",
            "--grpc-addr",
            "127.0.0.1:0",
            "--pipeline",
            "tests.common.softswitch_helpers:ForwardPipeline",
        ],
        cwd=REPO_ROOT,
        env=env_with_repo_path(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with terminated(proc):
        line = wait_line(proc, "softswitch ready", timeout=20)
        assert "grpc=127.0.0.1:" in line and not line.endswith(":0") and "ports=-" in line
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
        assert proc.stderr is not None
        assert "dropped_no_config=0" in proc.stderr.read()


def test_a_frame_is_stamped_when_it_reached_the_switch_not_when_processed(net: VethNet) -> None:
    """The kernel's receive time goes with each frame (like a MAC's ingress timestamp): a frame that waited
    while the switch was busy is not taken for a late one (liveness.p4 would take its sender for dead)."""
    from softswitch.ports import PortSet
    from softswitch.switch import SoftSwitch
    from tests.common.softswitch_helpers import ForwardPipeline

    ports = PortSet({1: net.switch_ifaces[0]})
    ports.open()
    try:
        h1 = socket_in_netns(net.netns[0], "eth0")
        sent = time.time_ns()
        h1.send(ipv4_udp_frame("10.0.2.5", b"stamped-frame"))
        time.sleep(0.3)  # the switch is busy elsewhere
        got = [(p, t) for p, f, t in ports.poll(1.0) if b"stamped-frame" in f]
        assert len(got) == 1 and got[0][0] == 1
        assert sent <= got[0][1] < sent + 100_000_000 < time.time_ns() - 150_000_000  # stamped on arrival
    finally:
        ports.close()
    sw = SoftSwitch(ForwardPipeline(), device_id=9, grpc_addr=f"127.0.0.1:{free_tcp_port()}")
    try:
        time.sleep(0.5)  # (a timestamp is never before the switch started)
        now = time.time_ns()
        late = sw.stamp(now - 200_000_000)
        assert abs(late - (sw.now_us() - 200_000)) < 20_000  # 200 ms ago, in the switch's microseconds
        assert sw.stamp(now - 400_000_000) == late  # never before the last one: timestamps do not go back
        assert sw.stamp(now + 10**12) <= sw.now_us()  # never in the future
    finally:
        sw.close()


def test_frames_of_several_ports_are_processed_in_the_order_they_arrived(net: VethNet) -> None:
    """A batch of frames from several ports comes out of poll() merged by receive time, not port by port:
    timestamps never go backwards, so a frame processed after a later one of another port would be stamped
    late (a spine's answer behind a busy leaf's client traffic read as silence)."""
    from softswitch.ports import PortSet

    ports = PortSet({1: net.switch_ifaces[0], 2: net.switch_ifaces[1]})
    ports.open()
    try:
        hosts = [socket_in_netns(net.netns[0], "eth0"), socket_in_netns(net.netns[1], "eth0")]
        sent = []
        for i in range(8):  # alternating ports, each frame after the last
            hosts[i % 2].send(ipv4_udp_frame("10.0.2.5", f"ordered-{i}".encode()))
            sent.append((i % 2 + 1, f"ordered-{i}".encode()))
            time.sleep(0.002)
        time.sleep(0.2)  # the switch is busy elsewhere: all eight wait
        got = [(p, f[f.index(b"ordered-") :][:9], t) for p, f, t in ports.poll(1.0) if b"ordered-" in f]
        assert [(p, tag) for p, tag, _ in got] == sent
        assert [t for _, _, t in got] == sorted(t for _, _, t in got)
    finally:
        ports.close()
