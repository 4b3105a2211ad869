"""The spine partition as the controller decides it: the spines in service (every spine not failed), the
buckets that gives them, and the partition the switches last took (what a failover diffs against)."""

from __future__ import annotations

from collections.abc import Callable, Collection

from distcache.partition import spine_buckets


class Partition:
    """Derived from the failed set on every call (the controller's state owns that set), so it cannot lag it;
    only what was last pushed is held here."""

    def __init__(self, spine_ids: list[int], failed_ids: Callable[[], Collection[int]]) -> None:
        self.spine_ids = list(spine_ids)
        self._failed_ids = failed_ids
        self._pushed: list[int] | None = None

    def live(self) -> set[int]:
        """The spines in service."""
        return set(self.spine_ids) - set(self._failed_ids())

    def buckets(self, live: Collection[int] | None = None) -> list[int]:
        """The owner of every h0 bucket with the spines in service (or with ``live``)."""
        return spine_buckets(self.spine_ids, set(self.live() if live is None else live))

    def pushed(self) -> list[int]:
        """The partition the switches last took (every spine's, before anything was pushed)."""
        return self._pushed or spine_buckets(self.spine_ids)

    def remember(self, buckets: list[int]) -> None:
        self._pushed = list(buckets)
