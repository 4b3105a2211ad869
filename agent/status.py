"""What an agent reports (agent API ``Status``, ``distcache-ctl status``): its switch, slots, counters and,
on request, every cached key with its slot's hits.  The agent takes a :class:`Snapshot` of itself under its
lock (:meth:`agent.agent.SwitchAgent.snapshot`); this module only turns one into the API's message."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.slots import AgentCounters, CachedKey
from distcache.cluster import Switch
from distcache.rpc.protos import agent_pb2


@dataclass(frozen=True)
class Snapshot:
    """One consistent picture of an agent, copied out under its lock."""

    switch: Switch
    slots: int
    occupied: int
    configured: bool
    connected: bool  # a P4Runtime session with the switch whose stream is open
    digests_dropped: int
    cache_epoch: int
    counters: AgentCounters
    insert_latencies_us: list[int]  # report received -> entry valid, the last ones, sorted
    keys: list[tuple[bytes, CachedKey]] = field(default_factory=list)  # with_keys only
    slot_hits: dict[int, int] = field(default_factory=dict)  # slot -> hits its cache_hits cell counted


def cached_pb(key: bytes, e: CachedKey) -> agent_pb2.CachedKey:
    return agent_pb2.CachedKey(key=key, slot=e.slot, version=e.version, state=e.state, hits=e.recent_hits, auto=e.auto)


def status_pb(snap: Snapshot) -> agent_pb2.AgentStatus:
    """The agent API's ``AgentStatus`` of ``snap``."""
    st = agent_pb2.AgentStatus(
        switch=snap.switch.name,
        switch_id=snap.switch.switch_id,
        switch_connected=snap.connected,
        slots=snap.slots,
        occupied=snap.occupied,
        configured=snap.configured,
        digests_dropped=snap.digests_dropped,
        cache_epoch=snap.cache_epoch,
        **vars(snap.counters),
    )
    lat = snap.insert_latencies_us
    if lat:
        st.insert_latency_p50_us, st.insert_latency_max_us = lat[len(lat) // 2], lat[-1]
    for k, entry in snap.keys:
        st.keys.append(cached_pb(k, entry))
        st.slot_hits.append(snap.slot_hits.get(entry.slot, 0))
    return st
