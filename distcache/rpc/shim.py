"""Client side of a shim's control API (distcache/proto/shim.proto).

Agents and the controller run in the root network namespace while each shim
runs inside its storage host's namespace; a Unix socket in the run folder
reaches across (sockets bound to a path live in the filesystem, not in a
network namespace).  ``tcp:HOST:PORT`` works too, for shims elsewhere.  One
channel per address is kept and shared, so frequent calls (an agent
populating keys) do not pay for a new connection each time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import grpc

from distcache.cluster import Cluster
from distcache.rpc.protos import FAST_RECONNECT, Reply, message_dict, shim_grpc, shim_pb2


class ShimUnavailableError(ConnectionError):
    """The shim's control socket cannot be reached, or did not answer in time."""


class ShimRequestError(ValueError):
    """The shim refused a request (bad arguments); the message says what it expected."""


def grpc_target(address: str) -> str:
    """A shim control address, ``unix:/path`` or ``tcp:host:port``, as a gRPC target."""
    kind, _, rest = address.partition(":")
    if kind == "unix" and rest:
        return f"unix:{rest}"
    if kind == "tcp" and rest:
        return rest
    raise ValueError(f"bad shim control address {address!r}; use unix:/path or tcp:host:port")


_channels: dict[str, grpc.Channel] = {}
_channels_lock = threading.Lock()


def _channel(address: str) -> grpc.Channel:
    with _channels_lock:
        ch = _channels.get(address)
        if ch is None:
            ch = _channels[address] = grpc.insecure_channel(grpc_target(address), options=FAST_RECONNECT)
        return ch


class ShimLink:
    def __init__(self, address: str, timeout: float = 5.0) -> None:
        self.address, self.timeout = address, timeout
        self.stub = shim_grpc.ShimStub(_channel(address))

    def _call(self, method: str, request: object) -> Reply:
        try:
            return getattr(self.stub, method)(request, timeout=self.timeout)
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
                raise ShimRequestError(e.details()) from None
            raise ShimUnavailableError(
                f"shim at {self.address} failed {method}: {e.code().name} {e.details()}"
            ) from None

    def ping(self) -> None:
        self._call("Ping", shim_pb2.Empty())

    def stats(self) -> dict:
        return message_dict(self._call("Stats", shim_pb2.Empty()))

    def metrics(self) -> bytes:
        """The shim's Prometheus series (text exposition format)."""
        return bytes(self._call("Metrics", shim_pb2.Empty()).text)

    def partition(self, buckets: list[int], down: list[int] | None = None, epoch: int = 0) -> None:
        self._call("SetPartition", shim_pb2.PartitionRequest(buckets=buckets, down=down or [], epoch=epoch))

    def view(self, cached: dict[bytes, list[int]], complete: list[int] | None = None, incarnation: int = 0) -> None:
        """Add the cached keys of the ``complete`` switches (every key each one caches), collected
        after reading the shim's ``incarnation`` from ``stats()`` (0: not checked)."""
        req = shim_pb2.ViewRequest(
            cached=[shim_pb2.KeySwitches(key=k, switches=v) for k, v in cached.items()],
            complete=sorted(complete or ()),
            incarnation=incarnation,
        )
        self._call("AddView", req)

    def populate(self, key: bytes, switch: int, cache_epoch: int, version: int, name: bytes = b"") -> str:
        """Fill ``switch``'s new entry for digest ``key``, whose tag is (``cache_epoch``, ``version``); ``name``:
        the key itself, if known (else the shim must know it)."""
        return self._call(
            "Populate",
            shim_pb2.SwitchKey(key=key, switch=switch, cache_epoch=cache_epoch, version=version, name=name),
        ).state

    def evict(self, key: bytes, switch: int) -> bool:
        return self._call("Evict", shim_pb2.SwitchKey(key=key, switch=switch)).evicted


def shim_control(shim_dir: Path, server: str) -> str:
    """The control address of storage host ``server``'s shim: a Unix socket in ``shim_dir`` (the run folder), by
    which the launcher starts it and the controller and agents find it."""
    return f"unix:{shim_dir / f'shim-{server}.sock'}"


def shim_links(cluster: Cluster, shim_dir: Path) -> Callable[[bytes], ShimLink]:
    """Key -> the control link of its storage shim."""

    def shim_for(key: bytes) -> ShimLink:
        return ShimLink(shim_control(shim_dir, cluster.server_for_key(key).name))

    return shim_for
