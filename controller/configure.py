"""Bringing switches to the partition: client leaves as their P4Runtime primary, cache switches through
their agents.

A part of the controller: each call takes the cluster as it is now (its mechanism changes while it serves),
the failed switches and Hybrid's replicated keys; it reads the partition, and records the leaves' sessions and
routes and which configurations failed, in the parts that hold them.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from concurrent import futures

import grpc
from finsy.proto import p4i

from controller.health import Health, failure_reason
from controller.partition import Partition
from controller.sessions import LeafSessions
from controller.timing import DEATH_DIGESTS, FENCE_TIMEOUT, PROBE_TIMEOUT, WRITE_TIMEOUT
from distcache import p4names
from distcache.cluster import Cluster, Role, Switch, is_cache_switch
from distcache.rpc.agent import AgentClient
from distcache.rpc.protos import agent_pb2
from p4rt.client import P4RuntimeError, SwitchConnection
from p4rt.plan import SwitchPlan, liveness_config, plan
from p4rt.reconcile import apply_plan

log = logging.getLogger("controller")


class Configurer:
    """Configures switches in service; a switch whose configuration failed is noted stale in the sessions
    (the reconciler tries it again)."""

    def __init__(
        self,
        p4info: p4i.P4Info,
        device_config: bytes,
        grpc_host: str,
        partition: Partition,
        sessions: LeafSessions,
        agents: Mapping[str, AgentClient],
        readers: Mapping[str, SwitchConnection],
        health: Mapping[str, Health],
        pool: futures.ThreadPoolExecutor,
        fence_pool: futures.ThreadPoolExecutor,
    ) -> None:
        self.p4info, self.device_config, self.grpc_host = p4info, device_config, grpc_host
        self.partition, self.sessions = partition, sessions
        self.agents, self.readers, self.health = agents, readers, health
        self.pool, self.fence_pool = pool, fence_pool

    def bring_up_client_leaf(
        self, cluster: Cluster, sw: Switch, replicated: Collection[bytes], timeout: float = 15.0
    ) -> None:
        """A new primary session with the client leaf (also after a restart, a lost stream or a lost
        mastership), its pipeline if it has none, and its entries brought to the plan."""
        old = self.sessions.conns.pop(sw.name, None)
        if old is not None:
            old.close()  # first: a switch refuses a second session with the same election id
        conn = self._leaf_session(sw, timeout)
        try:
            if conn.has_pipeline():
                conn.use_p4info(self.p4info)
            else:
                conn.set_pipeline(self.p4info, self.device_config)
                log.info("%s: pipeline pushed", sw.name)
            writes = self.apply_leaf(cluster, sw, conn, replicated)
            conn.enable_digest(p4names.SPINE_DEATH_DIGEST, **DEATH_DIGESTS)
        except BaseException:
            conn.close()
            raise
        self.sessions.conns[sw.name] = conn
        log.info("%s: reconciled (%d entries written)", sw.name, writes)

    def _leaf_session(self, sw: Switch, timeout: float) -> SwitchConnection:
        """A primary P4Runtime session with a client leaf.  Its election id is 1 unless the leaf has seen
        higher ones (another client took mastership, then left): when nobody is primary, the next id above
        the highest the switch has seen takes mastership back; when another client is primary, the
        controller does not fight it (the error says another controller holds it)."""
        eid = self.sessions.election_id(sw.name)
        for attempt in range(2):
            conn = SwitchConnection(f"{self.grpc_host}:{sw.grpc_port}", sw.device_id, election_id=eid, name=sw.name)
            conn.timeout = WRITE_TIMEOUT
            try:
                conn.connect(timeout)
                return conn
            except P4RuntimeError:
                arb = conn.arbitration
                conn.close()
                past = (arb.election_id.high << 64 | arb.election_id.low) if arb is not None else 0
                if (
                    attempt
                    or arb is None
                    or arb.status.code != grpc.StatusCode.NOT_FOUND.value[0]
                    or past < eid
                    or past + 1 >= 1 << 64
                ):
                    raise
                eid = past + 1
                self.sessions.raise_election(sw.name, eid)
                log.warning(
                    "%s: nobody is primary and it has seen election ids up to %d: taking mastership with %d",
                    sw.name,
                    past,
                    eid,
                )
        raise AssertionError("unreachable")

    def apply_leaf(self, cluster: Cluster, sw: Switch, conn: SwitchConnection, replicated: Collection[bytes]) -> int:
        """Bring a client leaf's tables to the plan, keeping track of the spines it may send reads to:
        while the write is under way, those of the old plan and the new one; after it, the new one's."""
        live = frozenset(self.partition.live())
        self.sessions.writing(sw.name, live)
        writes = apply_plan(conn, self.plan(cluster, sw, replicated))
        self.sessions.took(sw.name, live)
        return writes

    def fence(self, cluster: Cluster, failed: Collection[str]) -> set[str]:
        """Every client leaf in service with a working session leaves the spines out of service out of every
        read path at once: one write of liveness_config's default (its ``fenced`` mask, liveness.p4), not the
        partition's hundreds of entries (0.8 s on a loaded BMv2), so the shims may stop waiting for a failed
        spine's acks that much sooner.  After the write the leaf may send reads only to the spines of the
        plan it took before that are still in service; a leaf whose write failed is noted in ``_stale``
        and gets the whole plan (its fence in it) from the reconciler's next round; returns those leaves."""
        live = self.partition.live()
        fence = liveness_config(cluster, live)

        def one(sw: Switch) -> None:
            self.sessions.conns[sw.name].set_default(
                fence.table, fence.action, fence.params_dict, timeout=FENCE_TIMEOUT
            )
            self.sessions.fenced(sw.name, live)

        jobs = {
            sw.name: self.fence_pool.submit(one, sw)
            for sw in cluster.switches()
            if sw.role == Role.CLIENT_LEAF and sw.name not in failed and self.sessions.ok(sw.name)
        }
        failed = set()
        for name, job in jobs.items():
            try:
                job.result()
            except (ConnectionError, grpc.RpcError, P4RuntimeError) as e:
                self.sessions.stale[name] = failure_reason(e)
                failed.add(name)
                log.error("%s: not fenced: %s", name, failure_reason(e))
        return failed

    def answers(self, sw: Switch) -> bool:
        """Whether switch ``sw``'s P4Runtime server answers a probe now (one without a reader yet counts as
        answering: bringing it up waits for it, briefly)."""
        reader = self.readers.get(sw.name)
        return reader is None or reader.probe(PROBE_TIMEOUT)

    def plan(self, cluster: Cluster, sw: Switch, replicated: Collection[bytes]) -> SwitchPlan:
        return plan(cluster, sw, self.partition.buckets(), self.partition.live(), replicated)

    def configure_agent(self, cluster: Cluster, sw: Switch, replicated: Collection[bytes]) -> agent_pb2.AgentStatus:
        st = self.agents[sw.name].configure(cluster, self.partition.buckets(), self.partition.live(), set(replicated))
        self.sessions.stale.pop(sw.name, None)
        log.info("%s: configured by its agent (%d cached keys)", sw.name, st.occupied)
        return st

    def configure(
        self,
        cluster: Cluster,
        roles: set[Role],
        failed: Collection[str],
        replicated: Collection[bytes],
        skip: Collection[str] = (),
    ) -> dict[str, str]:
        """Bring every switch in service of ``roles`` to the current partition and spines in service
        (and Hybrid's ``replicated`` keys, default: the current ones), all at once, but those in ``skip``
        (a write to them just failed: tried again by the reconciler, not waited for twice); returns those
        that could not be, with why.  They stay in ``_stale`` and the reconciler tries them again every
        RETRY s; an agent the health poll found not answering is not waited for, only retried."""

        def one(sw: Switch) -> None:
            if is_cache_switch(sw):
                h = self.health[sw.name]
                if h.agent_alive is False:
                    raise ConnectionError("waiting for its agent to answer (its last Status did not come back)")
                self.configure_agent(cluster, sw, replicated)
            elif not self.answers(sw):  # paused or wedged: not waited for under the lock, retried every RETRY s
                raise ConnectionError(f"its P4Runtime server does not answer a probe within {PROBE_TIMEOUT:g} s")
            elif self.sessions.ok(sw.name):
                self.apply_leaf(cluster, sw, self.sessions.conns[sw.name], replicated)
            else:  # never reached, or its last write failed: a new session (it may have lost mastership)
                self.bring_up_client_leaf(cluster, sw, replicated, timeout=PROBE_TIMEOUT * 2)

        jobs = {
            sw.name: self.pool.submit(one, sw)
            for sw in cluster.switches()
            if sw.role in roles and sw.name not in failed and sw.name not in skip
        }
        refused: dict[str, str] = {}
        for name, job in jobs.items():
            try:
                job.result()
            except (ConnectionError, grpc.RpcError, P4RuntimeError) as e:
                refused[name] = self.sessions.stale[name] = failure_reason(e)
                log.error("%s: not reconfigured: %s", name, failure_reason(e))
        return refused
