"""Bring a switch's tables to a plan by reading them back: the restart-safe way to install.

A controller or agent that restarts must not push the pipeline again
(``VERIFY_AND_COMMIT`` wipes every table and register, and with them the
cache).  It reads each table it manages back from the switch instead, and
writes only the difference: missing entries are inserted, changed ones
modified, stale ones deleted.  An unchanged switch sees no entry written
(its default actions are rewritten with the same values).

Once a connection has brought its switch to a plan, the next plan on that same connection is diffed
against the last one instead of read back: nothing else writes these tables (the connection is the
switch's primary, and a switch that restarts closes it), and a failover moves half the spine
partition's 1,024 entries on every leaf at once -- reading them all back from every leaf then cost the
switches (softswitch serves P4Runtime from its forwarding process) more than the writes.  A plan that
fails part-way leaves the connection knowing nothing, so the next one reads back.
"""

from __future__ import annotations

from collections.abc import Mapping

from finsy.proto import p4r

from distcache import p4names
from p4rt.client import SwitchConnection
from p4rt.p4info import Match
from p4rt.plan import Entry, SwitchPlan

# tables a plan owns entirely: what is there and not planned is stale (the cache table is the agent's)
PLANNED_TABLES = frozenset(
    {
        p4names.PORT_KIND,
        p4names.IPV4_LPM,
        p4names.HH_BUCKETS,
        p4names.HH_RACKS,
        p4names.SPINE_PARTITION,
        p4names.STORAGE_RACK,
        p4names.CACHE_ROUTE,
        p4names.CLIENT_SOURCE,
        p4names.TRANSIT_SPINE,
        p4names.REPLICA_SPINE,
        p4names.REPLICATED_KEYS,
        p4names.RACK_HOSTS,
        p4names.PORT_SPINE,
    }
)
# written first: the tables other entries lead to (a transit route needs its spines, a replicated key its
# replica spines), so no packet meets a route whose next table is still empty; and a leaf's hosts, so what
# comes down to them from a spine is not dropped while the rest is written
FIRST = (p4names.TRANSIT_SPINE, p4names.REPLICA_SPINE, p4names.RACK_HOSTS)

BATCH = 1024


def match_key(match: Mapping[str, object]) -> tuple:
    """A hashable form of a match (as read back or as planned)."""
    out = []
    for name in sorted(match):
        v = match[name]
        if isinstance(v, Match):
            v = (v.value, v.prefix_len, v.mask, v.high)
        out.append((name, v))
    return tuple(out)


def apply_plan(conn: SwitchConnection, p: SwitchPlan) -> int:
    """Make ``conn``'s switch hold exactly ``p`` in the planned tables; returns the entries written."""
    known, conn.applied = conn.applied, None  # known again only once this plan is complete
    conn.set_default(p4names.SWITCH_CONFIG, p4names.SET_CONFIG, p.config)
    for e in p.defaults:
        conn.set_default(e.table, e.action, e.params_dict)
    want: dict[str, dict[tuple, Entry]] = {}
    for e in p.entries:
        want.setdefault(e.table, {})[match_key(e.match_dict)] = e
    info = conn.p4info
    assert info is not None  # set_default above raised otherwise
    writes = 0
    for table in sorted(PLANNED_TABLES | set(want), key=lambda t: (t not in FIRST, t)):
        if known is not None:
            held = [(e.match_dict, e.action, e.params_dict) for e in known.entries if e.table == table]
        else:
            held = conn.read_table(table)
        have = {match_key(m): (m, a, prm) for m, a, prm in held}
        updates = [
            (p4r.Update.DELETE, info.match_entry(table, m))
            for k, (m, _, _) in have.items()
            if k not in want.get(table, {})
        ]
        for k, e in want.get(table, {}).items():
            if k not in have:
                updates.append((p4r.Update.INSERT, info.table_entry(e.table, e.match_dict, e.action, e.params_dict)))
            elif have[k][1:] != (e.action, e.params_dict):
                updates.append((p4r.Update.MODIFY, info.table_entry(e.table, e.match_dict, e.action, e.params_dict)))
        for i in range(0, len(updates), BATCH):  # one Write per batch: a partition change is one round trip
            conn.write(updates[i : i + BATCH])
        writes += len(updates)
    read_back: dict[str, dict] = {}  # meters are configured, not inserted: compare, rewrite what differs
    for (name, index), config in p.meters.items():
        if name not in read_back:
            read_back[name] = conn.read_meter(name)
        if read_back[name].get(index) != config:
            if config is None:
                conn.clear_meter(name, index)
            else:
                conn.set_meter(name, index, *config)
            writes += 1
    conn.applied = p
    return writes
