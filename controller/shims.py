"""What the shims are told: the partition, the switches they may stop waiting for, the cached-key views.

A part of the controller: every call takes the failed switches (and the epoch) from the caller, the
controller's state; it reads the partition and the client leaves' routes from the parts that hold them, and
holds one set of its own, the spines a recovery has told the shims are up but that are not in service yet.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from concurrent import futures

import grpc

from controller.partition import Partition
from controller.sessions import LeafSessions
from distcache.cluster import Cluster, Host, Role, Switch
from distcache.rpc.agent import AgentClient
from distcache.rpc.shim import ShimLink, ShimRequestError, ShimUnavailableError
from harness.processes import SwitchProcesses

log = logging.getLogger("controller")


class Shims:
    """Pushes to the shims, and decides which failed switches they may skip (:meth:`down`)."""

    def __init__(
        self,
        cluster: Cluster,
        shim_address: Callable[[Host], str],
        agents: dict[str, AgentClient],
        partition: Partition,
        sessions: LeafSessions,
        procs: SwitchProcesses | None,
        pool: futures.ThreadPoolExecutor,
    ) -> None:
        self.cluster, self.shim_address, self.agents = cluster, shim_address, agents
        self.partition, self.sessions, self.procs, self.pool = partition, sessions, procs, pool
        # spines a recover() has told the shims are up and flushed, not in service yet: not down in any push
        self.rejoining: set[str] = set()

    def push(
        self,
        failed: Collection[str],
        epoch: int,
        views: bool = False,
        only: list[Host] | None = None,
    ) -> None:
        """Partition (of ``epoch``), switches down and, with ``views``, cached keys.

        A view names the switches it is complete for (their agents answered: every key they cache
        is in it) and the incarnation of the shim it was collected for, read before collecting: a
        shim that restarted meanwhile refuses it (a copy validated through its previous life after
        the collection would be missing), and gets the next round's.
        """
        hosts = only or self.cluster.servers()
        links = {h.name: ShimLink(self.shim_address(h)) for h in hosts}
        incarnations: dict[str, int] = {}
        cached: dict[str, dict[bytes, list[int]]] = {}
        complete: set[int] = set()
        if views:
            for h in hosts:
                try:
                    incarnations[h.name] = int(links[h.name].stats().get("incarnation", 0))
                except (ShimUnavailableError, ShimRequestError) as e:
                    log.warning("%s: shim not updated: %s", h.name, e)
            for name, agent in self.agents.items():
                if name in failed:
                    continue
                try:
                    st = agent.status(with_keys=True)
                except grpc.RpcError as e:
                    log.warning("%s: agent unreachable, its keys are not in the view: %s", name, e.code())
                    continue
                if not (st.configured and st.switch_connected):
                    # a restarted agent knows its switch's entries only once connected and configured (it reads
                    # them back then): its empty list now would tell a shim the switch caches nothing
                    log.info("%s: agent not configured yet, its keys are not in the view", name)
                    continue
                complete.add(st.switch_id)
                for k in st.keys:
                    server = self.cluster.server_for_key(k.key).name
                    cached.setdefault(server, {}).setdefault(bytes(k.key), []).append(st.switch_id)
        spines = set(self.cluster.switch_ids(Role.SPINE))
        buckets, down = self.partition.buckets(), self.down(failed)

        def push(host: Host) -> None:
            try:
                link = links[host.name]
                link.partition(buckets, down, epoch)
                if views:
                    mine = spines | {self.cluster.storage_leaf(host.rack).switch_id}
                    link.view(cached.get(host.name, {}), sorted(complete & mine), incarnations[host.name])
            except (ShimUnavailableError, ShimRequestError) as e:
                log.warning("%s: shim not updated: %s", host.name, e)

        # all at once: a failover's writes wait for the last shim told (one after another, four shims of a
        # loaded BMv2 run took 0.2 s)
        list(self.pool.map(push, [h for h in hosts if not views or h.name in incarnations]))

    def down(self, failed: Collection[str]) -> list[int]:
        """The switches the shims may stop waiting for: every ``failed`` spine, except one that a client leaf
        may still send reads to (step 2 of the failover waits for step 1 everywhere) and one a recover() is
        bringing back, :attr:`rejoining` (told up, flushed and warmed before it owns buckets again: whatever it
        caches from then on, every write must invalidate, whichever push comes meanwhile).

        Never a storage leaf, failed or not: it is on every path to its servers, so while it forwards nothing
        is gained by skipping it, and client leaves go on choosing it as a read target (a failed leaf that
        keeps running, one paused until declared dead and resumed, an eBPF leaf whose program outlives its
        process all still answer from their caches); while it forwards nothing, no request reaches its
        servers either, and a write already past it waits for its INVALIDATE and is refused (ERROR: nothing
        written) rather than acknowledged beside a copy it may still serve.  Client leaves hold no copy.

        A client leaf may send reads to the spines in service in the last plan it took (both plans while
        one is being written; every spine if it never took one from this controller), unless its data
        plane is known to be gone (a new process starts without a pipeline, and gets the current plan
        first).  Known gone, not inferred from its process: a kernel switch's programs go on routing by
        their old tables after their process dies, until taken down (``SwitchProcesses.fence``).
        """
        out = []
        for name in list(failed):
            if name in self.rejoining:
                continue
            sw = self.cluster.switch(name)
            if sw.role == Role.SPINE and not self.routing_to(sw):
                out.append(sw.switch_id)
        return sorted(out)

    def routing_to(self, spine: Switch) -> list[str]:
        """The client leaves that may still send reads to ``spine``."""
        return [
            sw.name
            for sw in self.cluster.switches()
            if sw.role == Role.CLIENT_LEAF
            and self.sessions.may_route(sw.name, spine.switch_id)
            and not (self.procs is not None and self.procs.data_plane_gone(sw.name))
        ]
