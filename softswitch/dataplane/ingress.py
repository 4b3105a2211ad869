"""DcIngress (p4src/include/pipeline.p4): the controls composed, and the program they declare.

v1model semantics kept on purpose: a parser error does not drop the packet
but reaches ingress as ``parser_error``; metadata starts zeroed; egress is
empty; the IPv4 checksum is recomputed on every IPv4 packet.

Every control is ``apply(state, hdr, meta)``, as every v1model control takes
``(hdr, meta, standard_metadata)``: ``meta`` (:class:`Meta`) holds the
standard metadata too, the time included (``ingress_global_timestamp``), and
``state`` stands for the tables, registers, counters and meters the P4
controls declare.
"""

from __future__ import annotations

from distcache import p4names
from distcache.cluster import Role
from softswitch.dataplane import (
    cache,
    coherence,
    config,
    detector,
    forwarding,
    liveness,
    probe,
    routing,
    shared,
    telemetry,
    validation,
)
from softswitch.dataplane.header import UDP_CSUM, Meta
from softswitch.dataplane.parser import deparse, parse
from softswitch.program import Action, ControllerHeader, Program
from softswitch.state import SwitchState

PROGRAM = Program(
    "distcache",
    actions=(
        Action(p4names.NO_ACTION),
        *config.ACTIONS,
        *liveness.ACTIONS,
        *validation.ACTIONS,
        *cache.ACTIONS,
        *detector.ACTIONS,
        *routing.ACTIONS,
        *forwarding.ACTIONS,
    ),
    tables=(
        *config.TABLES,
        *liveness.TABLES,
        *validation.TABLES,
        *cache.TABLES,
        *detector.TABLES,
        *routing.TABLES,
        *forwarding.TABLES,
    ),
    registers=(*shared.REGISTERS, *liveness.REGISTERS, *coherence.REGISTERS, *detector.REGISTERS, *telemetry.REGISTERS),
    counters=(*shared.COUNTERS, *cache.COUNTERS, *probe.COUNTERS, *liveness.COUNTERS),
    digests=(*detector.DIGESTS, *liveness.DIGESTS),
    meters=cache.METERS,
    controller_headers=(ControllerHeader(p4names.PACKET_OUT, p4names.PACKET_OUT_FIELDS),),
    cpu_port=p4names.CPU_PORT,
    generator_ports=frozenset({p4names.PROBE_PORT}),
)

ROLE_SPINE, ROLE_STORAGE_LEAF, ROLE_CLIENT_LEAF = int(Role.SPINE), int(Role.STORAGE_LEAF), int(Role.CLIENT_LEAF)


class DistCachePipeline:
    """Parser, DcIngress, checksum and deparser (DcEgress is empty)."""

    program: Program = PROGRAM

    def process(self, state: SwitchState, ingress_port: int, packet: bytes, now_us: int) -> list[tuple[int, bytes]]:
        h, perr = parse(packet, ingress_port)
        m = Meta(
            ingress_port=ingress_port,
            packet_length=len(packet),
            parser_error=perr,
            ingress_global_timestamp=now_us & 0xFFFFFFFFFFFF,
        )
        config.apply(state, h, m)
        liveness.apply(state, h, m)  # heard: every packet from a spine, before any drop
        validation.apply(state, h, m)
        if m.dropped:
            return []
        if h.dc is not None:
            h.udp[UDP_CSUM] = 0  # any switch may rewrite a DistCache message
            probe.apply(state, h, m)
            if m.role == ROLE_SPINE or m.role == ROLE_STORAGE_LEAF:
                cache.apply(state, h, m)
                coherence.apply(state, h, m)
                detector.apply(state, h, m)
            telemetry.apply(state, h, m)
            if m.role == ROLE_CLIENT_LEAF:
                routing.apply(state, h, m)
        if m.consumed:
            return []
        forwarding.apply(state, h, m)
        if m.dropped:
            return []
        return [(m.egress_spec, deparse(h))]
