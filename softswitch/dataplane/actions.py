"""Actions more than one control runs (p4src/include/actions.p4)."""

from __future__ import annotations

from softswitch.dataplane.header import IP_DST, IP_SRC, IP_TTL, UDP_DPORT, UDP_SPORT, Headers


def dc_reflect(h: Headers) -> None:
    """Turn a DistCache packet around: it goes back to its sender."""
    ip, udp = h.ipv4, h.udp
    ip[IP_SRC], ip[IP_DST] = ip[IP_DST], ip[IP_SRC]
    udp[UDP_SPORT], udp[UDP_DPORT] = udp[UDP_DPORT], udp[UDP_SPORT]
    ip[IP_TTL] = 64
