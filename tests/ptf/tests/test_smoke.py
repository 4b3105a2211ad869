"""Smoke tests: the harness drives the switch on both targets (plain IPv4 routing, drops).

Run with ``python -m tests.ptf.run --target softswitch|bmv2``; each class is one test.
"""

from __future__ import annotations

import ptf.testutils as tu
from scapy.packet import Packet

from distcache import p4names
from distcache.cluster import PortKind
from p4rt.p4info import Match
from tests.ptf.base import P4RuntimeTest

HOST_MAC = "00:00:00:00:01:01"  # the sender
SWITCH_MAC = "00:00:00:00:aa:01"  # what the sender addresses
NHOP_MAC = "00:00:00:00:02:02"  # the next hop behind port 2


def mac(text: str) -> int:
    return int(text.replace(":", ""), 16)


def ip(text: str) -> int:
    a, b, c, d = (int(x) for x in text.split("."))
    return a << 24 | b << 16 | c << 8 | d


def udp(dst_ip: str, *, eth_dst: str = SWITCH_MAC, eth_src: str = HOST_MAC, ttl: int = 64, dport: int = 5000) -> Packet:
    """A plain UDP frame (not DistCache: the DistCache port is 8888)."""
    return tu.simple_udp_packet(
        eth_dst=eth_dst,
        eth_src=eth_src,
        ip_src="10.0.1.1",
        ip_dst=dst_ip,
        ip_ttl=ttl,
        udp_sport=4000,
        udp_dport=dport,
        pktlen=100,
    )


class RoutedFrame(P4RuntimeTest):
    """A routed frame leaves exactly once, rewritten: new dst MAC, src = old dst, TTL-1, fresh checksum."""

    def runTest(self) -> None:
        self.insert(
            p4names.PORT_KIND, {p4names.KEY_INGRESS_PORT: 1}, p4names.SET_PORT_KIND, {"kind": int(PortKind.CLIENT)}
        )
        self.insert(
            p4names.CLIENT_SOURCE,
            {p4names.KEY_INGRESS_PORT: 1, p4names.KEY_IPV4_SRC: Match(ip("10.0.1.1"), prefix_len=32)},
            p4names.SOURCE_OK,
        )
        self.insert(
            p4names.IPV4_LPM,
            {p4names.KEY_IPV4_DST: Match(ip("10.0.2.2"), prefix_len=32)},
            p4names.SET_NHOP,
            {"dmac": mac(NHOP_MAC), "port": 2},
        )
        self.send(1, udp("10.0.2.2"))
        # built from scratch, so scapy computes the IPv4 checksum for TTL 63 (UDP's does not cover the TTL)
        self.expect(udp("10.0.2.2", eth_dst=NHOP_MAC, eth_src=SWITCH_MAC, ttl=63), 2)
        self.expect_none()
        self.assertEqual(self.counter(p4names.DC_DROPS, p4names.DropReason.NO_ROUTE), 0)


class LongestPrefix(P4RuntimeTest):
    """ipv4_lpm picks the longest matching prefix."""

    def runTest(self) -> None:
        self.insert(
            p4names.IPV4_LPM,
            {p4names.KEY_IPV4_DST: Match(ip("10.0.0.0"), prefix_len=8)},
            p4names.SET_NHOP,
            {"dmac": mac("00:00:00:00:03:03"), "port": 3},
        )
        self.insert(
            p4names.IPV4_LPM,
            {p4names.KEY_IPV4_DST: Match(ip("10.0.2.0"), prefix_len=24)},
            p4names.SET_NHOP,
            {"dmac": mac(NHOP_MAC), "port": 2},
        )
        self.send(1, udp("10.0.2.9"))
        self.expect(udp("10.0.2.9", eth_dst=NHOP_MAC, eth_src=SWITCH_MAC, ttl=63), 2)
        self.send(1, udp("10.9.9.9"))
        self.expect(udp("10.9.9.9", eth_dst="00:00:00:00:03:03", eth_src=SWITCH_MAC, ttl=63), 3)
        self.expect_none()


class NoRouteDrop(P4RuntimeTest):
    """A frame without a route is dropped and counted as NO_ROUTE, on a pipeline whose counters start at 0."""

    def runTest(self) -> None:
        self.insert(
            p4names.IPV4_LPM,
            {p4names.KEY_IPV4_DST: Match(ip("10.0.2.0"), prefix_len=24)},
            p4names.SET_NHOP,
            {"dmac": mac(NHOP_MAC), "port": 2},
        )
        self.assertEqual(self.counter(p4names.DC_DROPS, p4names.DropReason.NO_ROUTE), 0)
        self.send(1, udp("192.168.7.7"))
        # the counter moves when the switch has processed the frame: only then is "nothing came out" meaningful
        self.assertEqual(self.wait_counter(p4names.DC_DROPS, p4names.DropReason.NO_ROUTE, 1), 1)
        self.expect_none()
