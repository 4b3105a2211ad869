"""The controller's primary P4Runtime sessions with the client leaves (their election ids, and the spines each
leaf may send reads to), and the switches whose last configuration failed."""

from __future__ import annotations

from collections.abc import Collection

from p4rt.client import SwitchConnection


class LeafSessions:
    """What the controller knows of its client leaves' sessions and routes.

    A leaf may send reads to the spines in service in the last plan it took; while a plan is being written, to
    those of the old one and the new one; before it took any from this controller, to every spine (the shims'
    down-set reads :meth:`may_route`).  ``stale`` names every switch, client leaf or cache switch, whose last
    configuration failed, with why: the reconciler tries each again every RETRY s.  Single dict operations
    only (the GIL makes each atomic): the health poll and the probe threads note staleness without the lock.
    """

    def __init__(self, spine_ids: Collection[int]) -> None:
        self._every = frozenset(spine_ids)
        self.conns: dict[str, SwitchConnection] = {}  # client leaf -> our primary session with it
        self._election: dict[str, int] = {}  # client leaf -> our election id there, when not 1
        self._routes: dict[str, frozenset[int]] = {}  # client leaf -> the spines it may send reads to
        self.stale: dict[str, str] = {}  # switch -> why its last configuration failed

    # -- sessions ---------------------------------------------------------------------------------------
    def ok(self, name: str) -> bool:
        """Whether client leaf ``name`` has a primary session that is up and whose last write did not fail
        (else it needs a new one: it may have lost mastership)."""
        conn = self.conns.get(name)
        return conn is not None and name not in self.stale and not conn.stream_closed.is_set()

    def close_all(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()

    def election_id(self, name: str) -> int:
        return self._election.get(name, 1)

    def raise_election(self, name: str, election_id: int) -> None:
        """Take mastership of ``name`` with ``election_id`` from now on (it has seen lower ones)."""
        self._election[name] = election_id

    # -- routes -----------------------------------------------------------------------------------------
    def routes(self, name: str) -> frozenset[int]:
        """The spines client leaf ``name`` may send reads to."""
        return self._routes.get(name, self._every)

    def writing(self, name: str, live: Collection[int]) -> None:
        """A plan with spines ``live`` in service is being written to ``name``: it may route to both plans'."""
        self._routes[name] = self.routes(name) | frozenset(live)

    def took(self, name: str, live: Collection[int]) -> None:
        """``name`` took a whole plan with spines ``live`` in service: its configuration is current."""
        self._routes[name] = frozenset(live)
        self.stale.pop(name, None)

    def fenced(self, name: str, live: Collection[int]) -> None:
        """``name`` took a fence leaving every spine but ``live`` out of every read path."""
        self._routes[name] = self.routes(name) & frozenset(live)

    def may_route(self, name: str, spine_id: int) -> bool:
        return spine_id in self.routes(name)
