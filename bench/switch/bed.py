"""One switch of the bed: started by harness.switch in the namespace with no pipeline, given its pipeline and
storage leaf sl0's entries over P4Runtime, the hit key cached and valid; and the sender process beside it.
``close`` stops them.  What the measurement asks of a bed (bench/switch/measure.py ``Target``): its paths, the
check of a path's frame, the counters a path must move; bench/switch/limit.py is the other bed."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.progress import Progress

from bench.switch.config import (
    BMV2_JSON,
    BMV2_P4INFO,
    BUCKETS,
    CLUSTER,
    IN_PORT,
    LEAF,
    PATHS,
    PORTS,
    SERVER_PORT,
    SLOT,
    VERSION_TAG,
    SetupError,
)
from bench.switch.frames import Frames
from bench.switch.namespace import Namespace
from bench.switch.probe import check_path, probe
from bench.switch.sender import Sender
from distcache import p4names
from harness.switch import DEVICE_ID, GRPC_ADDR, SwitchProcess, SwitchSpec, SwitchStartError
from p4rt.plan import plan

if TYPE_CHECKING:
    from p4rt.client import SwitchConnection


class SwitchBed:
    """One switch in the namespace, its P4Runtime session and the sender (not started); ``close`` stops them."""

    paths = PATHS
    # the dc_stats cell that must count every frame a path delivers (forwarding: none), and the cells that only
    # the path counting them may move
    counters: ClassVar[dict[str, str]] = {"hit": "READ_HIT", "miss": "READ_MISS"}
    watched = ("READ_HIT", "READ_MISS")

    def __init__(self, target: str, ns: Namespace, workdir: Path, progress: Progress) -> None:
        self.target, self.ns, self.workdir, self.progress = target, ns, workdir, progress
        soft = target == "softswitch"  # BMv2 logs nothing here: its log would cost it speed
        spec = SwitchSpec(
            target,
            [(p, f"bsw{p}") for p in PORTS],
            log_file=workdir / f"{target}.log" if soft else None,
            log_level="warning" if soft else None,
        )
        self.switch = SwitchProcess(spec, workdir / f"{target}.out")
        self.sw: SwitchConnection | None = None
        self.sender = Sender(f"bpt{IN_PORT}")

    @property
    def proc(self) -> subprocess.Popen | None:
        """The switch process (None before ``start``)."""
        return self.switch.proc

    def logs(self) -> str:
        return self.switch.logs(20)

    def start(self) -> None:
        """Start the switch (in the namespace the harness entered); return once it is the P4Runtime primary's.
        The sender is started by whoever offers load (``self.sender.start()``)."""
        self.switch.start()
        try:
            self.switch.wait_ready(30)
        except SwitchStartError as e:
            raise SetupError(str(e)) from None
        from p4rt.client import SwitchConnection

        self.sw = SwitchConnection(GRPC_ADDR, DEVICE_ID, name=self.target)
        self.sw.connect(timeout=30)

    @staticmethod
    def check(path: str, frames: Frames, out: list[tuple[int, bytes]]) -> int:
        """The port ``path``'s probe frame left on, once checked (bench/switch/probe.py)."""
        return check_path(path, frames, out)

    def configure(self, frames: Frames) -> None:
        """The pipeline, sl0's entries, and the hit key cached and valid."""
        assert self.sw is not None
        if self.target == "bmv2":
            from p4rt.p4info import load_p4info

            self.sw.set_pipeline(load_p4info(BMV2_P4INFO), BMV2_JSON.read_bytes())
        else:
            from softswitch.dataplane import PROGRAM

            self.sw.set_pipeline(PROGRAM.p4info(), b"")
        p = plan(CLUSTER, LEAF, BUCKETS)
        self.sw.set_default(p4names.SWITCH_CONFIG, p4names.SET_CONFIG, p.config)
        for e in p.defaults:
            self.sw.set_default(e.table, e.action, e.params_dict)
        for e in p.entries:
            self.sw.insert(e.table, e.match_dict, e.action, e.params_dict)
        self.sw.insert(
            p4names.CACHE_LOOKUP,
            {p4names.KEY_DC_KEY: int.from_bytes(CLUSTER.digest(frames.hit_key), "big")},
            p4names.CACHE_HIT,
            {"slot": SLOT, "version": VERSION_TAG},
        )
        for f, stat in zip(frames.fill, (p4names.Stat.INVALIDATE, p4names.Stat.UPDATE), strict=True):
            out = probe(f, in_port=SERVER_PORT)
            if self.stats().get(stat.name, 0) != 1 or len(out) != 1:
                raise SetupError(
                    f"{self.target}: filling the cache: {stat.name} not counted once "
                    f"({self.stats()}), {len(out)} frame(s) out"
                )

    def stats(self) -> dict[str, int]:
        """dc_stats cells by name."""
        assert self.sw is not None
        cells = self.sw.read_counter(p4names.DC_STATS)
        return {s.name: cells.get(int(s), (0, 0))[0] for s in p4names.Stat}

    def close(self) -> None:
        if self.sw is not None:
            with contextlib.suppress(Exception):
                self.sw.close()
            self.sw = None
        self.sender.close()
        self.switch.stop()  # its process group
