"""Typed errors of the DistCache API, shared by the client library and the tools."""

from __future__ import annotations


class DistCacheError(Exception):
    """Base of every error the client library raises on purpose."""


class InvalidKey(DistCacheError, TypeError):
    """A key is neither ``str`` nor ``bytes``, or is empty."""


class InvalidValue(DistCacheError, TypeError):
    """A value is neither ``bytes`` nor ``str``."""


class ValueTooLarge(DistCacheError, ValueError):
    """A value is longer than the wire format carries (``distcache.wire.MAX_VALUE_LEN``)."""


class RequestTimeout(DistCacheError, TimeoutError):
    """No reply after every retry: the server, or the path to it, is down or overloaded."""


class ServerError(DistCacheError):
    """The storage server answered with an error status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status
