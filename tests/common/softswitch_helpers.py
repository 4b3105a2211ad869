"""Helpers for the softswitch runtime tests: a tiny pipeline, a raw P4Runtime client, netns plumbing.

The pipeline here is deliberately not DistCache: it lets the runtime be
tested before and independently of softswitch/dataplane/.  It is importable
by a ``python -m softswitch --pipeline tests.common.softswitch_helpers:ForwardPipeline``
subprocess run from the repository root (see :func:`env_with_repo_path`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import grpc
from finsy.proto import p4i, p4r, p4r_grpc, rpc_status

from distcache import p4names
from distcache.cluster import Cluster
from softswitch.dataplane import PROGRAM
from softswitch.program import Digest, Program
from softswitch.state import Pipeline, SwitchState

if TYPE_CHECKING:
    from softswitch.switch import SoftSwitch

STAT_ROUTED = 0  # dc_stats index the test pipeline counts forwarded packets in
DROP_NOT_IPV4 = int(p4names.DropReason.NOT_IPV4)
DROP_NO_ROUTE = int(p4names.DropReason.NO_ROUTE)


class ForwardPipeline:
    """IPv4 forwarding by ``ipv4_lpm`` on the DistCache program's declarations.

    set_nhop(dmac, port) rewrites the destination MAC and sends on ``port``;
    counts forwarded frames in dc_stats[0] and drops in dc_drops; bumps
    register load_count[0]; raises on frames containing b"BOOM" so tests can
    check the runtime survives a failing pipeline.
    """

    program = PROGRAM

    def process(self, state: SwitchState, _ingress_port: int, packet: bytes, _now_us: int) -> list[tuple[int, bytes]]:
        if len(packet) < 34 or packet[12:14] != b"\x08\x00":
            state.counters[p4names.DC_DROPS].count(DROP_NOT_IPV4, len(packet))
            return []
        if b"BOOM" in packet:
            raise RuntimeError("test pipeline told to fail")
        dst = int.from_bytes(packet[30:34], "big")
        action, params, _hit = state.tables[p4names.IPV4_LPM].lookup(dst)
        if action != p4names.SET_NHOP:
            state.counters[p4names.DC_DROPS].count(DROP_NO_ROUTE, len(packet))
            return []
        state.counters[p4names.DC_STATS].count(STAT_ROUTED, len(packet))
        load = state.registers[p4names.LOAD_COUNT]
        load.write(0, load.read(0) + 1)
        return [(params["port"], params["dmac"].to_bytes(6, "big") + packet[6:])]


HH_DIGEST = Digest("hh_digest_t", (("key", 128), ("estimate", 16), ("switch_id", 8)))
DIGEST_PROGRAM = Program("digest_test", actions=(), tables=(), digests=(HH_DIGEST,))
DIGEST_SWITCH_ID = 7
DIGEST_ETHER_TYPE = 0x88B5
DIGEST_TEST_P4 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "p4", "digest_test.p4")


class DigestPipeline:
    """tests/p4/digest_test.p4 in Python: one ``hh_digest_t`` per probe frame, every frame dropped.

    A probe frame is Ethernet with EtherType 0x88B5, then a 16-byte key and a
    2-byte estimate (see :func:`probe_frame`); the digest is {key, estimate, 7}.
    """

    program = DIGEST_PROGRAM

    def process(self, state: SwitchState, _ingress_port: int, packet: bytes, _now_us: int) -> list[tuple[int, bytes]]:
        if len(packet) >= 32 and int.from_bytes(packet[12:14], "big") == DIGEST_ETHER_TYPE:
            state.emit_digest(
                HH_DIGEST.name,
                (int.from_bytes(packet[14:30], "big"), int.from_bytes(packet[30:32], "big"), DIGEST_SWITCH_ID),
            )
        return []


def probe_frame(key: int, estimate: int = 5) -> bytes:
    """A frame DigestPipeline (and digest_test.p4) turns into the digest {key, estimate, 7}."""
    return (
        b"\x02" * 6
        + b"\x04" * 6
        + DIGEST_ETHER_TYPE.to_bytes(2, "big")
        + key.to_bytes(16, "big")
        + estimate.to_bytes(2, "big")
    )


def ipv4_udp_frame(
    dst_ip: str,
    payload: bytes = b"hello",
    src_ip: str = "10.0.0.1",
    dmac: str = "02:00:00:00:00:02",
    smac: str = "02:00:00:00:00:01",
) -> bytes:
    """A minimal Ethernet/IPv4/UDP frame (checksums left 0: no host stack reads it)."""
    ip_len = 20 + 8 + len(payload)
    ip = (
        bytes([0x45, 0, ip_len >> 8, ip_len & 0xFF, 0, 0, 0, 0, 64, 17, 0, 0])
        + socket.inet_aton(src_ip)
        + socket.inet_aton(dst_ip)
    )
    udp = (40000).to_bytes(2, "big") + (50000).to_bytes(2, "big") + (8 + len(payload)).to_bytes(2, "big") + b"\0\0"
    eth = bytes.fromhex(dmac.replace(":", "")) + bytes.fromhex(smac.replace(":", "")) + b"\x08\x00"
    return eth + ip + udp + payload


def ip(s: str) -> int:
    """An IPv4 address as the int a table key holds."""
    return int.from_bytes(socket.inet_aton(s), "big")


@contextlib.contextmanager
def running_switch(device_id: int, pipeline: Pipeline | None = None) -> Iterator[SoftSwitch]:
    """An in-process softswitch with a test pipeline (ForwardPipeline unless told), on a free loopback port."""
    from softswitch.switch import SoftSwitch

    sw = SoftSwitch(pipeline or ForwardPipeline(), device_id=device_id, grpc_addr="127.0.0.1:0")
    sw.start()
    try:
        yield sw
    finally:
        sw.close()


def ports_free(ports: list[int]) -> bool:
    """Whether every one of ``ports`` can be bound on loopback now (a cluster's ports nobody holds)."""
    for p in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_on_port(port: int, switch_id: int, **fields: int) -> Cluster:
    """A cluster whose switch ``switch_id`` has the P4Runtime port ``port`` (a free one), its agents' ports
    above every P4Runtime port: wherever the kernel's free port fell, the cluster finds no port taken twice."""
    base = port - switch_id
    return Cluster(grpc_base_port=base, agent_base_port=base + p4names.MAX_SWITCHES, **fields)


# -- raw P4Runtime client --------------------------------------------------------------------------
def u128(v: int) -> p4r.Uint128:
    return p4r.Uint128(high=v >> 64, low=v & 0xFFFFFFFFFFFFFFFF)


def error_details(err: grpc.RpcError) -> list[tuple[grpc.StatusCode | int, str]]:
    """The per-item p4.v1.Error list of a failed batch RPC, as (canonical code int, message)."""
    out: list[tuple[Any, str]] = []
    for key, value in err.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == "grpc-status-details-bin":
            st = rpc_status.Status.FromString(value)
            for d in st.details:
                e = p4r.Error()
                assert d.Unpack(e)
                out.append((e.canonical_code, e.message))
    return out


class Stream:
    """One StreamChannel driven from a test: send requests, receive responses with a timeout."""

    def __init__(self, stub: p4r_grpc.P4RuntimeStub) -> None:
        self._req: queue.Queue[p4r.StreamMessageRequest | None] = queue.Queue()
        self._resp: queue.Queue[Any] = queue.Queue()
        self.call = stub.StreamChannel(iter(self._req.get, None))
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            for r in self.call:
                self._resp.put(r)
        except grpc.RpcError as e:
            self._resp.put(e)

    def send(self, msg: p4r.StreamMessageRequest) -> None:
        self._req.put(msg)

    def recv(self, timeout: float = 5.0) -> p4r.StreamMessageResponse:
        item = self._resp.get(timeout=timeout)
        if isinstance(item, grpc.RpcError):
            raise item
        return item  # type: ignore[no-any-return]

    def arbitrate(self, device_id: int, election_id: int | None, role: str = "") -> p4r.MasterArbitrationUpdate:
        upd = p4r.MasterArbitrationUpdate(device_id=device_id)
        if election_id is not None:
            upd.election_id.CopyFrom(u128(election_id))
        if role:
            upd.role.name = role
        self.send(p4r.StreamMessageRequest(arbitration=upd))
        return self.recv_arbitration()

    def recv_arbitration(self, timeout: float = 5.0) -> p4r.MasterArbitrationUpdate:
        while True:
            r = self.recv(timeout)
            if r.WhichOneof("update") == "arbitration":
                return r.arbitration

    def no_message(self, wait: float = 0.3) -> bool:
        try:
            self._resp.get(timeout=wait)
        except queue.Empty:
            return True
        return False

    def close(self) -> None:
        self._req.put(None)
        self.call.cancel()
        self._thread.join(timeout=5)


class Client:
    """A bare P4Runtime client over grpc stubs (no library between the test and the server)."""

    def __init__(self, address: str, device_id: int = 1) -> None:
        self.channel = grpc.insecure_channel(address)
        grpc.channel_ready_future(self.channel).result(timeout=10)
        self.stub = p4r_grpc.P4RuntimeStub(self.channel)
        self.device_id = device_id
        self.election_id: int | None = None
        self.streams: list[Stream] = []

    def stream(self) -> Stream:
        s = Stream(self.stub)
        self.streams.append(s)
        return s

    def become_primary(self, election_id: int = 1) -> Stream:
        s = self.stream()
        upd = s.arbitrate(self.device_id, election_id)
        assert upd.status.code == 0, upd
        self.election_id = election_id
        return s

    def set_pipeline(
        self,
        p4info: p4i.P4Info | None,
        action: int = p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
        device_config: bytes = b"",
        cookie: int | None = None,
        election_id: int | None = None,
    ) -> None:
        req = p4r.SetForwardingPipelineConfigRequest(device_id=self.device_id, action=action)
        eid = election_id if election_id is not None else self.election_id
        if eid is not None:
            req.election_id.CopyFrom(u128(eid))
        if p4info is not None:
            req.config.p4info.CopyFrom(p4info)
            req.config.p4_device_config = device_config
            if cookie is not None:
                req.config.cookie.cookie = cookie
        self.stub.SetForwardingPipelineConfig(req, timeout=10)

    def write(self, updates: Sequence[p4r.Update], election_id: int | None = None) -> None:
        req = p4r.WriteRequest(device_id=self.device_id, updates=list(updates))
        eid = election_id if election_id is not None else self.election_id
        if eid is not None:
            req.election_id.CopyFrom(u128(eid))
        self.stub.Write(req, timeout=10)

    def read(self, *entities: p4r.Entity) -> list[p4r.Entity]:
        out: list[p4r.Entity] = []
        for resp in self.stub.Read(p4r.ReadRequest(device_id=self.device_id, entities=list(entities)), timeout=10):
            out.extend(resp.entities)
        return out

    def close(self) -> None:
        for s in self.streams:
            s.close()
        self.channel.close()


# -- network namespaces ------------------------------------------------------------------------------
def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=20)


_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def socket_in_netns(netns: str, iface: str) -> socket.socket:
    """An AF_PACKET socket bound to ``iface`` inside network namespace ``netns``.

    Made in a short-lived thread that joins the namespace (setns affects only the
    calling thread), so the test process itself never leaves its own namespace.
    """
    result: list[Any] = []

    def work() -> None:
        try:
            with open(f"/run/netns/{netns}") as f:
                if _libc.setns(f.fileno(), _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns failed")
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
            s.bind((iface, 0x0003))
            s.settimeout(0.2)
            result.append(s)
        except OSError as e:  # handed to the caller
            result.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    if isinstance(result[0], Exception):
        raise result[0]
    return result[0]  # type: ignore[no-any-return]


class VethNet:
    """Host namespaces joined to switch-side veth ends in the test's own namespace.

    For each port i: namespace ``dct-<tag>-h<i>`` holds interface ``eth0``; its
    peer ``dct<tag><i>`` stays in the root namespace for the switch to attach
    to.  Nothing gets an address or a route; everything is removed by
    :meth:`teardown`, which never raises.
    """

    def __init__(self, nports: int) -> None:
        self.tag = uuid.uuid4().hex[:6]
        self.nports = nports
        self.netns = [f"dct-{self.tag}-h{i}" for i in range(1, nports + 1)]
        self.switch_ifaces = [f"dct{self.tag}s{i}" for i in range(1, nports + 1)]

    def setup(self) -> None:
        for ns, sif in zip(self.netns, self.switch_ifaces, strict=True):
            sh("ip", "netns", "add", ns)
            tmp = f"dct{self.tag}t"
            sh("ip", "link", "add", sif, "type", "veth", "peer", "name", tmp)
            sh("ip", "link", "set", tmp, "netns", ns)
            sh("ip", "-n", ns, "link", "set", tmp, "name", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            with contextlib.suppress(subprocess.CalledProcessError):  # quiet the link: no IPv6 chatter
                sh("sysctl", "-q", "-w", f"net.ipv6.conf.{sif}.disable_ipv6=1")
                sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.eth0.disable_ipv6=1")
            sh("ip", "link", "set", sif, "up")
            for ifc, where in ((sif, ()), ("eth0", ("-n", ns))):  # no checksum offload (see design brief)
                with contextlib.suppress(subprocess.CalledProcessError, FileNotFoundError):
                    sh(*(("ip", "netns", "exec", ns) if where else ()), "ethtool", "-K", ifc, "tx", "off")

    def teardown(self) -> None:
        for sif in self.switch_ifaces:
            subprocess.run(["ip", "link", "del", sif], capture_output=True, timeout=20)
        for ns in self.netns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


def wait_line(proc: subprocess.Popen[str], prefix: str, timeout: float) -> str:
    """The first stdout line of ``proc`` starting with ``prefix`` (fails if it exits first)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    lines: queue.Queue[str | None] = queue.Queue()

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=reader, daemon=True).start()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no {prefix!r} line within {timeout}s")
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            continue
        if line is None:
            raise RuntimeError(f"process exited ({proc.wait()}) before printing {prefix!r}")
        if line.startswith(prefix):
            return line.strip()


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """Terminate ``proc`` if it still runs; kill it if it does not stop within 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def terminated(proc: subprocess.Popen[Any]) -> Iterator[subprocess.Popen[Any]]:
    """Make sure ``proc`` is gone when the block ends."""
    try:
        yield proc
    finally:
        stop_process(proc)


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def env_with_repo_path() -> dict[str, str]:
    """Environment for a subprocess that must import ``tests.common.softswitch_helpers``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
