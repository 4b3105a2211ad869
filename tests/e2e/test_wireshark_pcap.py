"""A deployment's own packets, as Wireshark shows them with tools/wireshark/distcache.lua.

A short demo run (``python -m dcnet.demo --pcap``, no failures, few keys, a tenth of the operations
writes) captures every switch port; tshark with the dissector decodes the captures of spine sp0's ports
(every fabric path crosses a spine: client reads, cache hits, coherence from both storage racks), and
every DistCache datagram in them must show the fields distcache.wire.decode gives for its UDP payload
(tests/common/wireshark.py), none malformed.  The captures must hold what an operator looks for: replies
served from a cache with their telemetry, and coherence exchanges (an INVALIDATE and its ack, an UPDATE
and its ack, a populate).
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from scapy.utils import RawPcapReader

from distcache.wire import Op
from tests.common.wireshark import TSHARK, dissect, expected, mismatches, reason_of, udp_payload

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (Debian package tshark)"),
]
SPINE = "sp0"


def _frames(pcap: Path) -> list[bytes]:
    reader = RawPcapReader(str(pcap))
    try:
        return [bytes(data) for data, _ in reader]
    finally:
        reader.close()


def test_every_captured_datagram_decodes_as_the_project_decodes_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    demo = [sys.executable, "-m", "dcnet.demo", "--pcap", "--no-failures", "--duration", "5", "--keys", "200"]
    proc = subprocess.run(
        [*demo, "--read-ratio", "0.9", "--run-dir", str(run_dir)], capture_output=True, text=True, timeout=200
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    pcaps = sorted(run_dir.joinpath("pcap").rglob(f"{SPINE}-eth*.pcap"))  # softswitch: pcap/sp0/, BMv2: pcap/
    assert len(pcaps) >= 6, pcaps

    seen: Counter[str] = Counter()
    exchanges: dict[tuple[str, bytes, int], set[str]] = {}  # (coherence kind, key, seq) -> ops seen
    checked = 0
    for pcap in pcaps:
        frames, _ = dissect(pcap)
        for number, data in enumerate(_frames(pcap), 1):
            udp = udp_payload(data)
            if udp is None:
                continue
            payload, length = udp
            assert len(payload) == length, f"{pcap.name} frame {number}: capture cut the datagram"
            want, reason = expected(payload)
            shown = frames.get(number)
            assert shown is not None, f"{pcap.name} frame {number}: not dissected as DistCache"
            assert reason is None and reason_of(shown) is None, (pcap.name, number, reason, shown.experts)
            assert mismatches(shown, want) == [], (pcap.name, number)
            checked += 1
            op = Op(int(shown.fields["distcache.op"][0], 0))
            cached, populate = (shown.fields[f"distcache.flags.{f}"] == ["1"] for f in ("cached", "populate"))
            if op == Op.GET_REPLY and cached:
                seen["cache hit"] += 1
                seen["cache hit with telemetry"] += shown.fields["distcache.spine_id"] != ["0"]
            if populate:
                seen[f"populate {op.name}"] += 1
            if op in (Op.INVALIDATE, Op.INVALIDATE_ACK, Op.UPDATE, Op.UPDATE_ACK):
                kind = op.name.split("_")[0]
                ident = (kind, want["distcache.key"][0], int(shown.fields["distcache.seq"][0]))
                exchanges.setdefault(ident, set()).add(op.name)  # type: ignore[arg-type]
    assert checked > 1000, checked
    assert seen["cache hit"] > 0 and seen["cache hit with telemetry"] > 0, seen
    assert seen["populate INVALIDATE"] > 0 and seen["populate INVALIDATE_ACK"] > 0, seen
    complete = Counter(kind for (kind, _, _), ops in exchanges.items() if ops == {kind, f"{kind}_ACK"})
    assert complete["INVALIDATE"] > 0 and complete["UPDATE"] > 0, complete
