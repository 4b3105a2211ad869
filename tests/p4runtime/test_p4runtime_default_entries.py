"""Reads of default entries: per table and the wildcard over every table, on softswitch and BMv2.

The P4Runtime spec (Wildcard Reads) selects with ``is_default_action`` "only the default entry" and with
``table_id = 0`` every table; together they ask for one default entry per table.  p4runtime-shell's
``table_entry[...]`` with ``is_default`` and BMv2's PI server (``table_read`` calls ``table_read_default``
per table) read them that way; softswitch used to answer the non-default entries instead (issue 18).
Runs on softswitch always and on BMv2 where ``simple_switch_grpc`` and ``p4c-bm2-ss`` are installed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from finsy.proto import p4r

from distcache import p4names
from tests.common.p4rt_targets import Target
from tests.p4runtime.test_p4runtime_conformance import (
    WRITE_OK,
    answer,
    ent,
    ipv4_lpm_default,
    lpm,
    port_kind,
    switch_config_default,
    u,
)

pytestmark = pytest.mark.timeout(120)

UPD = p4r.Update


def read_tables(target: Target, q: p4r.TableEntry) -> list[p4r.TableEntry]:
    outcome, got = target.read([ent(q)])
    assert outcome == answer("OK"), outcome
    return [e.table_entry for e in got]


@pytest.fixture
def configured(target: Target) -> Iterator[Target]:
    """Two defaults set (switch_config, ipv4_lpm) and two non-default entries; all undone afterwards."""
    ids = target.names
    target.clear_tables()
    ups = [u(UPD.MODIFY, switch_config_default(ids)), u(UPD.MODIFY, ipv4_lpm_default(ids))]
    ups += [u(UPD.INSERT, lpm(ids)), u(UPD.INSERT, port_kind(ids))]
    assert target.write(ups) == WRITE_OK
    yield target
    target.clear_tables()
    resets = [
        p4r.TableEntry(table_id=ids.id(t), is_default_action=True) for t in (p4names.SWITCH_CONFIG, p4names.IPV4_LPM)
    ]
    assert target.write([u(UPD.MODIFY, te) for te in resets]) == WRITE_OK


def test_wildcard_default_read_returns_every_tables_default_entry(configured: Target) -> None:
    """``table_id = 0, is_default_action = true``: exactly one default entry per table of the P4Info, each
    the one a read of that table alone returns, and none of the non-default entries."""
    ids = configured.names
    got = read_tables(configured, p4r.TableEntry(table_id=0, is_default_action=True))
    assert all(te.is_default_action and not te.match for te in got), got
    by_table = {te.table_id: te for te in got}
    assert len(by_table) == len(got), "a table's default entry came twice"
    assert set(by_table) == {t.preamble.id for t in ids.info.tables}
    assert by_table[ids.id(p4names.SWITCH_CONFIG)] == switch_config_default(ids)
    assert by_table[ids.id(p4names.IPV4_LPM)] == ipv4_lpm_default(ids)
    for tid, te in by_table.items():
        assert read_tables(configured, p4r.TableEntry(table_id=tid, is_default_action=True)) == [te]


def test_wildcard_read_returns_only_non_default_entries(configured: Target) -> None:
    """``table_id = 0`` without ``is_default_action``: the two inserted entries, no default entry."""
    ids = configured.names
    got = read_tables(configured, p4r.TableEntry())
    assert not any(te.is_default_action for te in got)
    assert sorted(te.table_id for te in got) == sorted([ids.id(p4names.IPV4_LPM), ids.id(p4names.PORT_KIND)])
