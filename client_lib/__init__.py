"""DistCache client library (see client_lib.client for the key and value rules)."""

from client_lib.client import AsyncClient, Client, Reply
from distcache.errors import (
    CommandError,
    DistCacheError,
    InvalidKeyError,
    InvalidValueError,
    RequestTimeoutError,
    ServerBusyError,
    ServerError,
    ValueTooLargeError,
    WrongTypeError,
)
from distcache.wire import MAX_CACHEABLE, MAX_DATAGRAM

__all__ = [
    "MAX_CACHEABLE",
    "MAX_DATAGRAM",
    "AsyncClient",
    "Client",
    "CommandError",
    "DistCacheError",
    "InvalidKeyError",
    "InvalidValueError",
    "Reply",
    "RequestTimeoutError",
    "ServerBusyError",
    "ServerError",
    "ValueTooLargeError",
    "WrongTypeError",
]
