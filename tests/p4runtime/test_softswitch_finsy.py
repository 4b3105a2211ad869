"""The softswitch P4Runtime server as finsy (a client nobody here wrote) sees it.

finsy performs its own arbitration handshake, Capabilities check, pipeline
cookie check and push, and encodes/decodes entries from the P4Info; a
server that bends the protocol shows up here even when our own stub-based
tests agree with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import finsy as fy
import pytest
from google.protobuf import text_format

from distcache import p4names
from softswitch.dataplane import PROGRAM
from softswitch.program import alias
from softswitch.switch import SoftSwitch
from tests.common.softswitch_helpers import (
    DIGEST_PROGRAM,
    DIGEST_SWITCH_ID,
    HH_DIGEST,
    DigestPipeline,
    ip,
    ipv4_udp_frame,
    probe_frame,
    running_switch,
)

pytestmark = pytest.mark.timeout(60)

DEVICE = 3
KEY = 0xDEADBEEF_00000000_00000000_0000C0DE


@pytest.fixture
def switch() -> Iterator[SoftSwitch]:
    with running_switch(DEVICE) as sw:
        yield sw


@pytest.fixture
def p4info_file(tmp_path: Path) -> Path:
    path = tmp_path / "softswitch.p4info.txt"
    path.write_text(text_format.MessageToString(PROGRAM.p4info()))
    return path


def finsy_switch(switch: SoftSwitch, p4info: Path, **opts: object) -> fy.Switch:
    """A finsy Switch that owns the pipeline (finsy pushes only with both P4Info and a device config)."""
    blob = p4info.with_suffix(".json")
    blob.write_bytes(PROGRAM.device_config())  # softswitch's identity of its program; a BMv2 JSON is refused
    options = fy.SwitchOptions(p4info=p4info, p4blob=blob, device_id=DEVICE, **opts)  # type: ignore[arg-type]
    return fy.Switch("sw", switch.server.address, options)


def test_finsy_pushes_pipeline_writes_and_reads(switch: SoftSwitch, p4info_file: Path) -> None:
    async def scenario() -> tuple[list[fy.P4TableEntry], list[fy.P4TableEntry], fy.P4TableEntry, int]:
        async with finsy_switch(switch, p4info_file) as sw:
            assert sw.is_primary
            await sw.write(
                [
                    +fy.P4TableEntry(
                        p4names.IPV4_LPM,
                        match=fy.P4TableMatch({p4names.KEY_IPV4_DST: "10.0.1.0/24"}),
                        action=fy.P4TableAction(p4names.SET_NHOP, dmac="02:00:00:00:00:0b", port=2),
                    ),
                    +fy.P4TableEntry(
                        p4names.IPV4_LPM,
                        match=fy.P4TableMatch({p4names.KEY_IPV4_DST: "10.0.0.0/8"}),
                        action=fy.P4TableAction(p4names.SET_NHOP, dmac="02:00:00:00:00:0c", port=3),
                    ),
                    +fy.P4TableEntry(
                        p4names.CACHE_LOOKUP,
                        match=fy.P4TableMatch({p4names.KEY_DC_KEY: KEY}),
                        action=fy.P4TableAction(p4names.CACHE_HIT, slot=42, version=7),
                    ),
                    ~fy.P4TableEntry(
                        p4names.SWITCH_CONFIG,
                        is_default_action=True,
                        action=fy.P4TableAction(p4names.SET_CONFIG, switch_id=9, role=1, mechanism=0),
                    ),
                ]
            )
            lpm = [e async for e in sw.read(fy.P4TableEntry(p4names.IPV4_LPM))]
            cache = [e async for e in sw.read(fy.P4TableEntry(p4names.CACHE_LOOKUP))]
            (default,) = [e async for e in sw.read(fy.P4TableEntry(p4names.SWITCH_CONFIG, is_default_action=True))]
            cookie = sw.p4info.p4cookie
        return lpm, cache, default, cookie

    lpm, cache, default, cookie = asyncio.run(scenario())
    cfg = switch.server.service.committed
    assert cfg is not None and cfg.cookie == cookie  # finsy's cookie is stored and returned

    # finsy decodes to P4Info aliases (last name component) and ints
    assert {e.table_id for e in lpm} == {alias(p4names.IPV4_LPM)}
    got = sorted(
        (e.match[alias(p4names.KEY_IPV4_DST)], e.action.name, e.action.args)  # type: ignore[index,union-attr]
        for e in lpm
    )
    assert got == [
        ((ip("10.0.0.0"), 8), alias(p4names.SET_NHOP), {"dmac": 0x02000000000C, "port": 3}),
        ((ip("10.0.1.0"), 24), alias(p4names.SET_NHOP), {"dmac": 0x02000000000B, "port": 2}),
    ]
    (c,) = cache
    assert c.table_id == alias(p4names.CACHE_LOOKUP) and c.match == {alias(p4names.KEY_DC_KEY): KEY}
    assert isinstance(c.action, fy.P4TableAction) and c.action.name == alias(p4names.CACHE_HIT)
    assert c.action.args == {"slot": 42, "version": 7}
    assert default.is_default_action and isinstance(default.action, fy.P4TableAction)
    assert default.action.name == alias(p4names.SET_CONFIG)
    assert default.action.args == {"switch_id": 9, "role": 1, "mechanism": 0}

    # what finsy wrote is what the data plane uses
    frame = ipv4_udp_frame("10.0.1.5")
    assert switch.process_packet(1, frame) == [(2, bytes.fromhex("02000000000b") + frame[6:])]
    assert switch.process_packet(1, ipv4_udp_frame("10.7.7.7"))[0][0] == 3


def test_finsy_reconnect_keeps_pipeline_and_entries(switch: SoftSwitch, p4info_file: Path) -> None:
    """A controller that reconnects finds its cookie, so it does not push (and wipe) the pipeline again."""
    entry = fy.P4TableEntry(
        p4names.IPV4_LPM,
        match=fy.P4TableMatch({p4names.KEY_IPV4_DST: "10.5.0.0/16"}),
        action=fy.P4TableAction(p4names.DROP),
    )

    async def first() -> None:
        async with finsy_switch(switch, p4info_file) as sw:
            await sw.write([+entry])

    async def again() -> list[fy.P4TableEntry]:
        async with finsy_switch(switch, p4info_file) as sw:
            return [e async for e in sw.read(fy.P4TableEntry(p4names.IPV4_LPM))]

    asyncio.run(first())
    entries = asyncio.run(again())
    assert len(entries) == 1 and isinstance(entries[0].action, fy.P4TableAction)
    assert entries[0].action.name == alias(p4names.DROP)


def test_finsy_backup_takes_over_when_primary_leaves(switch: SoftSwitch, p4info_file: Path) -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        second = finsy_switch(switch, p4info_file, initial_election_id=5)
        async with finsy_switch(switch, p4info_file, initial_election_id=20) as first:
            await second.__aenter__()
            try:
                first_primary, second_before = first.is_primary, second.is_primary
            except BaseException:
                await second.__aexit__(None, None, None)
                raise
        try:
            for _ in range(100):  # the server tells the backup there is no primary; finsy then claims it
                if second.is_primary:
                    break
                await asyncio.sleep(0.05)
            await second.write(
                [
                    +fy.P4TableEntry(
                        p4names.IPV4_LPM,
                        match=fy.P4TableMatch({p4names.KEY_IPV4_DST: "10.6.0.0/16"}),
                        action=fy.P4TableAction(p4names.DROP),
                    )
                ]
            )
            return first_primary, second_before, second.is_primary
        finally:
            await second.__aexit__(None, None, None)

    first_primary, second_before, second_after = asyncio.run(scenario())
    assert first_primary and not second_before and second_after
    assert len(switch.state.tables[p4names.IPV4_LPM]) == 1


def test_finsy_receives_and_acks_digests(tmp_path: Path) -> None:
    """A controller's way: finsy writes a DigestEntry, reads DigestLists, acks them; suppression follows."""
    info = tmp_path / "digest.p4info.txt"
    info.write_text(text_format.MessageToString(DIGEST_PROGRAM.p4info()))
    blob = tmp_path / "digest.json"
    blob.write_bytes(DIGEST_PROGRAM.device_config())

    async def scenario(sw_: SoftSwitch) -> tuple[list[fy.P4DigestList], list[fy.P4DigestEntry]]:
        options = fy.SwitchOptions(p4info=info, p4blob=blob, device_id=DEVICE)
        got: list[fy.P4DigestList] = []
        async with fy.Switch("sw", sw_.server.address, options) as sw:
            await sw.write(
                [+fy.P4DigestEntry(HH_DIGEST.name, max_list_size=2, max_timeout_ns=10**9, ack_timeout_ns=10 * 10**9)]
            )
            entries = [e async for e in sw.read(fy.P4DigestEntry(HH_DIGEST.name))]
            lists = sw.read_digests(HH_DIGEST.name)
            for key in (0xAB, 0xCD, 0xAB, 0xEF, 0xAB):  # the second 0xAB: in an unacked list, suppressed
                sw_.handle_packet(1, probe_frame(key, 3))
            got.append(await asyncio.wait_for(anext(lists), 5))
            await sw.write([got[0].ack()])
            await asyncio.sleep(0.2)
            sw_.handle_packet(1, probe_frame(0xAB, 3))  # acked: 0xAB goes out again, with 0xEF
            got.append(await asyncio.wait_for(anext(lists), 5))
        return got, entries

    with running_switch(DEVICE, DigestPipeline()) as sw_:
        got, entries = asyncio.run(scenario(sw_))
    (entry,) = entries
    assert (entry.digest_id, entry.max_list_size, entry.ack_timeout_ns) == (HH_DIGEST.name, 2, 10 * 10**9)
    assert [d.digest_id for d in got] == [HH_DIGEST.name] * 2
    assert got[1].list_id == got[0].list_id + 1
    fields = [name for name, _ in HH_DIGEST.fields]
    assert [list(d.data) for d in got] == [
        [dict(zip(fields, (k, 3, DIGEST_SWITCH_ID), strict=True)) for k in (0xAB, 0xCD)],
        [dict(zip(fields, (k, 3, DIGEST_SWITCH_ID), strict=True)) for k in (0xEF, 0xAB)],
    ]
