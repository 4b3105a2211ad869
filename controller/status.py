"""The cluster's status, read now: what ``distcache-ctl status`` shows and the metrics exporter serves.

Both read it through :func:`cluster_status`, so a Prometheus series and the status table of the same
moment come from the same counter reads.
"""

from __future__ import annotations

import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from distcache import p4names
from distcache.cluster import Role, is_cache_switch
from distcache.rpc.protos import agent_pb2, controller_pb2

if TYPE_CHECKING:
    from controller.controller import Controller

R = TypeVar("R")

STATUS_WAIT = 1.5  # seconds a status waits for live counters and agents before using cached ones
ROLE_NAMES = {Role.SPINE: "spine", Role.STORAGE_LEAF: "storage_leaf", Role.CLIENT_LEAF: "client_leaf"}


def key_text(digest: bytes) -> str:
    """A cached key as status shows it: its digest in hex (switches, agents and the controller know no more;
    the key's shim knows its name)."""
    return digest.hex()


@dataclass
class StatusRead:
    """One status: the API's message, and the agents' own status as read with it (cache switches whose
    agent answered now or earlier; the exporter's insertion and eviction series come from them)."""

    cluster: controller_pb2.ClusterStatus
    agents: dict[str, agent_pb2.AgentStatus] = field(default_factory=dict)


def cluster_status(ctl: Controller, pool: futures.ThreadPoolExecutor) -> StatusRead:
    """Answers within STATUS_WAIT whatever hangs: counters and agents are read now, all at once and
    each with a short deadline; what does not answer in time is shown as the health poll last saw it
    (an agent that the poll found not answering is not asked again here)."""
    switches = ctl.cluster.switches()
    reads = {sw.name: pool.submit(ctl.monitor.read_stats, sw.name) for sw in switches if ctl.health[sw.name].alive}
    deaths = {
        sw.name: pool.submit(ctl.monitor.read_deaths, sw.name)
        for sw in switches
        if ctl.health[sw.name].alive and sw.role in (Role.CLIENT_LEAF, Role.STORAGE_LEAF)
    }
    agents = {
        name: pool.submit(ctl.monitor.poll_agent, name)
        for name in ctl.agent_status
        if ctl.health[name].agent_alive is not False
    }
    by = time.monotonic() + STATUS_WAIT

    def result(job: futures.Future[R] | None) -> R | None:
        if job is None:
            return None
        try:
            return job.result(timeout=max(0.0, by - time.monotonic()))
        except Exception:  # noqa: BLE001 - a switch or agent that did not answer: shown from the cache
            return None

    out = controller_pb2.ClusterStatus(
        mechanism=ctl.cluster.mechanism.name.lower(),
        failovers=ctl.state.failovers,
        recoveries=ctl.state.recoveries,
        epoch=ctl.state.epoch,
        last_detection_s=ctl.state.last_detection_s,
        last_failover_s=ctl.state.last_failover_s,
        replicated=sorted(key_text(k) for k in ctl.replicated),
    )
    read = StatusRead(out)
    for death in list(ctl.monitor.spine_deaths):
        out.spine_deaths.add(
            leaf=death.leaf, spine=death.spine, detect_s=death.detect_s, silent_s=death.silent_s, at=death.at
        )
    owned: dict[int, int] = {}
    for sid in ctl.partition.buckets():
        owned[sid] = owned.get(sid, 0) + 1
    for sw in switches:
        h = ctl.health[sw.name]
        failure = ctl.state.failed.get(sw.name)
        notes = [d] if (d := ctl.monitor.detail(sw.name)) else []
        st = out.switches.add(
            name=sw.name,
            role=ROLE_NAMES[sw.role],
            switch_id=sw.switch_id,
            alive=h.alive,
            failed=failure is not None,
            admin_failed=bool(failure and failure.admin),
            load=ctl.monitor.load(sw.name),
            buckets=owned.get(sw.switch_id, 0),
        )
        counters = result(reads.get(sw.name))
        if counters is None and sw.name in reads:
            notes.append("counters not readable now" + (", as last read" if h.stats else ""))
            counters = (h.stats, h.drops) if h.stats else None
        if counters is not None:
            stats, drops = counters
            for s in p4names.Stat:
                st.stats[s.name] = stats.get(int(s), (0, 0))[0]
            for reason in p4names.DropReason:
                if drops.get(int(reason), (0, 0))[0]:
                    st.drops[reason.name] = drops[int(reason)][0]
            st.hits, st.misses = st.stats["READ_HIT"], st.stats["READ_MISS"]
            st.hit_ratio = st.hits / (st.hits + st.misses) if st.hits + st.misses else 0.0
        if (dead := result(deaths.get(sw.name))) is not None:
            st.spine_deaths.update(dead)
        if is_cache_switch(sw):
            a = result(agents.get(sw.name))
            st.agent_alive = a is not None
            if a is None:
                notes.append(
                    f"agent: not answering ({h.agent_error or 'no reply in time'})"
                    + (", figures as last seen" if h.agent is not None else "")
                )
                a = h.agent
            if a is not None:
                st.slots, st.occupied = a.slots, a.occupied
                st.digests, st.auto_inserted = a.digests, a.auto_inserted
                read.agents[sw.name] = a
        st.detail = "; ".join(notes)
    return read
