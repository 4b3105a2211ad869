"""The deployment's one error kind: what the commands (demo, up, emulate, linearizability) print as one line."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from harness.processes import ServiceError


class DeploymentError(RuntimeError):
    """The deployment could not be brought up; the message says which part failed."""


@contextmanager
def one_line_errors() -> Iterator[None]:
    """A service that did not come up (harness's ServiceError) is a DeploymentError: the commands print its
    one line, not a traceback."""
    try:
        yield
    except ServiceError as e:
        raise DeploymentError(str(e)) from e
