"""softswitch's P4Info must describe exactly what p4src/ declares.

Without p4c the declarations are read from the P4 source (tools/p4decl.py);
with ``p4c-bm2-ss`` on PATH the P4 is compiled and p4c's own P4Info is
compared too.  The wire header in P4 is also held against distcache/wire.py; the constants
are held by tests/unit/test_p4_constants.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from finsy.proto import p4i
from google.protobuf import text_format

from distcache import wire
from harness.switch import P4_PSA, P4_V1MODEL
from softswitch.dataplane import PROGRAM
from tests.common.p4rt_targets import compile_p4src
from tests.common.softswitch_helpers import DIGEST_PROGRAM, DIGEST_TEST_P4
from tools.p4decl import parse

REPO = Path(__file__).resolve().parents[2]
MAIN = P4_V1MODEL
KINDS = {
    p4i.MatchField.EXACT: "exact",
    p4i.MatchField.LPM: "lpm",
    p4i.MatchField.TERNARY: "ternary",
    p4i.MatchField.RANGE: "range",
    p4i.MatchField.OPTIONAL: "optional",
}
PARTS = (
    "tables",
    "actions",
    "registers",
    "counters",
    "meters",
    "digests",  # digests: zero or more
    "controller_headers",
)
UNITS = {p4i.CounterSpec.PACKETS: "packets", p4i.CounterSpec.BYTES: "bytes", p4i.CounterSpec.BOTH: "both"}
METER_UNITS = {p4i.MeterSpec.PACKETS: "packets", p4i.MeterSpec.BYTES: "bytes"}


def shape(info: p4i.P4Info) -> dict:
    """The id-free content of a P4Info: what must agree between targets."""
    actions = {a.preamble.id: a for a in info.actions}
    return {
        "tables": {
            t.preamble.name: {
                "keys": [(mf.name, mf.bitwidth, KINDS[mf.match_type]) for mf in t.match_fields],
                "actions": sorted(actions[r.id].preamble.name for r in t.action_refs),
                "size": t.size,
            }
            for t in info.tables
        },
        "actions": {a.preamble.name: [(p.name, p.bitwidth) for p in a.params] for a in info.actions},
        "registers": {r.preamble.name: (r.type_spec.bitstring.bit.bitwidth, r.size) for r in info.registers},
        "counters": {c.preamble.name: (c.size, UNITS[c.spec.unit]) for c in info.counters},
        # v1model meters are two-rate three-colour: p4c leaves spec.type at that default, and so must we
        "meters": {
            m.preamble.name: (m.size, METER_UNITS[m.spec.unit], p4i.MeterSpec.Type.Name(m.spec.type))
            for m in info.meters
        },
        "digests": {dg.preamble.name: digest_members(info, dg) for dg in info.digests},
        "controller_headers": {
            h.preamble.name: [(md.name, md.bitwidth) for md in sorted(h.metadata, key=lambda x: x.id)]
            for h in info.controller_packet_metadata
        },
    }


def digest_members(info: p4i.P4Info, dg: p4i.Digest) -> list[tuple[str, int]]:
    """A digest's struct members as (name, bit width), through the P4Info's type_info."""
    assert dg.type_spec.WhichOneof("type_spec") == "struct", dg
    st = info.type_info.structs[dg.type_spec.struct.name]
    return [(m.name, m.type_spec.bitstring.bit.bitwidth) for m in st.members]


def source_shape() -> dict:
    d = parse(MAIN)
    return {
        "tables": {
            name: {"keys": t["keys"], "actions": sorted(t["actions"]), "size": t["size"]}
            for name, t in d.tables.items()
        },
        "actions": d.actions,
        "registers": d.registers,
        "counters": d.counters,
        "meters": {name: (size, unit, "TWO_RATE_THREE_COLOR") for name, (size, unit) in d.meters.items()},
        "digests": d.digests,
        "controller_headers": d.controller_headers,
    }


def test_softswitch_p4info_matches_p4_source() -> None:
    ours, src = shape(PROGRAM.p4info()), source_shape()
    for part in PARTS:
        assert ours[part] == src[part], f"{part} differ between softswitch and p4src"


def test_default_actions_match_p4_source() -> None:
    d = parse(MAIN)
    for t in PROGRAM.tables:
        assert d.tables[t.name]["default"] == t.default_action, t.name
        assert d.tables[t.name]["default_params"] == t.default_params, t.name


def test_p4_header_matches_wire_format() -> None:
    d = parse(MAIN)
    assert tuple(d.header_fields["distcache_t"]) == wire.HEADER_FIELDS
    assert dict(d.header_fields["dc_value_t"]) == {"chunk": wire.CHUNK_LEN * 8}


@pytest.mark.skipif(shutil.which("p4c-bm2-ss") is None, reason="p4c-bm2-ss not installed (softswitch-only machine)")
def test_p4c_p4info_matches_softswitch(tmp_path: Path) -> None:
    """p4c compiles p4src/ without a warning, into the P4Info softswitch serves."""
    out = tmp_path / "p4info.txtpb"
    run = subprocess.run(
        ["p4c-bm2-ss", "--arch", "v1model", "-o", str(tmp_path / "dc.json"), "--p4runtime-files", str(out), str(MAIN)],
        check=True,
        capture_output=True,
        text=True,
    )
    assert "warning" not in run.stderr.lower(), f"p4c warns on p4src/:\n{run.stderr}"
    theirs = p4i.P4Info()
    text_format.Parse(out.read_text(), theirs)
    ours = shape(PROGRAM.p4info())
    got = shape(theirs)
    for part in PARTS:
        assert got[part] == ours[part], f"{part} differ between p4c and softswitch"


def test_digests_are_read_from_p4_source() -> None:
    """The reader finds DC_DIGEST(T, ...) and T's members (p4src/ has none yet: the digest test program has one)."""
    d = parse(Path(DIGEST_TEST_P4), control="DtIngress")
    assert d.digests == {"hh_digest_t": [("key", 128), ("estimate", 16), ("switch_id", 8)]}
    assert shape(DIGEST_PROGRAM.p4info())["digests"] == d.digests


@pytest.mark.skipif(shutil.which("p4c-bm2-ss") is None, reason="p4c-bm2-ss not installed (softswitch-only machine)")
def test_p4c_digests_match_the_source_reader(tmp_path: Path) -> None:
    out = tmp_path / "dt.p4info.txtpb"
    subprocess.run(
        [
            "p4c-bm2-ss",
            "--arch",
            "v1model",
            "-o",
            str(tmp_path / "dt.json"),
            "--p4runtime-files",
            str(out),
            DIGEST_TEST_P4,
        ],
        check=True,
    )
    theirs = p4i.P4Info()
    text_format.Parse(out.read_text(), theirs)
    assert shape(theirs)["digests"] == parse(Path(DIGEST_TEST_P4), control="DtIngress").digests


def _ids(info: p4i.P4Info) -> dict[str, int]:
    """Every entity's id by its kind and name (the controller addresses entities by these ids)."""
    kinds = ("tables", "actions", "registers", "counters", "meters", "digests", "controller_packet_metadata")
    return {f"{k}:{e.preamble.name}": e.preamble.id for k in kinds for e in getattr(info, k)}


@pytest.mark.skipif(
    not (shutil.which("p4c-ebpf") and shutil.which("p4c-bm2-ss")), reason="needs p4c-ebpf and p4c-bm2-ss"
)
def test_psa_build_declares_what_the_v1model_build_does(tmp_path: Path) -> None:
    """p4c-ebpf compiles the PSA top (the same controls) into the P4Info of the v1model build: the same
    entities with the same names, ids and widths, so a controller cannot tell the targets apart (issue 19)."""
    v1model, _ = compile_p4src(tmp_path)
    out = tmp_path / "psa.p4info.txtpb"
    cmd = ["p4c-ebpf", "--arch", "psa", "--target", "kernel", "-o", str(tmp_path / "dc.c"), "--p4runtime-files"]
    run = subprocess.run([*cmd, str(out), str(P4_PSA)], capture_output=True, text=True)
    assert run.returncode == 0, f"p4c-ebpf failed on the PSA top:\n{run.stderr}"
    psa = text_format.Parse(out.read_text(), p4i.P4Info())
    assert shape(psa) == shape(v1model)
    assert _ids(psa) == _ids(v1model)
