"""One softswitch process: ports, pipeline, P4Runtime server, packet loop.

:class:`SoftSwitch` ties the parts together the way ``simple_switch_grpc``
does: packets arriving before a pipeline config is committed are dropped;
after that each frame runs through the pipeline under the state lock and the
frames it returns are sent.  The pipeline may fail on a packet; that drops
the packet, is counted and logged (rate-limited), and never stops the switch.

The packet loop runs in the calling thread (``run``); gRPC runs on its own
thread pool.  ``stop`` may be called from a signal handler or another thread.
A controller's PacketOut (for a program with a CPU port and a packet_out
header) is queued by the gRPC thread and run by the packet loop, entering the
pipeline at the CPU port with its metadata ahead of the frame, as BMv2's
``--cpu-port`` does.
"""

from __future__ import annotations

import importlib
import logging
import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from finsy.proto import p4r

from softswitch.ports import PortSet
from softswitch.server import DEFAULT_GRPC_ADDR, P4RuntimeError, P4RuntimeServer, PipelineConfig, packet_out_frame
from softswitch.state import Pipeline, SwitchState

log = logging.getLogger("softswitch")

PIPELINES = {"distcache": "softswitch.dataplane:DistCachePipeline"}
"""Short names accepted by ``--pipeline`` (anything else is ``module:attribute``)."""


def load_pipeline(spec: str) -> Pipeline:
    """The pipeline named by ``spec``: a short name or ``module:attribute``.

    A class (or any callable without ``process``) is called with no
    arguments; an object with ``program`` and ``process`` is used as is.
    Imported lazily so the runtime works before softswitch.dataplane is imported.
    """
    target = PIPELINES.get(spec, spec)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"pipeline {spec!r}: expected one of {sorted(PIPELINES)} or module:attribute")
    obj = getattr(importlib.import_module(module_name), attr)
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "process")):
        obj = obj()
    if not hasattr(obj, "program") or not callable(getattr(obj, "process", None)):
        raise TypeError(f"pipeline {spec!r} has no 'program' and 'process(state, port, packet, now_us)'")
    return obj


@dataclass
class RuntimeStats:
    """Packet counts of the runtime itself (the pipeline keeps its own in P4 counters)."""

    rx: int = 0
    tx: int = 0
    dropped_no_config: int = 0
    dropped_pipeline_error: int = 0
    dropped_by_pipeline: int = 0
    tx_failed: int = 0
    packet_out: int = 0

    def summary(self) -> str:
        return " ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


class _RateLimitedLog:
    """Log an error at most once per ``interval`` seconds, saying how many were suppressed."""

    def __init__(self, logger: logging.Logger, interval: float = 5.0) -> None:
        self._log = logger
        self._interval = interval
        self._next = 0.0
        self._suppressed = 0

    def exception(self, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now < self._next:
            self._suppressed += 1
            return
        extra = f" ({self._suppressed} similar errors suppressed)" if self._suppressed else ""
        self._log.exception(msg + extra, *args)
        self._suppressed = 0
        self._next = now + self._interval


class SoftSwitch:
    """A running softswitch: state, P4Runtime server, ports and the packet loop."""

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        device_id: int = 1,
        grpc_addr: str = DEFAULT_GRPC_ADDR,
        ports: Mapping[int, str] | None = None,
        pcap_dir: str | Path | None = None,
        egress_loss: float = 0.0,
    ) -> None:
        self.pipeline = pipeline
        self.device_id = device_id
        self.state = SwitchState(pipeline.program)
        self.server = P4RuntimeServer(self.state, device_id, grpc_addr)
        self.server.service.on_commit = self._on_commit
        # packet-outs for the packet loop
        self._injected: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        if pipeline.program.cpu_port is not None:
            self.server.service.packet_out_handler = self._on_packet_out
        self.ports = PortSet(ports or {}, pcap_dir, egress_loss)
        self.stats = RuntimeStats()
        self._errors = _RateLimitedLog(log)
        self._stop = threading.Event()
        self._t0_ns = time.monotonic_ns()
        self._realtime_ns = time.time_ns() - time.monotonic_ns()  # CLOCK_REALTIME - CLOCK_MONOTONIC
        self._last_us = 0  # the last pipeline timestamp: they never go backwards
        self._started = False
        self._closed = False

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Open the ports and start the gRPC server (no packet is processed until ``run``)."""
        self.ports.open()
        try:
            self.server.start()
        except Exception:
            self.ports.close()
            raise
        self._t0_ns = time.monotonic_ns()
        self._realtime_ns = time.time_ns() - time.monotonic_ns()
        self._last_us = 0
        self._started = True

    def run(self) -> None:
        """Receive, process and send until :meth:`stop`.

        A frame is stamped with the time the kernel received it (softswitch.ports), but one of a generator
        port (a leaf's probe port) with the time the pipeline takes it, after the rest of its batch, as a
        packet-out is (:meth:`run_packet_outs`): the probe source is the switch's own host, and a hardware
        packet generator's probe enters the pipeline as it leaves for its spine.  Stamped on arrival, a
        probe the loop reached 20-60 ms late (a busy host: 2 % of a loaded leaf's probes waited over 15 ms)
        started its ask before it left, so the leaf's own wait counted against the spine; stamped when
        taken but before the frames that came with it, it moved the clock past them (stamps never go
        back), so a spine's answer that came in time during the same wait read as late.  Either made a
        busy leaf take a healthy spine for dead in quiet loaded runs."""
        stopped, poll, handle, stamp = self._stop.is_set, self.ports.poll, self.handle_packet, self.stamp
        generated, time_ns = self.pipeline.program.generator_ports, time.time_ns
        while not stopped():
            later: list[tuple[int, bytes]] = []
            for port, frame, received_ns in poll(1.0):
                if port in generated:
                    later.append((port, frame))
                    continue
                handle(port, frame, stamp(received_ns))
                if stopped():
                    break
            for port, frame in later:
                handle(port, frame, stamp(time_ns()))
            if not self._injected.empty():  # (checked here: most wake-ups bring no packet-out)
                self.run_packet_outs()

    def run_packet_outs(self) -> None:
        """Process the packet-outs queued so far, at the CPU port (the packet loop's thread).

        Each is stamped when it enters the pipeline, not when the controller's message came: a CPU port
        is no wire, and what the program does with a packet-out is send it now -- a probe's ask
        (control/probe.p4) starts when the probe leaves for its spine.  Stamped on arrival, a probe the
        loop reached 30 ms late (a busy host) counted those 30 ms against the spine, which had not seen it
        yet: a storage leaf's agent's probes made false deaths of both spines at once."""
        cpu_port = self.pipeline.program.cpu_port
        while cpu_port is not None and not self._injected.empty():  # this thread alone takes from the queue
            frame = self._injected.get_nowait()
            self.stats.packet_out += 1
            self.handle_packet(cpu_port, frame)

    def _on_packet_out(self, packet: p4r.PacketOut) -> None:
        """A primary controller's PacketOut (gRPC thread): queued for the packet loop, which sends it
        through the pipeline (nothing else touches the ports from this thread)."""
        cfg = self.server.service.committed
        if cfg is None:
            raise P4RuntimeError("no forwarding pipeline config set", "FAILED_PRECONDITION")
        self._injected.put(packet_out_frame(self.state.program, cfg, packet))
        self.ports.wakeup()

    def stop(self) -> None:
        """Ask ``run`` to return (safe from signal handlers and other threads)."""
        self._stop.set()
        self.ports.wakeup()

    def close(self) -> None:
        """Stop the server, close the ports and log the runtime's counters (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._started:
            self.server.stop(grace=0.5)
        self.ports.close()
        log.info("softswitch device %d exiting: %s", self.device_id, self.stats.summary())
        if self.ports.ports:
            log.info("ports: %s", self.ports.summary())

    def __enter__(self) -> SoftSwitch:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- packets ------------------------------------------------------------------------------
    def now_us(self) -> int:
        """Microseconds since the switch started (the pipeline's timestamp)."""
        return (time.monotonic_ns() - self._t0_ns) // 1000

    def stamp(self, received_ns: int) -> int:
        """The pipeline timestamp of a frame the kernel received at ``received_ns`` (CLOCK_REALTIME): when it
        reached the switch, in microseconds since the switch started, like a MAC's ingress timestamp (see
        softswitch.ports) -- never in the future, and never before the last one (frames of different ports
        are processed in batches, not in arrival order; liveness.p4 compares times of different ports)."""
        us = (received_ns - self._realtime_ns - self._t0_ns) // 1000
        self._last_us = min(max(us, self._last_us), (time.monotonic_ns() - self._t0_ns) // 1000)  # now_us()
        return self._last_us

    def process_packet(self, ingress_port: int, packet: bytes, now_us: int | None = None) -> list[tuple[int, bytes]]:
        """Run one frame through the pipeline and return what to send (no I/O).

        The entry point for tests and for packet-out injection; drops (returns
        []) before a config is committed or if the pipeline raises.  ``now_us``:
        its timestamp (:meth:`stamp`); none: it arrives now.
        """
        now = self.stamp(time.time_ns()) if now_us is None else now_us
        stats = self.stats
        stats.rx += 1
        if self.server.service.committed is None:
            stats.dropped_no_config += 1
            return []
        state = self.state
        try:
            with state.lock:
                try:
                    out = self.pipeline.process(state, ingress_port, packet, now)
                    result = [(int(p), bytes(f)) for p, f in out]
                finally:
                    digests = state.pending_digests
                    if digests:  # (most packets emit none: no new list for them)
                        state.pending_digests = []
        except Exception:  # noqa: BLE001 - a program's error drops the packet, never the switch
            # a failed packet's digests go with it (empty list kept for the next packet)
            stats.dropped_pipeline_error += 1
            self._errors.exception(
                "pipeline failed on a %d-byte packet from port %d; dropped", len(packet), ingress_port
            )
            return []
        if digests:  # off the packet path: the digest engine batches them on its own thread
            self.server.service.digests.submit(digests)
        if not result:
            stats.dropped_by_pipeline += 1
        return result

    def handle_packet(self, ingress_port: int, packet: bytes, now_us: int | None = None) -> None:
        """Process a frame and transmit the results on the switch's ports."""
        out = self.process_packet(ingress_port, packet, now_us)
        if out:
            send, stats = self.ports.send, self.stats
            for port, frame in out:
                if send(port, frame):
                    stats.tx += 1
                else:
                    stats.tx_failed += 1

    def _on_commit(self, cfg: PipelineConfig, reconciled: bool) -> None:
        log.info(
            "device %d: pipeline %r committed (cookie=%s, %s)",
            self.device_id,
            self.state.program.name,
            cfg.cookie,
            "state kept" if reconciled else "state reset",
        )
