"""p4lang's p4runtime-shell drives softswitch, and BMv2 where it is installed, through one script.

What an operator would do with the standard interactive client (issue 18): push the pipeline with the
device config docs/p4runtime.md names for the target, then tables, defaults, counters, meters, digests
and errors (tests/p4runtime/p4rt_shell_script.py, run in p4runtime-shell's own venv since it pins an
older protobuf and grpcio than ours).  Both switches run as processes on loopback, started as
harness/switch.py starts them for a deployment.  softswitch must give the answers of :data:`EXPECTED`
(the P4Runtime spec's); BMv2 the same except in the rows of docs/p4runtime.md's table, which this test
reads, so a new difference fails until it is documented with whose it is and why.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from distcache.cluster import CLIENT_LEAF_BASE, Role, Switch
from harness.switch import REPO, SwitchProcess, SwitchSpec
from p4rt.probes import probe_frame
from softswitch import p4info as softswitch_p4info
from softswitch.dataplane import PROGRAM
from tests.common.p4rt_targets import compile_p4src
from tests.common.softswitch_helpers import free_tcp_port

pytestmark = pytest.mark.timeout(300)

VENV_TARGET = "build/p4rt-shell-venv/.installed"  # the Makefile's target: one recipe for make and this test
SHELL_PYTHON = REPO / "build" / "p4rt-shell-venv" / "bin" / "python"
SCRIPT = Path(__file__).with_name("p4rt_shell_script.py")
DOC = REPO / "docs" / "p4runtime.md"
DOC_MARK = "<!-- p4runtime-shell differences"
BMV2_INSTALLED = shutil.which("simple_switch_grpc") is not None
#: what pip prints when it cannot reach the index (the only reason to skip rather than fail)
OFFLINE = re.compile(
    r"NewConnectionError|Temporary failure in name resolution|Network is unreachable|ConnectTimeout|"
    r"ReadTimeoutError|Max retries exceeded|No matching distribution found|Could not find a version"
)
LEAF = Switch("client-leaf", CLIENT_LEAF_BASE + 1, Role.CLIENT_LEAF, "02:00:00:00:02:01", 0, 1)
SPINE = Switch("spine", 1, Role.SPINE, "02:00:00:00:00:01", 0, 1)

LPM_16 = "[ipv4_lpm ipv4_dst=0x0a020000/16 -> set_nhop(dmac=0x020000000001,port=0x01)]"
CACHED = "[cache_lookup dc_key=0x" + "ab" * 16 + " -> cache_hit(slot=0x07,version=0x01)]"
SOURCE = "[client_source ingress_port=0x03 ipv4_src=0x0a020000/16 -> source_ok()]"
DIGEST_CFG = "ok max_timeout_ns=1000000 max_list_size={} ack_timeout_ns=1000000000"

#: softswitch's answer to each step of the script, in its order: the P4Runtime spec's
EXPECTED: dict[str, str] = {
    "pipeline: tables in the P4Info read back": "ok 19",
    "port_kind: insert": "ok",
    "port_kind: read one": "ok 1:[port_kind ingress_port=0x01 -> set_port_kind(kind=0x01)]",
    "port_kind: modify": "ok",
    "port_kind: read all": "ok 1:[port_kind ingress_port=0x01 -> set_port_kind(kind=0x02)]",
    "port_kind: insert again": "write ALREADY_EXISTS",
    "port_kind: delete": "ok",
    "port_kind: delete again": "write NOT_FOUND",
    "port_kind: modify missing": "write NOT_FOUND",
    "ipv4_lpm: insert /16": "ok",
    "ipv4_lpm: insert /24": "ok",
    "ipv4_lpm: read all": "ok 2:"
    + LPM_16
    + "[ipv4_lpm ipv4_dst=0x0a020300/24 -> set_nhop(dmac=0x020000000001,port=0x02)]",
    "ipv4_lpm: modify /24": "ok",
    "ipv4_lpm: read /24": "ok 1:[ipv4_lpm ipv4_dst=0x0a020300/24 -> set_nhop(dmac=0x020000000001,port=0x03)]",
    "cache_lookup: insert a 128-bit key": "ok",
    "cache_lookup: read": "ok 1:" + CACHED,
    "client_source: insert exact+lpm": "ok",
    "client_source: read": "ok 1:" + SOURCE,
    "every table: wildcard read": "ok 4:"
    + CACHED
    + SOURCE
    + LPM_16
    + "[ipv4_lpm ipv4_dst=0x0a020300/24 -> set_nhop(dmac=0x020000000001,port=0x03)]",
    "ipv4_lpm: delete what a read returns": "ok",
    "cache_lookup: delete what a read returns": "ok",
    "client_source: delete what a read returns": "ok",
    "every table: empty after deletes": "ok 0:",
    "ipv4_lpm default: read": "ok 1:[ipv4_lpm default  -> drop()]",
    "port_kind default: read": "ok 1:[port_kind default  -> NoAction()]",
    "port_kind default: modify to set_port_kind": "ok",
    "port_kind default: read after modify": "ok 1:[port_kind default  -> set_port_kind(kind=0x02)]",
    "every table: wildcard read of default entries": "ok 19 entries, every table True, all default True, "
    "[port_kind default  -> set_port_kind(kind=0x02)]",
    "port_kind default: reset (modify, no action)": "ok",
    "port_kind default: read after reset": "ok 1:[port_kind default  -> NoAction()]",
    "switch_config default: read": "ok 1:[switch_config default  -> NoAction()]",
    "ipv4_lpm default: modify to an action not its own": "shell UserError",
    "ipv4_lpm default: insert": "write INVALID_ARGUMENT",
    "dc_stats[3]: read": "ok packets=0",
    "dc_stats[3]: modify to 5": "ok",
    "dc_stats[3]: read after modify": "ok packets=5",
    "dc_stats: read every cell": "ok 32",
    "dc_stats: read index out of range": "rpc OUT_OF_RANGE",
    "dc_stats[3]: modify back to 0": "ok",
    "cache_meter[0]: read unconfigured": "ok unconfigured",
    "cache_meter[0]: modify": "ok",
    "cache_meter[0]: read after modify": "ok cir=5 cburst=5 pir=10 pburst=8",
    "cache_meter[0]: modify cir > pir": "write INVALID_ARGUMENT",
    "cache_meter[0]: read after refused modify": "ok cir=5 cburst=5 pir=10 pburst=8",
    "cache_meter[1]: modify index out of range": "write OUT_OF_RANGE",
    "cache_meter[0]: reset (modify, no config)": "ok",
    "cache_meter[0]: read after reset": "ok unconfigured",
    "spine_death_t: digest entry insert": "ok",
    "spine_death_t: digest entry read": DIGEST_CFG.format(1),
    "spine_death_t: digest entry modify": "ok",
    "spine_death_t: digest entry read after modify": DIGEST_CFG.format(4),
    "spine_death_t: digest entry insert again": "write ALREADY_EXISTS",
    "client leaf: switch_config and liveness_config defaults": "ok",
    "packet-out: a probe for spine 1": "ok",
    "port_spine: the CPU port faces spine 1": "ok",
    "packet-out: the second probe": "ok",
    "spine_death_t: received": f"ok lists=1 digests=1 names=['spine_death_t'] switch,spine=[[{LEAF.switch_id}, 1]]",
    "probes_sent[1]: read": "ok packets=2",
    "spine_deaths[1]: read": "ok packets=1",
    "spine_death_t: digest entry delete": "ok",
    "spine_death_t: digest entry read after delete": "rpc NOT_FOUND",
    "packet-out: not a probe (dropped, counted)": "ok",
    "dc_drops: every reason counted": "ok TRUNCATED=1,NO_ROUTE=2",
    "error: key wider than the field (shell)": "write INVALID_ARGUMENT",
    "error: key wider than the field (sent)": "write INVALID_ARGUMENT",
    "error: key of empty bytes (sent)": "write INVALID_ARGUMENT",
    "error: unknown table (shell)": "shell UserError",
    "error: unknown table (sent)": "rpc INVALID_ARGUMENT",
    "port_kind: delete what a read returns": "ok",
    "full table: fill": "ok",
    "error: full table, one more insert": "write RESOURCE_EXHAUSTED",
    "full table: entries": "ok 64",
    "full table: delete every entry": "ok",
    "full table: after deleting every entry": "ok 0:",
    "pipeline: push the other target's device config": "rpc INVALID_ARGUMENT",
    "pipeline: tables readable after that push": "ok 0:",
}


def documented_differences() -> dict[str, tuple[str, str]]:
    """docs/p4runtime.md's table: step -> (softswitch's outcome, BMv2's), each row with whose and why."""
    text = DOC.read_text()
    assert DOC_MARK in text, f"{DOC} lost its table of differences"
    rows: dict[str, tuple[str, str]] = {}
    for line in text[text.index(DOC_MARK) :].splitlines()[3:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        step, ours, bmv2, whose, why = (c.strip("`") for c in cells)
        assert whose in ("BMv2's", "ours") and why, f"row {step!r}: say whose the difference is and why"
        rows[step] = (ours, bmv2)
    return rows


@pytest.fixture(scope="module")
def shell_python() -> Path:
    """The venv's interpreter, made by the Makefile's target if it is missing or older than its requirements."""
    done = subprocess.run(["make", "-s", VENV_TARGET], cwd=REPO, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        out = done.stdout + done.stderr
        offline = [line.strip() for line in out.splitlines() if OFFLINE.search(line)]
        if offline:
            pytest.skip(f"p4runtime-shell {VENV_TARGET}: PyPI unreachable ({offline[-1][:200]})")
        pytest.fail(f"make {VENV_TARGET} failed:\n{out}")
    return SHELL_PYTHON


def pipeline_files(target: str, tmp: Path) -> tuple[Path, Path, Path]:
    """(P4Info, device config, the other target's device config) as docs/p4runtime.md says to push them."""
    softswitch_info, empty, identity = tmp / "softswitch.p4info.txt", tmp / "empty.bin", tmp / "softswitch-id.json"
    softswitch_p4info.main([str(softswitch_info)])  # what `make build` writes to build/softswitch.p4info.txt
    empty.write_bytes(b"")
    identity.write_bytes(PROGRAM.device_config())
    bmv2_info, bmv2_json = REPO / "build" / "distcache.p4info.txtpb", REPO / "build" / "distcache.json"
    sources = list((REPO / "p4src").rglob("*.p4"))
    fresh = bmv2_json.exists() and all(bmv2_json.stat().st_mtime >= p.stat().st_mtime for p in sources)
    if shutil.which("p4c-bm2-ss") and not (fresh and bmv2_info.exists()):
        compile_p4src(tmp)  # make build's command, when build/ is missing or stale
        bmv2_info, bmv2_json = tmp / "distcache.p4info.txtpb", tmp / "distcache.json"
    if target == "softswitch":  # the other target's config: a BMv2 JSON (a stand-in without p4c)
        other = bmv2_json if bmv2_json.exists() else tmp / "bmv2-like.json"
        if not other.exists():
            other.write_text('{"header_types": [], "pipelines": []}')
        return softswitch_info, empty, other
    return bmv2_info, bmv2_json, identity


def run_script(python: Path, target: str, tmp: Path) -> dict[str, str]:
    """Start ``target`` on loopback, run the script against it, stop it; the script's outcomes."""
    tmp.mkdir(parents=True, exist_ok=True)
    info, config, other = pipeline_files(target, tmp)
    spec = SwitchSpec(target, ports=(), grpc_addr=f"127.0.0.1:{free_tcp_port()}", thrift_port=free_tcp_port())
    sw = SwitchProcess(spec, tmp / f"{target}.out")
    plan = {
        "device_id": spec.device_id,
        "grpc_addr": spec.grpc_addr,
        "p4info": str(info),
        "device_config": str(config),
        "wrong_device_config": str(other),
        "switch_id": LEAF.switch_id,
        "probe_frame": probe_frame(LEAF, SPINE, 1).hex(),
    }
    (tmp / "plan.json").write_text(json.dumps(plan))
    sw.start()
    try:
        sw.wait_ready()
        done = subprocess.run(
            [str(python), str(SCRIPT), str(tmp / "plan.json")], capture_output=True, text=True, timeout=240
        )
    finally:
        sw.stop()
    assert done.returncode == 0, f"the script failed on {target}:\n{done.stderr[-3000:]}\n{sw.logs()}"
    result: dict[str, str] = json.loads(done.stdout)
    return result


def test_softswitch_answers_what_the_spec_says(shell_python: Path, tmp_path: Path) -> None:
    got = run_script(shell_python, "softswitch", tmp_path / "softswitch")
    assert list(got) == list(EXPECTED), "the script's steps and EXPECTED differ"
    wrong = {step: (got[step], want) for step, want in EXPECTED.items() if got[step] != want}
    assert not wrong, "softswitch (got, want):\n" + "\n".join(f"  {s}: {g!r} != {w!r}" for s, (g, w) in wrong.items())


def test_documented_differences_name_real_steps() -> None:
    """Every row of the table is a step of the script, softswitch's column is what it must answer, and the
    two columns differ (a row that no longer differs must go)."""
    for step, (ours, bmv2) in documented_differences().items():
        assert step in EXPECTED, f"docs/p4runtime.md names a step the script has not: {step!r}"
        assert ours == EXPECTED[step], f"{step!r}: the table says softswitch answers {ours!r}, not {EXPECTED[step]!r}"
        assert ours != bmv2, f"{step!r} is no difference"


@pytest.mark.skipif(not BMV2_INSTALLED, reason="simple_switch_grpc is not on PATH")
def test_bmv2_differs_only_where_documented(shell_python: Path, tmp_path: Path) -> None:
    got = run_script(shell_python, "bmv2", tmp_path / "bmv2")
    assert list(got) == list(EXPECTED)
    documented = documented_differences()
    want = {step: documented[step][1] if step in documented else ours for step, ours in EXPECTED.items()}
    wrong = {step: (got[step], w) for step, w in want.items() if got[step] != w}
    assert not wrong, "BMv2 answered otherwise than docs/p4runtime.md and EXPECTED say (got, want):\n" + "\n".join(
        f"  {s}: {g!r} != {w!r}" for s, (g, w) in wrong.items()
    )
