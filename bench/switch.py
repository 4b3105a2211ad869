"""Packets per second through one switch, on real interfaces: ``make bench-switch``.

Why: ``make bench`` times softswitch's pipeline alone; this measures a whole
switch process (packet I/O, pipeline, locks, the P4Runtime server beside it)
the way it runs in a deployment, and BMv2 (``simple_switch_grpc``) beside it
under the same load, so a change to softswitch can be judged by its ratio to
BMv2 on the same machine.

The bed, all of it its own and all of it removed at the end (also on Ctrl-C
and SIGTERM): a network namespace ``dcbench-<pid>`` holding ``lo`` and three
veth pairs (``bswN`` the switch's port N, ``bptN`` the harness's end), IPv6 and
TX checksum offload off, no addresses and no route out; the harness's main
thread joins the namespace (setns) before any thread exists, so its
P4Runtime channel reaches the switch on the namespace's loopback.  The switch
plays storage leaf sl0 of the 2-spine, 2-storage-rack cluster of the PTF
tests (``tests/ptf/dctest.py``) with the entries ``p4rt.plan.plan``
gives it: port 1 faces the storage server, ports 2 and 3 the spines sp0, sp1.
BMv2 starts with ``--no-p4`` and gets ``build/distcache.json`` + P4Info over
P4Runtime (``make build`` writes them); softswitch gets its own P4Info.

Three paths, each offered from spine port 3 by a sender process that writes
one prebuilt frame to an AF_PACKET socket on ``bpt3``, paced:

* hit: a GET for a cached, valid key (inserted into ``cache_lookup``, then made
  valid by a populate from the server port, as the shim does)
  with target = sl0's switch id: the switch answers it; the reply goes to the
  client through the spine the key's hash picks (ECMP; the key is chosen so it
  is sp0, port 2, but both spine ports are counted);
* miss: a GET for a key nobody cached, same target: forwarded to the server (port 1);
* forwarding: a plain UDP datagram (not DistCache) to the server's address: port 1.

Before each path one frame is sent and what comes out is decoded and checked
(port, operation, value).  Then the offered rate is found: the sender doubles
its rate every half second until the switch delivers less than 80 % of what
reaches its interface, and the measured run offers twice what the switch then
delivered (and is run again at a higher rate if the switch kept up after
all), so the switch is saturated while the sender, which shares the two
cores, takes no more than it needs.  The table shows offered next to
delivered, and the CPU the switch, the sender, the kernel (softirq) and
other processes (a shared machine) took in the window.  Delivered packets are the kernel's
``rx_packets`` of the receiving veth ends (``/proc/net/dev`` of the
namespace, the same counters as ``/sys/class/net/<if>/statistics``), offered
packets its ``rx_packets`` of ``bsw3``, each over a window of ``--seconds``
after a warm-up; pps = delivered / window.  After each path the switch's
``dc_stats`` counter must have moved by the packets delivered (READ_HIT for
hits, READ_MISS for misses, neither for forwarding), else the run fails.

``--profile DIR`` samples softswitch with py-spy during one more hit run of at
least 5 s (after the measured one, so the figures are unperturbed) and writes
the raw stacks (``softswitch-hit.raw.txt``) and a summary (``summary.txt``,
``summary.json``: own and inclusive % per function, own % per file).  py-spy
samples without stopping the switch (``--nonblocking``: stopping it for each
sample cut its rate by two thirds), and the few stacks read while they
changed are left out; the pkt/s while sampled is reported next to it.

Progress and the tables go to stderr; stdout gets only ``hit_pps=N miss_pps=N
fwd_pps=N`` (softswitch) and, when BMv2 ran, ``bmv2_hit_pps=N bmv2_miss_pps=N
bmv2_fwd_pps=N`` (``--json``: one JSON object instead).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import functools
import json
import math
import multiprocessing as mp
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench.procstat import cpu_seconds, cpu_ticks
from distcache import p4names as n
from distcache.cluster import Cluster
from distcache.hashing import h0, wire_key
from distcache.partition import spine_buckets
from distcache.scapy_layer import frame as dc_frame
from distcache.wire import DC_PORT, HEADER_LEN, Flag, Message, Op, WireError, decode, populate_invalidate
from harness.netns import NamespaceError, make_veth_namespace
from harness.processes import die_with_parent, stop_group
from harness.profile import summarize_profile
from p4rt.plan import plan

if TYPE_CHECKING:
    from p4rt.client import SwitchConnection

REPO = Path(__file__).resolve().parents[1]
TARGETS = ("softswitch", "bmv2")
BMV2_SWITCH, BMV2_COMPILER = "simple_switch_grpc", "p4c-bm2-ss"
BMV2_JSON, BMV2_P4INFO = REPO / "build" / "distcache.json", REPO / "build" / "distcache.p4info.txtpb"
GRPC_ADDR = "127.0.0.1:9559"  # the namespace's own loopback
THRIFT_PORT = 9090
DEVICE_ID = 1
CPU_PORT = 510  # 511 is BMv2's drop port

CLUSTER = Cluster(spines=2, storage_racks=2, client_racks=2)  # the PTF tests' cluster (tests/ptf/dctest.py)
LEAF = CLUSTER.storage_leaf(0)
SERVER, CLIENT = CLUSTER.server(0, 0), CLUSTER.client(0, 0)
BUCKETS = spine_buckets([CLUSTER.spine(i).switch_id for i in range(CLUSTER.spines)])
PORTS = (1, 2, 3)  # sl0: 1 server r0s0, 2 spine sp0, 3 spine sp1
SERVER_PORT, SPINE_PORTS, IN_PORT = 1, (2, 3), 3
VALUE = b"v" * 64
SLOT, VERSION_TAG, FILL_SEQ = 1, 1, 9
UDP_SPORT, PLAIN_DPORT = 40000, 9999

PATHS = ("hit", "miss", "fwd")
PATH_NAMES = {
    "hit": "cache hit (GET answered by the switch)",
    "miss": "cache miss (GET forwarded to the server)",
    "fwd": "IPv4 forwarding (plain UDP to the server)",
}
WARMUP = 0.5  # seconds of each measured run before its window opens
STEP_SECONDS, STEP_WINDOW = 0.5, 0.3  # rate search: each step's length and its measured tail
START_RATE = 5000.0  # pps the rate search starts from
MAX_RATE = 2_000_000.0
SATURATED = 0.8  # delivered / offered below this: the switch is the limit
OFFER_FACTOR = 2.0  # the measured run offers this times what the switch delivered at saturation
SENDER_BURST = 64  # frames the sender writes between two looks at the clock
PROFILE_RATE = 500  # py-spy samples per second
PROFILE_SECONDS = 5.0  # the sampled hit run lasts at least this long

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
CTX = mp.get_context("spawn")  # a fresh interpreter for the sender: no gRPC channel, no rich thread
err = Console(stderr=True, log_path=False)


class SetupError(RuntimeError):
    """The bed could not be brought up, or a path did not do what it should."""


# -- the sender (a spawned process inside the namespace) -------------------------------------------------


def sender_main(conn: Connection, iface: str) -> None:
    """Offer frames on ``iface``: each request (frame, rate, seconds) is answered with (sent, errors, seconds).

    Paced: it writes what is due at ``rate`` since the request started, SENDER_BURST frames at a time, and
    sleeps when nothing is due, so it takes only the CPU that rate needs (the switch shares the 2 cores).
    A backlog of more than 20 ms (the sender was descheduled) is dropped, not sent as one burst.  rate 0:
    as fast as it can.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness stops it
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.bind((iface, 0))
    conn.send("ready")
    while True:
        req = conn.recv()
        if req is None:
            return
        frame, rate, seconds = req
        send, perf, sleep = sock.send, time.perf_counter, time.sleep
        sent = errors = 0
        t0 = perf()
        end, lag = t0 + seconds, max(1, int(rate * 0.02))
        base = 0  # frames the pacing forgave (backlog dropped)
        while (now := perf()) < end:
            due = int((now - t0) * rate) - base - sent - errors if rate else SENDER_BURST
            if due > lag:
                base += due - SENDER_BURST
                due = SENDER_BURST
            if due <= 0:
                sleep(min(2e-4, (base + sent + errors + 1) / rate - (now - t0)))
                continue
            for _ in range(min(due, SENDER_BURST)):
                try:
                    send(frame)
                    sent += 1
                except OSError as e:  # ENOBUFS: the device queue is full; count it and go on
                    if e.errno not in (errno.ENOBUFS, errno.EAGAIN):
                        raise
                    errors += 1
        conn.send((sent, errors, perf() - t0))


# -- the namespace -----------------------------------------------------------------------------------------


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, text=True, capture_output=True)


_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"setns: {os.strerror(e)}")


class Namespace:
    """``dcbench-<pid>``: lo and veth pairs bsw<N>/bpt<N>; the harness's main thread can enter and leave it.

    Built by harness.netns, as tests/ptf/run.py builds its own.
    """

    def __init__(self, ports: tuple[int, ...]) -> None:
        self.name = f"dcbench-{os.getpid()}"
        self.ports = ports
        self.created = False
        self._home: int | None = None  # fd of the network namespace the harness came from

    def create(self) -> None:
        try:
            make_veth_namespace(self.name, [(f"bsw{p}", f"bpt{p}") for p in self.ports])
        except NamespaceError as e:
            raise SetupError(str(e)) from None
        finally:
            self.created = Path(f"/run/netns/{self.name}").exists()  # whatever part of it exists is ours to delete

    def enter(self) -> None:
        """Move the calling (main) thread into the namespace; threads and processes started later follow."""
        if threading.active_count() != 1 or len(os.listdir("/proc/self/task")) != 1:
            raise SetupError("the harness must enter the namespace before it starts any thread")
        self._home = os.open("/proc/self/ns/net", os.O_RDONLY)
        fd = os.open(f"/run/netns/{self.name}", os.O_RDONLY)
        try:
            _setns(fd)
        finally:
            os.close(fd)
        missing = [f"bpt{p}" for p in self.ports if f"bpt{p}" not in netdev()]
        if missing:
            raise SetupError(f"entered {self.name} but do not see {missing}")

    def leave(self) -> None:
        if self._home is not None:
            _setns(self._home)
            os.close(self._home)
            self._home = None

    def delete(self) -> None:
        self.leave()
        if not self.created:
            return
        for pid in sh("ip", "netns", "pids", self.name, check=False).stdout.split():
            if pid.isdigit() and int(pid) != os.getpid():  # what is left inside was started by this run
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        if sh("ip", "netns", "del", self.name, check=False).returncode == 0:
            self.created = False
        else:
            err.print(f"[red]warning: could not delete network namespace {self.name}[/]")


def netdev() -> dict[str, tuple[int, int]]:
    """(rx_packets, tx_packets) per interface of the main thread's network namespace (/proc/self/net/dev)."""
    out = {}
    for line in Path("/proc/self/net/dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        f = rest.split()
        out[name.strip()] = (int(f[1]), int(f[9]))
    return out


@functools.cache
def _ksoftirqd() -> tuple[int, ...]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if (d / "comm").read_text().startswith("ksoftirqd/"):
                    pids.append(int(d.name))
    return tuple(pids)


def machine_cpu() -> tuple[float, float, float]:
    """(user + nice + system, kernel packet work, steal) CPU seconds of all cores since boot: kernel packet work
    is /proc/stat's softirq time plus what the ksoftirqd threads took (the kernel defers softirqs to them under
    load; their time is system time of no process of ours); steal is what the hypervisor gave other guests."""
    f = cpu_ticks()
    tck = os.sysconf("SC_CLK_TCK")
    ksoft = sum(s for s in map(cpu_seconds, _ksoftirqd()) if not math.isnan(s))
    return (f[0] + f[1] + f[2]) / tck - ksoft, f[6] / tck + ksoft, f[7] / tck


# -- frames ------------------------------------------------------------------------------------------------


def _transit_port(p: object) -> dict[int, int]:
    """transit slot -> leaf port, from the plan's transit_spine entries."""
    return {
        dict(e.match_dict)[n.KEY_TRANSIT_SLOT]: dict(e.params_dict)["port"]
        for e in p.entries
        if e.table == n.TRANSIT_SPINE
    }


def pick_key(stem: str, transit: dict[int, int], port: int) -> bytes:
    """A wire key whose replies the leaf sends up ``port`` (its h0 transit slot maps there)."""
    for i in range(10_000):
        k = wire_key(f"{stem}{i}")
        if transit.get(h0(k) & (n.TRANSIT_SLOTS - 1)) == port:
            return k
    raise SetupError(f"no key goes up port {port}")


@dataclass
class Frames:
    hit_key: bytes
    miss_key: bytes
    fill: list[bytes]  # INVALIDATE, UPDATE from the server port
    paths: dict[str, bytes]  # path -> the frame offered on IN_PORT


def build_frames() -> Frames:
    transit = _transit_port(plan(CLUSTER, LEAF, BUCKETS))
    hit_key = pick_key("bench-hit-", transit, SPINE_PORTS[0])  # requests in on port 3, replies out on port 2
    miss_key = pick_key("bench-miss-", transit, SPINE_PORTS[0])
    owner = CLUSTER.spine_address(BUCKETS[h0(hit_key)])
    # a populate of the leaf's own entry, as the shim sends it: the INVALIDATE carries the entry's tag (only it
    # arms a new entry), both are addressed to the leaf, which reflects them back to the server
    fill = [
        bytes(dc_frame(m, SERVER.ip, owner, sport=DC_PORT, dport=DC_PORT))
        for m in (
            populate_invalidate(hit_key, FILL_SEQ, LEAF.switch_id, 0, VERSION_TAG),
            Message(op=Op.UPDATE, key=hit_key, seq=FILL_SEQ, value=VALUE, target=LEAF.switch_id),
        )
    ]

    def get(k: bytes) -> bytes:
        return bytes(
            dc_frame(Message(op=Op.GET, key=k, seq=7, target=LEAF.switch_id), CLIENT.ip, SERVER.ip, sport=UDP_SPORT)
        )

    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    plain = bytes(
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src=CLIENT.ip, dst=SERVER.ip)
        / UDP(sport=UDP_SPORT, dport=PLAIN_DPORT)
        / Raw(b"x" * HEADER_LEN)
    )  # as long as a GET
    return Frames(hit_key, miss_key, fill, {"hit": get(hit_key), "miss": get(miss_key), "fwd": plain})


def udp_payload(frame: bytes) -> tuple[int, int, bytes] | None:
    """(ttl, UDP destination port, payload) of an Ethernet/IPv4/UDP frame, else None."""
    if len(frame) < 42 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    ihl = (frame[14] & 0x0F) * 4
    total = int.from_bytes(frame[16:18], "big")
    udp = 14 + ihl
    return frame[22], int.from_bytes(frame[udp + 2 : udp + 4], "big"), frame[udp + 8 : 14 + total]


# -- probing one frame -------------------------------------------------------------------------------------


def _rx_socket(iface: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((iface, ETH_P_ALL))
    s.setblocking(False)
    return s


def probe(frame: bytes, in_port: int = IN_PORT, timeout: float = 2.0, settle: float = 0.2) -> list[tuple[int, bytes]]:
    """Send ``frame`` on the switch's port ``in_port`` and return what came out of any port within ``timeout``
    (and ``settle`` seconds after the first frame), as (switch port, frame)."""
    socks = {p: _rx_socket(f"bpt{p}") for p in PORTS}
    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        tx.bind((f"bpt{in_port}", 0))
        for s in socks.values():  # anything queued before
            with contextlib.suppress(BlockingIOError):
                while s.recv(65536):
                    pass
        tx.send(frame)
        got: list[tuple[int, bytes]] = []
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for p, s in socks.items():
                with contextlib.suppress(BlockingIOError):
                    while True:
                        data, addr = s.recvfrom(65536)
                        if addr[2] != PACKET_OUTGOING:
                            got.append((p, data))
            if got:
                end = min(end, time.monotonic() + settle)
            time.sleep(0.01)
        return got
    finally:
        tx.close()
        for s in socks.values():
            s.close()


def check_path(path: str, frames: Frames, out: list[tuple[int, bytes]]) -> int:
    """The port ``path``'s frame left on, after checking it is the one frame expected; raises SetupError."""
    if len(out) != 1:
        raise SetupError(f"{path}: expected one frame out of the switch, got {len(out)} (ports {[p for p, _ in out]})")
    port, data = out[0]
    parsed = udp_payload(data)
    if parsed is None:
        raise SetupError(f"{path}: the frame out of port {port} is not IPv4/UDP")
    ttl, dport, payload = parsed
    if path == "fwd":
        if port != SERVER_PORT or dport != PLAIN_DPORT or ttl != 63:
            raise SetupError(
                f"fwd: plain UDP came out of port {port} (dport {dport}, ttl {ttl}); expected port "
                f"{SERVER_PORT}, dport {PLAIN_DPORT}, ttl 63"
            )
        return port
    try:
        msg = decode(payload)
    except WireError as e:
        raise SetupError(f"{path}: the frame out of port {port} is not a DistCache message: {e}") from None
    if path == "hit":
        if (
            port not in SPINE_PORTS
            or msg.op != Op.GET_REPLY
            or msg.value != VALUE
            or msg.served_by != LEAF.switch_id
            or not msg.flags & Flag.CACHED
        ):
            raise SetupError(
                f"hit: expected a GET_REPLY served by {LEAF.switch_id} with the cached value on a "
                f"spine port; got {msg.op.name} on port {port} (served_by {msg.served_by}, "
                f"{len(msg.value)}-byte value)"
            )
    elif port != SERVER_PORT or msg.op != Op.GET or msg.key != frames.miss_key:
        raise SetupError(f"miss: expected the GET on the server port {SERVER_PORT}; got {msg.op.name} on port {port}")
    return port


# -- one switch --------------------------------------------------------------------------------------------


@dataclass
class PathResult:
    pps: float  # delivered / window
    offered_pps: float  # rx_packets of the switch's ingress interface / window
    sent_pps: float  # the sender's own count / its running time
    send_errors: int
    delivery: float  # pps / offered_pps
    out_port: int  # where the probe frame came out
    switch_cpu_percent: float  # 100 = one core busy for the whole window
    sender_cpu_percent: float
    softirq_cpu_percent: float  # the kernel delivering frames over the veths: softirq time + ksoftirqd threads
    others_cpu_percent: float  # processes this harness did not start (a shared machine makes figures low)
    steal_cpu_percent: float  # time the hypervisor gave to other guests (a shared host makes figures low)
    delivered_total: int  # frames out of the expected ports over the whole run (warm-up and drain included)
    counter_deltas: dict[str, int]  # dc_stats cells that moved
    search: list[tuple[float, float, float]]  # rate search: (asked pps, offered pps, delivered pps) per step
    window_seconds: float
    sender_limited: bool  # offered < 1.2 x delivered: the sender, not the switch, may be the limit


class Bed:
    """One switch in the namespace, its P4Runtime session and the sender; ``close`` stops them."""

    def __init__(self, target: str, ns: Namespace, workdir: Path, progress: Progress) -> None:
        self.target, self.ns, self.workdir, self.progress = target, ns, workdir, progress
        self.proc: subprocess.Popen | None = None
        self.sw: SwitchConnection | None = None
        self.sender: mp.process.BaseProcess | None = None
        self.sender_conn: Connection | None = None
        self.out = workdir / f"{target}.out"
        self.log = workdir / f"{target}.log"

    def command(self) -> list[str]:
        ports = [a for p in PORTS for a in ("-i", f"{p}@bsw{p}")]
        if self.target == "bmv2":
            return [
                BMV2_SWITCH,
                "--device-id",
                str(DEVICE_ID),
                *ports,
                "--no-p4",
                "--thrift-port",
                str(THRIFT_PORT),
                "--",
                "--grpc-server-addr",
                GRPC_ADDR,
                "--cpu-port",
                str(CPU_PORT),
            ]
        return [
            sys.executable,
            "-m",
            "softswitch",
            "--device-id",
            str(DEVICE_ID),
            "--grpc-addr",
            GRPC_ADDR,
            *ports,
            "--log-file",
            str(self.log),
            "--log-level",
            "warning",
        ]

    def logs(self) -> str:
        parts = []
        for f in (self.out, self.log):
            if f.exists():
                lines = f.read_text(errors="replace").splitlines()[-20:]
                parts.append(f"--- {f.name} ---\n" + ("\n".join(lines) or "(empty)"))
        return "\n".join(parts)

    def start(self) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
            "PYTHONUNBUFFERED": "1",
        }
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        self.sender, self.sender_conn = self._spawn_sender()
        from p4rt.client import P4RuntimeError, SwitchConnection

        self.sw = SwitchConnection(GRPC_ADDR, DEVICE_ID, name=self.target)
        end = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise SetupError(f"{self.target} exited with code {self.proc.returncode}\n{self.logs()}")
            try:
                self.sw.connect(timeout=1.0)
                break
            except P4RuntimeError:
                if time.monotonic() > end:
                    raise SetupError(
                        f"{self.target} did not serve P4Runtime on {GRPC_ADDR} within 30 s\n" + self.logs()
                    ) from None
        if not self.sender_conn.poll(30) or self.sender_conn.recv() != "ready":
            raise SetupError("the sender process did not start")

    def _spawn_sender(self) -> tuple[mp.process.BaseProcess, Connection]:
        here, there = CTX.Pipe()
        proc = CTX.Process(target=sender_main, args=(there, f"bpt{IN_PORT}"), name="sender", daemon=True)
        proc.start()
        there.close()
        return proc, here

    def configure(self, frames: Frames) -> None:
        """The pipeline, sl0's entries, and the hit key cached and valid."""
        assert self.sw is not None
        if self.target == "bmv2":
            from p4rt.client import load_p4info

            self.sw.set_pipeline(load_p4info(BMV2_P4INFO), BMV2_JSON.read_bytes())
        else:
            from softswitch.dataplane import PROGRAM

            self.sw.set_pipeline(PROGRAM.p4info(), b"")
        p = plan(CLUSTER, LEAF, BUCKETS)
        self.sw.set_default(n.SWITCH_CONFIG, n.SET_CONFIG, p.config)
        for e in p.defaults:
            self.sw.set_default(e.table, e.action, e.params_dict)
        for e in p.entries:
            self.sw.insert(e.table, e.match_dict, e.action, e.params_dict)
        self.sw.insert(
            n.CACHE_LOOKUP,
            {n.KEY_DC_KEY: int.from_bytes(frames.hit_key, "big")},
            n.CACHE_HIT,
            {"slot": SLOT, "version": VERSION_TAG},
        )
        for f, stat in zip(frames.fill, (n.Stat.INVALIDATE, n.Stat.UPDATE), strict=True):
            out = probe(f, in_port=SERVER_PORT)
            if self.stats().get(stat.name, 0) != 1 or len(out) != 1:
                raise SetupError(
                    f"{self.target}: filling the cache: {stat.name} not counted once "
                    f"({self.stats()}), {len(out)} frame(s) out"
                )

    def stats(self) -> dict[str, int]:
        """dc_stats cells by name."""
        assert self.sw is not None
        cells = self.sw.read_counter(n.DC_STATS)
        return {s.name: cells.get(int(s), (0, 0))[0] for s in n.Stat}

    def offer(
        self,
        frame: bytes,
        rate: float,
        seconds: float,
        window_at: float,
        window: float,
        during: Callable[[], subprocess.Popen | None] | None = None,
        bar: TaskID | None = None,
    ) -> tuple[dict[str, float], subprocess.Popen | None]:
        """Offer ``frame`` at ``rate`` for ``seconds``; counters over [window_at, window_at + window].

        ``during`` starts a helper (py-spy) as the window opens; it gets SIGINT as the window closes.
        """
        assert self.sender_conn is not None and self.sender is not None and self.proc is not None
        self.sender_conn.send((frame, rate, seconds))
        t0 = time.monotonic()
        self._sleep_until(t0 + window_at, bar, t0)
        d0, w0 = netdev(), time.monotonic()
        c0 = (cpu_seconds(self.proc.pid), cpu_seconds(self.sender.pid), cpu_seconds(os.getpid()), machine_cpu())
        helper = during() if during else None
        self._sleep_until(w0 + window, bar, t0)
        d1, w1 = netdev(), time.monotonic()
        c1 = (cpu_seconds(self.proc.pid), cpu_seconds(self.sender.pid), cpu_seconds(os.getpid()), machine_cpu())
        if helper is not None:
            helper.send_signal(signal.SIGINT)
        if not self.sender_conn.poll(seconds + 30):
            raise SetupError("the sender did not report")
        sent, errors, ran = self.sender_conn.recv()
        dt = w1 - w0
        rx = lambda d, i: d[i][0]  # noqa: E731
        m = {
            "window": dt,
            "offered": (rx(d1, f"bsw{IN_PORT}") - rx(d0, f"bsw{IN_PORT}")) / dt,
            "switch_cpu": 100 * (c1[0] - c0[0]) / dt,
            "sender_cpu": 100 * (c1[1] - c0[1]) / dt,
            "softirq_cpu": 100 * (c1[3][1] - c0[3][1]) / dt,
            "steal_cpu": 100 * (c1[3][2] - c0[3][2]) / dt,
            # user + system time of every process but the switch, the sender and the harness: the machine is shared
            "others_cpu": max(0.0, 100 * ((c1[3][0] - c0[3][0]) - sum(c1[i] - c0[i] for i in range(3))) / dt),
            "sent": sent / ran,
            "errors": errors,
        }
        for p in PORTS:
            m[f"out{p}"] = (rx(d1, f"bpt{p}") - rx(d0, f"bpt{p}")) / dt
        return m, helper

    def _sleep_until(self, t: float, bar: TaskID | None, t0: float) -> None:
        while (left := t - time.monotonic()) > 0:
            if bar is not None:
                self.progress.update(bar, completed=time.monotonic() - t0)
            time.sleep(min(0.05, left))
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise SetupError(
                f"{self.target} exited with code {self.proc.returncode} under load (`make clean` and "
                "dcnet.cleanup stop every softswitch and simple_switch_grpc on the machine)\n" + self.logs()
            )

    def drain(self) -> dict[str, tuple[int, int]]:
        """Wait until nothing comes out any more (the switch works through its queue); the counters then."""
        last, stable, end = netdev(), 0, time.monotonic() + 10
        while stable < 3 and time.monotonic() < end:
            time.sleep(0.1)
            now = netdev()
            stable = stable + 1 if all(now[f"bpt{p}"] == last[f"bpt{p}"] for p in PORTS) else 0
            last = now
        return last

    def run_path(
        self,
        path: str,
        frames: Frames,
        seconds: float,
        start_rate: float,
        during: Callable[[], subprocess.Popen | None] | None = None,
    ) -> tuple[PathResult, float]:
        """Probe, search the rate, measure and verify one path; (result, the rate the switch saturated at)."""
        frame = frames.paths[path]
        out_port = check_path(path, frames, probe(frame))
        out_ports = SPINE_PORTS if path == "hit" else (SERVER_PORT,)
        delivered = lambda m: sum(m[f"out{p}"] for p in out_ports)  # noqa: E731
        saturated = lambda m: delivered(m) < SATURATED * m["offered"]  # noqa: E731
        search: list[tuple[float, float, float]] = []
        bar = self.progress.add_task(f"{self.target} {path}: rate search", total=None)
        rate, capacity = start_rate, 0.0
        while True:
            m, _ = self.offer(frame, rate, STEP_SECONDS, STEP_SECONDS - STEP_WINDOW, STEP_WINDOW)
            search.append((round(rate), round(m["offered"]), round(delivered(m))))
            capacity = max(capacity, delivered(m))
            if saturated(m):
                break  # the switch is the limit
            if m["offered"] < 0.7 * rate or rate >= MAX_RATE:
                break  # the sender is: offer all it can
            rate *= 2
        self.progress.update(
            bar,
            total=1,
            completed=1,
            description=f"{self.target} {path}: rate search ({capacity:,.0f} pkt/s at saturation)",
        )
        offer_rate = min(MAX_RATE, OFFER_FACTOR * capacity) if saturated(m) else 0.0
        for attempt in range(3):
            # the search's steps are short: if the switch keeps up with the measured run's rate after all,
            # that run measured the sender, not the switch; offer more and run again
            self.drain()
            s0, d0 = self.stats(), netdev()
            label = f"{self.target} {path}: {seconds:g} s at " + (
                f"{offer_rate:,.0f} pkt/s" if offer_rate else "the sender's full rate"
            )
            bar = self.progress.add_task(
                label + (f" (try {attempt + 1})" if attempt else ""), total=WARMUP + seconds + 0.3
            )
            m, helper = self.offer(frame, offer_rate, WARMUP + seconds + 0.3, WARMUP, seconds, during, bar)
            self.progress.update(bar, completed=WARMUP + seconds + 0.3)
            d1 = self.drain()
            s1 = self.stats()
            if helper is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    helper.wait(30)
            if saturated(m) or not offer_rate or offer_rate >= MAX_RATE or during is not None:
                break
            offer_rate = min(MAX_RATE, 2 * OFFER_FACTOR * delivered(m))
        total = sum(d1[f"bpt{p}"][0] - d0[f"bpt{p}"][0] for p in out_ports)
        stray = sum(d1[f"bpt{p}"][0] - d0[f"bpt{p}"][0] for p in PORTS if p not in out_ports)
        deltas = {k: s1[k] - s0.get(k, 0) for k in s1 if s1[k] != s0.get(k, 0)}
        verify(self.target, path, total, stray, deltas)
        pps = delivered(m)
        res = PathResult(
            pps=pps,
            offered_pps=m["offered"],
            sent_pps=m["sent"],
            send_errors=int(m["errors"]),
            delivery=pps / m["offered"] if m["offered"] else 0.0,
            out_port=out_port,
            switch_cpu_percent=m["switch_cpu"],
            sender_cpu_percent=m["sender_cpu"],
            softirq_cpu_percent=m["softirq_cpu"],
            others_cpu_percent=m["others_cpu"],
            steal_cpu_percent=m["steal_cpu"],
            delivered_total=total,
            counter_deltas=deltas,
            search=search,
            window_seconds=m["window"],
            sender_limited=m["offered"] < 1.2 * pps,
        )
        return res, max(capacity, pps)

    def close(self) -> None:
        if self.sw is not None:
            with contextlib.suppress(Exception):
                self.sw.close()
            self.sw = None
        if self.sender_conn is not None:
            with contextlib.suppress(Exception):
                self.sender_conn.send(None)
        if self.sender is not None:
            self.sender.join(2)
            if self.sender.is_alive():
                self.sender.kill()
                self.sender.join()
            self.sender = None
        stop(self.proc)


stop = stop_group  # the switch runs in its own process group


def shared(r: dict) -> bool:
    """Whether other processes or other guests of the host took more than a quarter of a core in the window."""
    return r["others_cpu_percent"] > 25 or r["steal_cpu_percent"] > 25


def verify(target: str, path: str, total: int, stray: int, deltas: dict[str, int]) -> None:
    """The switch's own counters must agree with the frames that came out; raises SetupError.

    The path's counter (READ_HIT for hits, READ_MISS for misses) must have counted every frame that came out
    and may exceed them only by what the switch dropped after its ingress pipeline under overload (BMv2's
    queue between ingress and egress, a failed send): at most a fifth.  The other counter must stay put, and
    plain UDP moves neither.
    """
    slack = max(5, total // 100)
    problems = []
    if total <= 0:
        problems.append("no frame came out")
    if stray > slack:
        problems.append(f"{stray} frames left other ports")
    counted = {"hit": "READ_HIT", "miss": "READ_MISS"}.get(path)
    for name in ("READ_HIT", "READ_MISS"):
        moved = deltas.get(name, 0)
        if name == counted and not (total - slack <= moved and total >= 0.8 * moved):
            problems.append(f"{name} moved by {moved} for {total} frames out")
        elif name != counted and moved > (slack if counted else 0):
            problems.append(f"{name} moved by {moved}")
    if problems:
        raise SetupError(
            f"{target} {path}: the path was not taken as expected: {'; '.join(problems)} (dc_stats moved: {deltas})"
        )


# -- profile -----------------------------------------------------------------------------------------------


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def profile_text(prof: dict) -> str:
    lines = [
        f"softswitch main thread during cache hits: {prof['samples']} py-spy samples "
        f"({prof['rate']} Hz, --nonblocking; {prof['torn_samples']} torn stacks left out; "
        f"{prof['pps']:,.0f} pkt/s while sampled)",
        "",
    ]
    for title, key in (
        ("own %", "own_percent"),
        ("inclusive %", "inclusive_percent"),
        ("own % by file", "own_percent_by_file"),
    ):
        lines.append(f"{title}:")
        lines += [f"  {v:5.1f}  {k}" for k, v in prof[key].items()]
        lines.append("")
    return "\n".join(lines)


# -- the run -----------------------------------------------------------------------------------------------


def bench_target(
    target: str, ns: Namespace, frames: Frames, args: argparse.Namespace, workdir: Path, progress: Progress
) -> dict:
    bed = Bed(target, ns, workdir, progress)
    try:
        t0 = time.monotonic()
        bar = progress.add_task(f"{target}: start and configure", total=None)
        bed.start()
        bed.configure(frames)
        progress.update(bar, total=1, completed=1)
        err.log(
            f"{target} (pid {bed.proc.pid if bed.proc else '?'}) up and configured as sl0 in "
            f"{time.monotonic() - t0:.1f} s"
        )
        results: dict[str, PathResult] = {}
        rate = START_RATE
        for path in PATHS:
            results[path], cap = bed.run_path(path, frames, args.seconds, rate)
            rate = max(START_RATE, cap / 2)
            r = results[path]
            err.log(
                f"{target} {path}: {r.pps:,.0f} pkt/s delivered of {r.offered_pps:,.0f} offered "
                f"(CPU %: switch {r.switch_cpu_percent:.0f}, sender {r.sender_cpu_percent:.0f}, kernel "
                f"{r.softirq_cpu_percent:.0f}, others {r.others_cpu_percent:.0f}, steal {r.steal_cpu_percent:.0f})"
                + (" [yellow]the machine is shared: this figure is low[/]" if shared(asdict(r)) else "")
            )
        out: dict = {"pid": bed.proc.pid if bed.proc else None, "paths": {k: asdict(v) for k, v in results.items()}}
        if args.profile and target == "softswitch":
            out["profile"] = profile_hits(bed, frames, args, results["hit"])
        return out
    except Exception as e:
        if isinstance(e, SetupError) or bed.proc is None or bed.proc.poll() is None:
            raise
        # a P4Runtime call failed because the switch is gone: say that
        raise SetupError(
            f"{target} exited with code {bed.proc.returncode} during the run (`make clean` and "
            "dcnet.cleanup stop every softswitch and simple_switch_grpc on the machine)\n" + bed.logs()
        ) from e
    finally:
        bed.close()


def profile_hits(bed: Bed, frames: Frames, args: argparse.Namespace, hit: PathResult) -> dict | None:
    spy = py_spy()
    if spy is None:
        err.log("[yellow]--profile needs py-spy (.venv/bin/pip install py-spy); no profile[/]")
        return None
    assert bed.proc is not None
    args.profile.mkdir(parents=True, exist_ok=True)
    raw = args.profile / "softswitch-hit.raw.txt"
    raw.unlink(missing_ok=True)
    spy_out = bed.workdir / "py-spy.out"
    seconds = max(args.seconds, PROFILE_SECONDS)

    def start() -> subprocess.Popen:
        with open(spy_out, "wb") as f:
            return subprocess.Popen(
                [
                    spy,
                    "record",
                    "--threads",
                    "--nonblocking",
                    "-r",
                    str(PROFILE_RATE),
                    "-f",
                    "raw",
                    "-d",
                    str(math.ceil(seconds) + 10),
                    "-o",
                    str(raw),
                    "-p",
                    str(bed.proc.pid),
                ],
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    # one more hit run, sampled: the measured one stays unperturbed (py-spy stops the switch for each sample)
    res, _ = bed.run_path("hit", frames, seconds, max(START_RATE, hit.pps / 2), during=start)
    if not raw.exists() or not raw.stat().st_size:
        err.log(f"[yellow]py-spy wrote no profile: {spy_out.read_text(errors='replace')[-500:]}[/]")
        return None
    prof = summarize_profile(raw, top=20) | {"raw": str(raw), "rate": PROFILE_RATE, "pps": res.pps}
    (args.profile / "summary.json").write_text(json.dumps(prof, indent=2) + "\n")
    (args.profile / "summary.txt").write_text(profile_text(prof))
    err.log(f"profile of softswitch hits: {raw} and {args.profile / 'summary.txt'}")
    return prof


def summary_lines(fig: dict) -> list[str]:
    lines = []
    for target, prefix in (("softswitch", ""), ("bmv2", "bmv2_")):
        if target in fig["targets"]:
            lines.append(" ".join(f"{prefix}{p}_pps={fig[f'{prefix}{p}_pps']}" for p in PATHS))
    return lines


def render(fig: dict, out: Console) -> None:
    targets = fig["targets"]
    t = Table(
        title=f"packets per second through one switch (storage leaf sl0; {fig['config']['seconds']:g} s "
        f"window per path; offered = what reached the switch's ingress interface)"
    )
    t.add_column("path")
    for target in targets:
        t.add_column(f"{target} pkt/s", justify="right")
        t.add_column(f"{target} offered", justify="right")
        t.add_column(f"{target} CPU %: switch / sender / kernel / others / steal", justify="right")
    if len(targets) == 2:
        t.add_column("softswitch / BMv2", justify="right")
    for path in PATHS:
        row = [PATH_NAMES[path]]
        for target in targets:
            r = targets[target]["paths"][path]
            row += [
                f"{r['pps']:,.0f}",
                f"{r['offered_pps']:,.0f}" + (" (sender-limited)" if r["sender_limited"] else ""),
                f"{r['switch_cpu_percent']:.0f} / {r['sender_cpu_percent']:.0f} / "
                f"{r['softirq_cpu_percent']:.0f} / {r['others_cpu_percent']:.0f} / {r['steal_cpu_percent']:.0f}",
            ]
        if len(targets) == 2:
            row.append(f"{fig['ratio'][path]:.2f}")
        t.add_row(*row)
    out.print(t)
    out.print(
        "CPU %: 100 = one core for the whole window; kernel = softirq time and ksoftirqd threads (frames "
        f"crossing the veths); others = processes this harness did not start; steal = time "
        f"the hypervisor gave other guests ({fig['config']['cpus']} cores; "
        f"load average before the run {' '.join(map(str, fig['config']['loadavg_before']))})"
    )
    busy = [f"{t} {p}" for t, tr in targets.items() for p in PATHS if shared(tr["paths"][p])]
    if busy:
        out.print(
            f"[yellow]the machine was shared: other processes or other guests of the host (steal) took more "
            f"than a quarter of a core during "
            f"{', '.join(busy)}; those figures are low[/]"
        )
    d = Table(
        title="checks: frames out over the whole run vs the switch's dc_stats; the rate search's steps "
        "(asked / offered / delivered pkt/s)"
    )
    for col in ("target", "path", "out port", "frames out", "dc_stats moved", "rate search"):
        d.add_column(col)
    for target, tr in targets.items():
        for path in PATHS:
            r = tr["paths"][path]
            d.add_row(
                target,
                path,
                str(r["out_port"]),
                f"{r['delivered_total']:,}",
                ", ".join(f"{k} {v:,}" for k, v in r["counter_deltas"].items()) or "none",
                "  ".join(f"{a:,}/{o:,}/{dl:,}" for a, o, dl in r["search"]),
            )
    out.print(d)
    prof = fig.get("profile")
    if prof:
        for title, key in (
            ("own time", "own_percent"),
            ("inclusive time", "inclusive_percent"),
            ("own time by file", "own_percent_by_file"),
        ):
            pt = Table(
                title=f"softswitch main thread during cache hits, {title} (py-spy, {prof['samples']} "
                f"samples, % of busy samples; {prof['pps']:,.0f} pkt/s while sampled)"
            )
            pt.add_column("function" if "file" not in key else "file")
            pt.add_column("%", justify="right")
            for k, v in list(prof[key].items())[:15]:
                pt.add_row(k, f"{v:.1f}")
            out.print(pt)


def _sigterm(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """A second Ctrl-C or SIGTERM must not cut the teardown short."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old[0])
        signal.signal(signal.SIGTERM, old[1])


def run(args: argparse.Namespace, targets: list[str]) -> dict:
    frames = build_frames()
    ns = Namespace(PORTS)
    fig: dict = {"targets": {}}
    with tempfile.TemporaryDirectory(prefix="bench-switch-") as tmp:
        try:
            ns.create()
            ns.enter()  # before any thread: gRPC's and rich's threads are created inside
            err.log(
                f"namespace {ns.name}: veth pairs "
                + ", ".join(f"bsw{p}/bpt{p}" for p in PORTS)
                + f"; the switch plays {LEAF.name} (id {LEAF.switch_id}): port {SERVER_PORT} server "
                f"{SERVER.ip}, ports {SPINE_PORTS[0]}, {SPINE_PORTS[1]} spines; load offered on port {IN_PORT}"
            )
            with Progress(
                TextColumn("{task.description:<60}"), BarColumn(), TimeElapsedColumn(), console=err, transient=False
            ) as progress:
                for target in targets:
                    try:
                        fig["targets"][target] = bench_target(target, ns, frames, args, Path(tmp), progress)
                    except SetupError as e:
                        raise SetupError(f"{target}: {e}") from None
        finally:
            with interrupts_deferred():
                ns.delete()
            if args.keep_logs:
                shutil.copytree(tmp, args.keep_logs, dirs_exist_ok=True)
    for target, prefix in (("softswitch", ""), ("bmv2", "bmv2_")):
        for path in PATHS:
            if target in fig["targets"]:
                fig[f"{prefix}{path}_pps"] = round(fig["targets"][target]["paths"][path]["pps"])
    if len(fig["targets"]) == 2:
        fig["ratio"] = {p: round(fig[f"{p}_pps"] / max(1, fig[f"bmv2_{p}_pps"]), 2) for p in PATHS}
    fig["config"] = {
        "seconds": args.seconds,
        "cpus": os.cpu_count(),
        "warmup_seconds": WARMUP,
        "offer_factor": OFFER_FACTOR,
        "loadavg_before": [round(x, 2) for x in args.loadavg],
        "hit_value_bytes": len(VALUE),
        "frame_bytes": {p: len(f) for p, f in frames.paths.items()},
    }
    if "softswitch" in fig["targets"] and "profile" in fig["targets"]["softswitch"]:
        fig["profile"] = fig["targets"]["softswitch"].pop("profile")  # None: py-spy missing or wrote nothing
    return fig


def check_targets(choice: str | None) -> list[str]:
    have_bmv2 = all(shutil.which(b) for b in (BMV2_SWITCH, BMV2_COMPILER))
    if choice == "softswitch":
        return ["softswitch"]
    targets = ["softswitch", "bmv2"] if choice in (None, "both") else ["bmv2"]
    if "bmv2" in targets:
        if not have_bmv2:
            if choice is None:
                err.log(f"[yellow]{BMV2_SWITCH} or {BMV2_COMPILER} not on PATH: softswitch only[/]")
                return ["softswitch"]
            raise SetupError(f"--target {choice} needs {BMV2_SWITCH} and {BMV2_COMPILER} on PATH")
        if not (BMV2_JSON.exists() and BMV2_P4INFO.exists()):
            raise SetupError(
                f"{BMV2_JSON.relative_to(REPO)} and {BMV2_P4INFO.relative_to(REPO)} missing: run make build"
            )
    return targets


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.switch", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="measured window per path (default 3)")
    ap.add_argument(
        "--target",
        choices=[*TARGETS, "both"],
        default=None,
        help="switch(es) to measure (default: both where BMv2 is installed, else softswitch)",
    )
    ap.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="sample softswitch with py-spy during one more hit run; raw stacks and summary to DIR",
    )
    ap.add_argument("--keep-logs", type=Path, metavar="DIR", help="copy the switches' logs here")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout instead of the lines")
    args = ap.parse_args(argv)
    if args.seconds <= 0:
        ap.error("--seconds must be > 0")
    args.loadavg = os.getloadavg()
    signal.signal(signal.SIGTERM, _sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started in the background (SIG_IGN)
    try:
        if os.geteuid() != 0:
            raise SetupError("run as root: the harness creates a network namespace and veth pairs")
        for tool in ("ip", "ethtool", "sysctl"):
            if shutil.which(tool) is None:
                raise SetupError(f"{tool} is not installed")
        fig = run(args, check_targets(args.target))
    except KeyboardInterrupt:
        err.print("[red]interrupted: switch stopped, namespace deleted[/]")
        return 130
    except (SetupError, OSError, EOFError, subprocess.SubprocessError) as e:  # EOFError: the sender died
        err.print(f"[red]bench-switch failed:[/] {e}")
        return 1
    except Exception as e:  # a P4Runtime error, say: the teardown ran, say what went wrong
        if type(e).__name__ != "P4RuntimeError":
            raise
        err.print(f"[red]bench-switch failed:[/] {e}")
        return 1
    lines = summary_lines(fig)
    if args.json:
        print(json.dumps(fig | {"summary": lines}))
    else:
        render(fig, Console(stderr=True, width=max(160, err.width)))
        for line in lines:
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
