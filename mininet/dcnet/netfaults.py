"""Packet faults on switch ports: loss, loss bursts, duplicates, reordering and late copies.

Why this exists: the kernel here has no ``sch_netem`` (nor ``sch_fq``), and softswitch's
``--egress-loss`` cannot reach BMv2.  ``tools/faultinject/faultinject.bpf.c`` is a tc ``clsact``
program that faults the frames leaving (or entering) an interface, whichever process sends them;
``make build`` compiles it to ``build/faultinject.bpf.o``.  This module loads one instance of it per
interface with ``bpftool`` (pinned under ``/sys/fs/bpf/dcfaults-*``, so its maps can be set and read
at run time), attaches it with ``tc``, configures it, reads its counters and removes everything
again::

    with PacketFaults(["s1-eth1", "s1-eth2"]) as faults:      # egress of two switch ports
        faults.configure(FaultConfig(match="coherence", drop=0.05, duplicate=0.02, reorder=0.02))
        faults.start_burst(5)                                   # the next 5 matching frames are lost
        ...
        print(faults.counters())                                # effects, summed over the ports

Switches read their ports with packet sockets, which see an arriving frame *before* the ingress
hook: to fault what a switch receives, attach to the egress of the other end of the link.  They
also see every frame transmitted on their port by another socket, and BMv2 takes such frames for
input: so on egress, copies (duplicates, and the frames that overtake held ones) are delivered
straight into the ingress of the interface's veth peer when it is in the same namespace (switch to
switch links), never out of the switch's port.  On a switch port whose peer is a Mininet host,
attach to the host's end instead (``Port(intf, host.pid)``, egress and/or ingress): copies made
there are seen by no switch.

Counters count effects, not attempts (a frame counts as duplicated only once its copy was handed
to the device).  With ``seed`` set, the faults applied to the n-th matching frame of an interface
and direction depend on the seed alone, so a schedule replays exactly when the same frames cross
the interface in the same order; with ``seed=0`` the kernel's PRNG decides.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import struct
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from distcache.wire import COHERENCE_OPS, DC_PORT
from harness import bpffs
from harness.bpffs import BPFFS

REPO = Path(__file__).resolve().parents[2]
OBJECT = REPO / "build" / "faultinject.bpf.o"
PIN_PREFIX = "dcfaults-"
NETNS_PREFIX = "dcfault-"  # private namespaces of tests/e2e/test_netfaults.py
FILTER_PREF = 49152  # tc priority of our filters: what lets cleanup tell them from others
PROGRAM_PREFIX = "dc_fault_"
DIRECTIONS = ("ingress", "egress")  # index into every map of the program (enum dc_dir)
MATCHES = ("coherence", "distcache", "ipv4")
STATS = (
    "matched",
    "dropped",
    "burst_dropped",
    "bursts",
    "duplicated",
    "held",
    "reordered",
    "delayed",
    "replayed",
    "errors",
)  # enum dc_stat, in order
CONFIG = struct.Struct("<4I8I6Q2IQ2I")  # struct dc_cfg
CTL = struct.Struct("<iI")  # struct dc_ctl
HOLD_HEAD = struct.Struct("<4I")  # struct dc_hold: state, remaining, len, replay
HOLD_FULL = 2
COHERENCE_CODES = frozenset(int(op) for op in COHERENCE_OPS) | frozenset(int(op.reply()) for op in COHERENCE_OPS)


class FaultInjectorError(RuntimeError):
    """The injector cannot run here; the message is one line saying what to install or fix."""


@dataclass(frozen=True)
class FaultConfig:
    """What to do to the matching frames of one interface and direction.

    ``match``: ``coherence`` (DistCache INVALIDATE, UPDATE and their ACKs), ``distcache`` (any UDP to
    or from ``port``) or ``ipv4`` (every IPv4 frame).  Probabilities are per matching frame, tried in
    this order: a loss burst under way, a new burst (``burst`` starts one that drops ``burst_len``
    frames, this one included), ``drop``, ``reorder`` (held back until ``reorder_distance`` later
    matching frames have overtaken it, or after ``hold_max`` seconds behind any IPv4 frame),
    ``replay`` (sent now and again later, the same way), ``duplicate`` (a second copy at once).
    """

    match: str = "coherence"
    drop: float = 0.0
    burst: float = 0.0
    burst_len: int = 0
    duplicate: float = 0.0
    reorder: float = 0.0
    reorder_distance: int = 1
    replay: float = 0.0
    hold_max: float = 0.05
    seed: int = 0
    port: int = DC_PORT
    enabled: bool = True

    def __post_init__(self) -> None:
        if self.match not in MATCHES:
            raise ValueError(f"match must be one of {', '.join(MATCHES)}, not {self.match!r}")
        for name in ("drop", "burst", "duplicate", "reorder", "replay"):
            p = getattr(self, name)
            if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} is a probability in [0, 1], not {p!r}")
        for name, hi in (
            ("burst_len", 1 << 31),
            ("reorder_distance", 1 << 31),
            ("port", 65535),
            ("seed", (1 << 64) - 1),
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= hi:
                raise ValueError(f"{name} must be an integer in [0, {hi}], not {v!r}")
        if self.burst and not self.burst_len:
            raise ValueError("burst > 0 needs burst_len >= 1")
        if isinstance(self.hold_max, bool) or not isinstance(self.hold_max, int | float) or self.hold_max < 0:
            raise ValueError(f"hold_max is seconds >= 0, not {self.hold_max!r}")

    def pack(self, copy_ifindex: int = 0) -> bytes:
        """The ``struct dc_cfg`` bytes the program reads (probabilities as thresholds out of 2^32).

        ``copy_ifindex``: where egress copies go (the veth peer's ingress; 0: out of the interface).
        """
        ops = [0] * 8
        for code in COHERENCE_CODES if self.match == "coherence" else ():
            ops[code >> 5] |= 1 << (code & 31)

        def threshold(p: float) -> int:
            return min(1 << 32, round(p * (1 << 32)))

        return CONFIG.pack(
            int(self.enabled),
            0 if self.match == "ipv4" else 1,
            self.port,
            int(self.match == "coherence"),
            *ops,
            self.seed,
            threshold(self.drop),
            threshold(self.burst),
            threshold(self.duplicate),
            threshold(self.reorder),
            threshold(self.replay),
            self.burst_len,
            self.reorder_distance,
            round(self.hold_max * 1e9),
            copy_ifindex,
            0,
        )


@dataclass
class FaultCounters:
    """Effects on the matching frames (summed over whatever was asked for).

    ``held_now``: frames held back and not sent yet (lost if the injector is removed now).
    """

    matched: int = 0
    dropped: int = 0
    burst_dropped: int = 0
    bursts: int = 0
    duplicated: int = 0
    held: int = 0
    reordered: int = 0
    delayed: int = 0
    replayed: int = 0
    errors: int = 0
    held_now: int = 0

    @property
    def lost(self) -> int:
        """Frames that never left: dropped, in a burst, or still held."""
        return self.dropped + self.burst_dropped + self.held_now

    def __add__(self, other: FaultCounters) -> FaultCounters:
        return FaultCounters(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


@dataclass(frozen=True)
class Port:
    """An interface, in the root namespace (``netns=None``), a named one (``ip netns``) or a process's (pid).

    Mininet hosts live in unnamed namespaces: pass ``host.pid``.  ``nsenter`` (not ``ip netns exec``,
    which remounts /sys) keeps /sys/fs/bpf in reach of tc.
    """

    iface: str
    netns: str | int | None = None

    @property
    def prefix(self) -> list[str]:
        if self.netns is None:
            return []
        if isinstance(self.netns, int):
            return ["nsenter", "-t", str(self.netns), "-n"]
        return ["nsenter", f"--net=/run/netns/{self.netns}"]

    @property
    def pin_dir(self) -> Path:
        ns = "root" if self.netns is None else f"pid{self.netns}" if isinstance(self.netns, int) else self.netns
        return BPFFS / f"{PIN_PREFIX}{ns}-{self.iface}"

    def __str__(self) -> str:
        return self.iface if self.netns is None else f"{self.iface}@{self.netns}"


@dataclass
class _Attached:
    port: Port
    directions: tuple[str, ...]
    created_qdisc: bool = False
    filters: list[str] = field(default_factory=list)
    copy_ifindex: int = 0  # the veth peer in the same namespace, where egress copies go


def _tool(name: str, package: str) -> str:
    path = bpffs.sbin_tool(name)
    if not path:
        raise FaultInjectorError(f"{name} not found: apt-get install {package} (make deps does)")
    return path


def _run(cmd: Sequence[str], what: str) -> str:
    """Run a command; its stdout, or FaultInjectorError with ``what`` and its last error line."""
    res = subprocess.run(list(cmd), capture_output=True, text=True, check=False)
    if res.returncode != 0:
        lines = [x.strip() for x in (res.stderr + res.stdout).splitlines() if x.strip()]
        reason = next((x for x in reversed(lines) if "rror" in x), lines[-1] if lines else f"exit {res.returncode}")
        raise FaultInjectorError(f"{what}: {reason}")
    return res.stdout


def _veth_peer_here(port: Port) -> int:
    """ifindex of ``port``'s veth peer if that is in the same namespace, else 0."""
    ip = [*port.prefix, "ip", "-j", "-d", "link", "show", "dev"]
    try:
        (info,) = json.loads(_run([*ip, port.iface], f"no interface {port}"))
        if info.get("linkinfo", {}).get("info_kind") != "veth" or "link_netnsid" in info or not info.get("link"):
            return 0
        (peer,) = json.loads(_run([*ip, info["link"]], f"no veth peer of {port}"))
        return int(peer["ifindex"])
    except (ValueError, KeyError, TypeError):
        return 0


def _hex(data: bytes) -> list[str]:
    return ["hex", *(f"{b:02x}" for b in data)]


def _key(direction: str) -> list[str]:
    return ["key", *_hex(struct.pack("<I", DIRECTIONS.index(direction)))]


class PacketFaults:
    """The fault injector on a set of interfaces; a context manager that always cleans up.

    ``ports``: interface names (root namespace) or :class:`Port`.  ``directions``: ``egress``
    (frames the interface sends; the default) and/or ``ingress``.  Every interface starts with
    faults disabled; :meth:`configure` sets them.
    """

    def __init__(
        self,
        ports: Iterable[str | Port],
        directions: Sequence[str] = ("egress",),
        obj: Path = OBJECT,
        copies_to_peer: bool = True,
    ) -> None:
        self.ports = [p if isinstance(p, Port) else Port(p) for p in ports]
        if not self.ports:
            raise ValueError("no interface given")
        if len(set(self.ports)) != len(self.ports):
            raise ValueError("an interface is listed twice")
        bad = [d for d in directions if d not in DIRECTIONS]
        if bad or not directions:
            raise ValueError(f"directions are 'ingress' and/or 'egress', not {list(directions)!r}")
        self.directions = tuple(dict.fromkeys(directions))
        self.obj = Path(obj)
        self.copies_to_peer = copies_to_peer
        self._attached: list[_Attached] = []
        self._bpftool = ""
        self._tc = ""

    def __enter__(self) -> PacketFaults:
        self.attach()
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    # ---- attach / detach -------------------------------------------------------------------------------------
    def _preflight(self) -> None:
        if os.geteuid() != 0:
            raise FaultInjectorError("the packet fault injector needs root (tc and BPF)")
        self._tc = _tool("tc", "iproute2")
        self._bpftool = _tool("bpftool", "bpftool")
        if any(p.netns is not None for p in self.ports):
            _tool("nsenter", "util-linux")
        if not self.obj.is_file():
            raise FaultInjectorError(
                f"{self.obj} is missing: run make build (it needs clang: apt-get install clang llvm libbpf-dev)"
            )
        try:
            bpffs.ensure_mounted()
        except bpffs.BpffsError as e:
            raise FaultInjectorError(str(e)) from None

    def attach(self) -> None:
        """Load and attach on every port, all faults off; on any failure, remove what was done and raise."""
        if self._attached:
            return
        self._preflight()
        try:
            for port in self.ports:
                self._attach_one(port)
        except BaseException:
            self.detach()
            raise

    def _attach_one(self, port: Port) -> None:
        pins = port.pin_dir
        if pins.exists():
            raise FaultInjectorError(
                f"{pins} exists: another injector is on {port} (a killed run? python -m dcnet.cleanup removes it)"
            )
        att = _Attached(port, self.directions)
        self._attached.append(att)  # from here on, detach() undoes whatever part got done
        if self.copies_to_peer:
            att.copy_ifindex = _veth_peer_here(port)
        _run(
            [self._bpftool, "prog", "loadall", str(self.obj), str(pins), "type", "classifier", "pinmaps", str(pins)],
            f"cannot load {self.obj.name} for {port} (a kernel refusal, or a broken object: make build)",
        )
        tc = [*port.prefix, self._tc]
        res = subprocess.run([*tc, "qdisc", "add", "dev", port.iface, "clsact"], capture_output=True, text=True)
        if res.returncode == 0:
            att.created_qdisc = True
        elif "xclusivity" not in res.stderr and "File exists" not in res.stderr:  # exists already: share it
            reason = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"
            if "Cannot find device" in reason:
                raise FaultInjectorError(f"no interface {port}")
            raise FaultInjectorError(
                f"cannot add a clsact qdisc on {port} (kernel needs CONFIG_NET_SCH_INGRESS): {reason}"
            )
        for d in self.directions:
            _run(
                [
                    *tc,
                    "filter",
                    "add",
                    "dev",
                    port.iface,
                    d,
                    "pref",
                    str(FILTER_PREF),
                    "handle",
                    "1",
                    "bpf",
                    "direct-action",
                    "object-pinned",
                    str(pins / f"{PROGRAM_PREFIX}{d}"),
                ],
                f"cannot attach the fault injector to {d} of {port}",
            )
            att.filters.append(d)

    def detach(self) -> None:
        """Remove our filters, the clsact qdiscs we added and the pinned programs and maps; never raises.

        A frame still held back is lost with the program (it shows in ``held_now`` before this).
        """
        while self._attached:
            att = self._attached.pop()
            tc = [*att.port.prefix, self._tc or "tc"]
            for d in att.filters:
                subprocess.run(
                    [*tc, "filter", "del", "dev", att.port.iface, d, "pref", str(FILTER_PREF)],
                    capture_output=True,
                    check=False,
                )
            if att.created_qdisc:
                subprocess.run([*tc, "qdisc", "del", "dev", att.port.iface, "clsact"], capture_output=True, check=False)
            shutil.rmtree(att.port.pin_dir, ignore_errors=True)

    # ---- run time ----------------------------------------------------------------------------------------
    def _select(
        self, ports: Iterable[str | Port] | None, directions: Sequence[str] | None
    ) -> Iterator[tuple[Port, str]]:
        if not self._attached:
            raise FaultInjectorError("the fault injector is not attached")
        chosen = self.ports if ports is None else [p if isinstance(p, Port) else Port(p) for p in ports]
        for p in chosen:
            if p not in self.ports:
                raise ValueError(f"{p} is not one of this injector's interfaces")
        for d in directions or self.directions:
            if d not in self.directions:
                raise ValueError(f"{d} is not attached (directions: {', '.join(self.directions)})")
        for p in chosen:
            for d in directions or self.directions:
                yield p, d

    def _update(self, port: Port, mapname: str, direction: str, value: bytes) -> None:
        _run(
            [
                self._bpftool,
                "map",
                "update",
                "pinned",
                str(port.pin_dir / mapname),
                *_key(direction),
                "value",
                *_hex(value),
            ],
            f"cannot update {mapname} on {port}",
        )

    def _lookup(self, port: Port, mapname: str, direction: str) -> bytes:
        out = _run(
            [self._bpftool, "-j", "map", "lookup", "pinned", str(port.pin_dir / mapname), *_key(direction)],
            f"cannot read {mapname} on {port}",
        )
        return bytes(int(b, 16) for b in json.loads(out)["value"])

    def configure(
        self, cfg: FaultConfig, ports: Iterable[str | Port] | None = None, directions: Sequence[str] | None = None
    ) -> None:
        """Set the faults of the given interfaces and directions (default: all); takes effect at once."""
        peers = {a.port: a.copy_ifindex for a in self._attached}
        for port, d in self._select(ports, directions):
            self._update(port, "dc_cfg", d, cfg.pack(peers[port] if d == "egress" else 0))

    def copies_go_to_peer(self, port: str | Port) -> bool:
        """Whether egress copies on ``port`` go into its veth peer (else out of the port itself)."""
        want = port if isinstance(port, Port) else Port(port)
        return any(a.port == want and a.copy_ifindex for a in self._attached)

    def start_burst(
        self, frames: int, ports: Iterable[str | Port] | None = None, directions: Sequence[str] | None = None
    ) -> None:
        """Drop the next ``frames`` matching frames (of each interface and direction given) from now on."""
        if isinstance(frames, bool) or not isinstance(frames, int) or not 0 <= frames < 1 << 31:
            raise ValueError(f"a burst is a number of frames >= 0, not {frames!r}")
        for port, d in self._select(ports, directions):
            self._update(port, "dc_ctl", d, CTL.pack(frames, 1 if frames else 0))

    def counters(
        self, ports: Iterable[str | Port] | None = None, directions: Sequence[str] | None = None
    ) -> FaultCounters:
        """Effects so far, summed over the given interfaces and directions (default: all)."""
        total = FaultCounters()
        for port, d in self._select(ports, directions):
            total = total + self._counters_of(port, d)
        return total

    def per_port(self) -> dict[tuple[str, str], FaultCounters]:
        """Effects so far per (interface, direction)."""
        return {(str(p), d): self._counters_of(p, d) for p, d in self._select(None, None)}

    def _counters_of(self, port: Port, direction: str) -> FaultCounters:
        raw = self._lookup(port, "dc_stats", direction)
        values = struct.unpack_from(f"<{len(STATS)}Q", raw)
        state, _remaining, _len, replay = HOLD_HEAD.unpack_from(self._lookup(port, "dc_hold", direction))
        return FaultCounters(*values, held_now=int(state == HOLD_FULL and not replay))

    def reset_counters(self) -> None:
        """Zero every counter (and with them the index a seeded schedule counts frames by)."""
        zero = bytes(8 * len(STATS))
        for port, d in self._select(None, None):
            self._update(port, "dc_stats", d, zero)


def remove_leftovers() -> list[str]:
    """What a killed run left: our filters (root namespace), their clsact qdiscs if now empty, our pins.

    Interfaces in Mininet hosts and test namespaces vanish with them; the dcfault- namespaces and
    root-namespace links of tests/e2e/test_netfaults.py are deleted here.  Returns what was removed.
    """
    removed: list[str] = []
    tc = bpffs.sbin_tool("tc") or "tc"
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout.split()
    for ns in (x for x in names if x.startswith(NETNS_PREFIX)):
        if subprocess.run(["ip", "netns", "delete", ns], capture_output=True, check=False).returncode == 0:
            removed.append(f"netns {ns}")
    res = subprocess.run([tc, "-j", "qdisc", "show"], capture_output=True, text=True, check=False)
    with contextlib.suppress(ValueError):
        for dev in {q.get("dev") for q in json.loads(res.stdout or "[]") if q.get("kind") == "clsact"}:
            ours = 0
            for d in DIRECTIONS:
                out = subprocess.run(
                    [tc, "-j", "filter", "show", "dev", dev, d], capture_output=True, text=True, check=False
                ).stdout
                mine = [
                    f
                    for f in json.loads(out or "[]")
                    if f.get("pref") == FILTER_PREF
                    and str(f.get("options", {}).get("bpf_name", "")).startswith(PROGRAM_PREFIX)
                ]
                if mine:
                    subprocess.run(
                        [tc, "filter", "del", "dev", dev, d, "pref", str(FILTER_PREF)], capture_output=True, check=False
                    )
                    removed.append(f"{d} filter on {dev}")
                    ours += 1
            rest = [
                json.loads(
                    subprocess.run(
                        [tc, "-j", "filter", "show", "dev", dev, d], capture_output=True, text=True, check=False
                    ).stdout
                    or "[]"
                )
                for d in DIRECTIONS
            ]
            if ours and not any(rest):
                subprocess.run([tc, "qdisc", "del", "dev", dev, "clsact"], capture_output=True, check=False)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False).stdout
    for name in {x.split(":")[1].strip().split("@")[0] for x in links.splitlines() if ":" in x}:
        if (
            name.startswith(NETNS_PREFIX)
            and subprocess.run(["ip", "link", "del", name], capture_output=True, check=False).returncode == 0
        ):
            removed.append(f"link {name}")
    if BPFFS.is_dir():
        for pins in BPFFS.glob(f"{PIN_PREFIX}*"):
            shutil.rmtree(pins, ignore_errors=True)
            removed.append(str(pins))
    return removed
