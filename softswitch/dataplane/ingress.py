"""DcIngress (p4src/distcache.p4): the controls composed, and the program they declare.

v1model semantics kept on purpose: a parser error does not drop the packet
but reaches ingress as ``parser_error``; metadata starts zeroed; egress is
empty; the IPv4 checksum is recomputed on every IPv4 packet.
"""

from __future__ import annotations

from distcache import p4names as n
from distcache.cluster import Role
from softswitch.dataplane import (
    cache,
    coherence,
    config,
    detector,
    forwarding,
    routing,
    shared,
    telemetry,
    validation,
)
from softswitch.dataplane.header import UDP_CSUM, Meta
from softswitch.dataplane.parser import deparse, parse
from softswitch.program import Action, Program
from softswitch.state import SwitchState

PROGRAM = Program(
    "distcache",
    actions=(Action(n.NO_ACTION), *config.ACTIONS, *validation.ACTIONS, *cache.ACTIONS, *detector.ACTIONS,
             *routing.ACTIONS, *forwarding.ACTIONS),
    tables=(*config.TABLES, *validation.TABLES, *cache.TABLES, *detector.TABLES, *routing.TABLES, *forwarding.TABLES),
    registers=(*shared.REGISTERS, *coherence.REGISTERS, *detector.REGISTERS, *telemetry.REGISTERS),
    counters=(*shared.COUNTERS, *cache.COUNTERS),
    digests=detector.DIGESTS,
    meters=cache.METERS,
)

ROLE_SPINE, ROLE_STORAGE_LEAF, ROLE_CLIENT_LEAF = int(Role.SPINE), int(Role.STORAGE_LEAF), int(Role.CLIENT_LEAF)


class DistCachePipeline:
    """Parser, DcIngress, checksum and deparser (DcEgress is empty)."""

    program: Program = PROGRAM

    def process(self, state: SwitchState, ingress_port: int, packet: bytes, now_us: int) -> list[tuple[int, bytes]]:
        h, perr = parse(packet)
        m = Meta(ingress_port=ingress_port, packet_length=len(packet), parser_error=perr)
        config.apply(state, m, now_us)
        validation.apply(state, h, m)
        if m.dropped:
            return []
        if h.dc is not None:
            h.udp[UDP_CSUM] = 0  # any switch may rewrite a DistCache message
            if m.role == ROLE_SPINE or m.role == ROLE_STORAGE_LEAF:
                cache.apply(state, h, m, now_us)
                coherence.apply(state, h, m)
                detector.apply(state, h, m, now_us)
            telemetry.apply(state, h, m)
            if m.role == ROLE_CLIENT_LEAF:
                routing.apply(state, h, m)
        forwarding.apply(state, h, m)
        if m.dropped:
            return []
        return [(m.egress_spec, deparse(h))]
