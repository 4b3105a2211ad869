"""Typed errors of the DistCache API, shared by the client library and the tools."""

from __future__ import annotations


class DistCacheError(Exception):
    """Base of every error the client library raises on purpose."""


class InvalidKeyError(DistCacheError, TypeError):
    """A key is neither ``str`` nor ``bytes``, or is empty."""


class InvalidValueError(DistCacheError, TypeError):
    """A value is neither ``bytes`` nor ``str``."""


class ValueTooLargeError(DistCacheError, ValueError):
    """A value is longer than the wire format carries (one datagram, ``distcache.wire.MAX_DATAGRAM``)."""


class RequestTimeoutError(DistCacheError, TimeoutError):
    """No reply after every retry: the server, or the path to it, is down or overloaded."""


class ServerError(DistCacheError):
    """The storage server answered with an error status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ServerBusyError(ServerError):
    """The storage server refused a write it had no room to remember for the retry span (status BUSY).

    The write was not applied, and no copy of it will be: try again later (a new call, a new request).
    """


class CommandError(DistCacheError):
    """A command run with ``execute`` answered Redis' error (its message, e.g. "ERR value is not an integer")."""


class WrongTypeError(CommandError):
    """The key holds another type of value than the command (or a GET) works on: Redis' WRONGTYPE."""


# The names these errors had before 0.2 (ruff's N818 wants the Error suffix), kept for callers.
InvalidKey = InvalidKeyError
InvalidValue = InvalidValueError
ValueTooLarge = ValueTooLargeError
RequestTimeout = RequestTimeoutError
