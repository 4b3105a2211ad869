"""Addresses in a cluster description or on a command line: ``HOST:PORT`` parsed once, and the operator APIs'
addresses held off the data network.  :class:`ClusterError` is what every check of a description raises."""

from __future__ import annotations

import ipaddress
import json

MAX_PORT = 65535  # TCP/UDP ports
# the data network of the addressing plan (distcache.cluster: storage racks 10.1/16, client racks 10.2/16, spines'
# coherence addresses 10.255/16): hosts in the emulation reach these, so no operator API may listen on them
DATA_NETS = tuple(ipaddress.ip_network(f"10.{n}.0.0/16") for n in (1, 2, 255))


class ClusterError(ValueError):
    """A cluster description (or an address in one) that cannot be used; the message is one line that
    names the field and what it must be."""


def show(value: object) -> str:
    """A value as the user wrote it in JSON (``true``, not ``True``)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def parse_address(text: object, what: str, *, port_zero: bool = False, names: bool = False) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``) -> (host, port), or ClusterError naming ``what``.

    HOST is an IP address or ``localhost`` (``names``: any host name, resolved later by whoever
    connects); PORT is 1..65535 (``port_zero``: 0 too, "pick a free one").
    """
    if not isinstance(text, str):
        raise ClusterError(f'{what}: expected "HOST:PORT", got {show(text)}')
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not (port.isascii() and port.isdigit()):
        raise ClusterError(f"{what}: expected HOST:PORT (e.g. 127.0.0.1:50050), got {text!r}")
    lo = 0 if port_zero else 1
    if not lo <= int(port) <= MAX_PORT:
        raise ClusterError(f"{what}: port {int(port)} is not in {lo}..{MAX_PORT}")
    if host != "localhost" and not names:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ClusterError(
                f"{what}: {host!r} is not an IP address (give the address itself, e.g. 127.0.0.1:{port})"
            ) from None
    return host, int(port)


def service_address(text: object, what: str) -> tuple[str, int]:
    """An operator API address (the controller's, an agent's): loopback or a management address.

    Never a wildcard (it would listen on every interface, the data network's included), a
    multicast or broadcast address, or an address of the data network (``DATA_NETS``), where
    the emulated hosts, clients included, could reach it.
    """
    host, port = parse_address(text, what)
    if host == "localhost":
        return host, port
    ip = ipaddress.ip_address(host)
    if ip.is_unspecified:
        raise ClusterError(
            f"{what}: {host} listens on every interface; use loopback (127.0.0.1:{port}) or a management address"
        )
    if ip.is_multicast or ip == ipaddress.ip_address("255.255.255.255"):
        raise ClusterError(f"{what}: {host} is not a unicast address; use loopback or a management address")
    for net in DATA_NETS:
        if ip in net:
            raise ClusterError(
                f"{what}: {host} is in the data network {net}, which the emulated hosts reach; "
                "use loopback or a management address"
            )
    return host, port
