"""What an agent reports (agent API ``Status``, ``distcache-ctl status``): its switch, slots, counters and,
on request, every cached key with its slot's hits."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agent.slots import CachedKey
from distcache.api import agent_pb2
from p4rt.client import P4RuntimeError

if TYPE_CHECKING:
    from agent.agent import SwitchAgent

log = logging.getLogger("agent")


def cached_pb(key: bytes, e: CachedKey) -> agent_pb2.CachedKey:
    return agent_pb2.CachedKey(key=key, slot=e.slot, version=e.version, state=e.state, hits=e.recent_hits, auto=e.auto)


def agent_status(agent: SwitchAgent, with_keys: bool = False) -> agent_pb2.AgentStatus:
    """``agent``'s status, taken under its lock (one consistent picture)."""
    with agent.lock:
        conn = agent.conn
        st = agent_pb2.AgentStatus(
            switch=agent.switch.name,
            switch_id=agent.switch.switch_id,
            switch_connected=conn is not None and not conn.stream_closed.is_set(),
            slots=agent.slots,
            occupied=len(agent.cached),
            configured=agent.configured,
            digests_dropped=conn.digests_dropped if conn is not None else 0,
            cache_epoch=agent.epoch or 0,
            **vars(agent.counters),
        )
        lat = sorted(agent.insert_latencies_us)
        if lat:
            st.insert_latency_p50_us, st.insert_latency_max_us = lat[len(lat) // 2], lat[-1]
        if with_keys:
            cells = {}
            if conn is not None and st.switch_connected:
                try:
                    cells = agent.slot_hits(conn)
                except P4RuntimeError as e:
                    log.debug("%s: cache_hits not read: %s", agent.switch.name, e)
            for k, entry in agent.cached.items():
                st.keys.append(cached_pb(k, entry))
                st.slot_hits.append(cells.get(entry.slot, (0, 0))[0])
        return st
