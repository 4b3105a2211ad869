"""Bad input is one clear line and a nonzero exit, never a traceback (issue 15, defect 9).

Every entry point a user types runs here as a real subprocess (``python -m ...``, which is what the
console scripts run): ``distcache``, ``distcache-ctl``, the controller, the agent, the shim, the
softswitch and the Mininet demo and ``up`` (whose arguments are checked before anything needs root
or starts).  Each gets what people mistype — a folder or a missing file for a file, a file that is
not JSON or not an object, a topology with a field of the wrong type or out of its range, ports 0
and 65536, host names that do not resolve, a wildcard address for the controller — and must answer
with exactly one line on stderr that names the argument or field, nothing on stdout, and a nonzero
status.  Below, the cluster description's checks as units: the limits come from the P4 sizes and
field widths (distcache/p4names.py, held to p4src by tests/unit/test_p4_constants.py and the P4Info parity
test), and the controller's state file is checked against the cluster it serves.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from controller.state import ControllerState, Failure
from distcache import p4names
from distcache.cluster import Cluster, ClusterError
from harness.processes import SHIM_BINARY  # the storage shim is compiled (shim/*.go; make build)
from tests.common.keys import digest

pytestmark = pytest.mark.timeout(600)  # the first case waits for them all: 92 s here, over 120 s on a slower CI machine

REPO = Path(__file__).resolve().parents[2]
GOOD = REPO / "topologies" / "minimal.json"
P4INFO = "P4INFO"  # replaced by the path of a real P4Info written by the fixture

# topology files with one bad field each: (file name, JSON text, words the error must contain)
BAD_TOPOLOGIES = {
    "spines_float": ('{"spines": 2.5}', "spines: expected an integer 1..63"),
    "servers_bool": ('{"servers_per_rack": true}', "servers_per_rack: expected an integer 1..250"),
    "threshold_wide": ('{"hh_threshold": 70000}', "hh_threshold: expected an integer 1..65535"),
    "slots_many": ('{"cache_slots": 100000}', "cache_slots: expected an integer 1..4096"),
    "controller_any": ('{"controller_address": "0.0.0.0:50050"}', "controller_address: 0.0.0.0 listens on every"),
    "spines_string": ('{"spines": "2"}', "spines: expected an integer"),
    "rate_nan": ('{"server_rate": NaN}', "server_rate: expected a number >= 0"),
    "racks_negative": ('{"storage_racks": -1}', "storage_racks: expected an integer 1..64"),
    "not_json": ('{"spines": ', "not JSON"),
    "not_object": ("[1, 2]", "a cluster description is a JSON object"),
    "unknown_field": ('{"spine": 2}', "unknown cluster field(s) ['spine']"),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad")
    out = {"dir": d / "a-folder", "missing": d / "missing.json", "good": GOOD}
    out["dir"].mkdir()
    for name, (text, _) in BAD_TOPOLOGIES.items():
        out[name] = d / f"{name}.json"
        out[name].write_text(text)
    from google.protobuf import text_format

    from softswitch.dataplane import PROGRAM

    out["p4info"] = d / "p4info.txt"
    out["p4info"].write_text(text_format.MessageToString(PROGRAM.p4info()))
    out["state_unknown"] = d / "state-unknown.json"
    ControllerState(failed={"sp9": Failure(admin=True, since=1.0)}).save(out["state_unknown"])
    out["not_p4info"] = out["not_object"]
    return out


def run(argv: list[str], files: dict[str, Path]) -> subprocess.CompletedProcess:
    """Run ``python -m <argv>`` (the shim: its binary) with ``{name}`` in any argument replaced by the path of
    that file."""
    args = [a.format(**{k: str(v) for k, v in files.items()}) for a in argv]
    command = [str(SHIM_BINARY), *args[1:]] if args[0] == "shim" else [sys.executable, "-m", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTCACHE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "mininet"), env.get("PYTHONPATH", "")])
    env["COLUMNS"] = "80"  # a narrow terminal: a long message must still be one line
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, cwd=REPO)


def assert_one_line(res: subprocess.CompletedProcess, code: int, *words: str) -> None:
    lines = res.stderr.splitlines()
    assert "Traceback" not in res.stderr, res.stderr
    assert len(lines) == 1, res.stderr
    assert res.returncode == code, (res.returncode, res.stderr)
    assert res.stdout == "", res.stdout
    for w in words:
        assert w in lines[0], (w, lines[0])


DC = ["loadgen", "--timeout", "0.05", "--retries", "0"]
CTL = ["controller.ctl", "--timeout", "1"]
CONTROLLER = ["controller", "--p4info", "{p4info}", "--shim-dir", "{dir}"]
AGENT = ["agent", "--switch", "sp0", "--p4info", "{p4info}", "--shim-dir", "{dir}"]
SHIM = ["shim", "--server", "r0s0", "--redis-url", "unix:///nonexistent.sock", "--control", "unix:/nonexistent.sock"]
SOFTSWITCH = ["softswitch", "--pipeline", "tests.common.softswitch_helpers:ForwardPipeline"]

# (id, argv, exit status, words the one line must contain)
CASES: list[tuple[str, list[str], int, tuple[str, ...]]] = [
    # distcache: files and --server
    ("distcache-cluster-dir", [*DC, "--cluster", "{dir}", "get", "k"], 1, ("is a directory",)),
    ("distcache-cluster-missing", [*DC, "--cluster", "{missing}", "get", "k"], 1, ("does not exist",)),
    (
        "distcache-server-port-99999",
        [*DC, "--cluster", "{good}", "--server", "127.0.0.1:99999", "get", "k"],
        1,
        ("--server", "99999", "1..65535"),
    ),
    (
        "distcache-server-port-0",
        [*DC, "--cluster", "{good}", "--server", "127.0.0.1:0", "get", "k"],
        1,
        ("--server", "port 0"),
    ),
    (
        "distcache-server-port-65536",
        [*DC, "--cluster", "{good}", "--server", "127.0.0.1:65536", "get", "k"],
        1,
        ("--server", "65536"),
    ),
    (
        "distcache-server-unresolvable",
        [*DC, "--cluster", "{good}", "--server", "no-such-host.invalid", "get", "k"],
        1,
        ("cannot resolve no-such-host.invalid",),
    ),
    ("distcache-server-garbage", [*DC, "--cluster", "{good}", "--server", "a:b:c", "get", "k"], 1, ("--server",)),
    (
        "distcache-key-too-long",
        [*DC, "--cluster", "{good}", "--server", "127.0.0.1:9", "get", "k" * 0x10000],
        1,
        ("key of 65536 bytes is longer than the 65535 bytes",),
    ),
    ("distcache-timeout-negative", [*DC, "--cluster", "{good}", "--timeout", "-1", "get", "k"], 2, ("--timeout",)),
    ("distcache-retries-word", [*DC, "--cluster", "{good}", "--retries", "many", "get", "k"], 2, ("--retries",)),
    ("distcache-missing-key", [*DC, "--cluster", "{good}", "get"], 2, ("Missing argument",)),
    ("distcache-unknown-command", [*DC, "--cluster", "{good}", "frob"], 2, ("frob",)),
    ("distcache-bench-negative-keys", [*DC, "--cluster", "{good}", "bench", "--keys", "-5"], 1, ("--keys",)),
    (
        "distcache-value-file-dir",
        [*DC, "--cluster", "{good}", "put", "k", "--value-file", "{dir}"],
        1,
        ("cannot read",),
    ),
    # distcache-ctl
    ("ctl-cluster-dir", [*CTL, "--cluster", "{dir}", "status"], 1, ("is a directory",)),
    ("ctl-controller-port", [*CTL, "--controller", "127.0.0.1:99999", "status"], 1, ("--controller", "99999")),
    ("ctl-controller-no-port", [*CTL, "--controller", "127.0.0.1", "status"], 1, ("--controller", "HOST:PORT")),
    ("ctl-hot-top-0", [*CTL, "--controller", "127.0.0.1:9", "hot", "--top", "0"], 2, ("--top",)),
    # the controller daemon
    ("controller-cluster-dir", [*CONTROLLER, "--cluster", "{dir}"], 2, ("--cluster", "is a directory")),
    (
        "controller-p4info-missing",
        ["controller", "--cluster", "{good}", "--p4info", "{missing}", "--shim-dir", "{dir}"],
        2,
        ("--p4info", "no such file"),
    ),
    (
        "controller-p4info-not-one",
        ["controller", "--cluster", "{good}", "--p4info", "{not_p4info}", "--shim-dir", "{dir}"],
        2,
        ("not a P4Info",),
    ),
    (
        "controller-listen-wildcard",
        [*CONTROLLER, "--cluster", "{good}", "--listen", "0.0.0.0:5000"],
        2,
        ("--listen", "every interface"),
    ),
    (
        "controller-listen-port",
        [*CONTROLLER, "--cluster", "{good}", "--listen", "127.0.0.1:65536"],
        2,
        ("--listen", "65536"),
    ),
    ("controller-log-dir", [*CONTROLLER, "--cluster", "{good}", "--log-file", "{dir}"], 2, ("--log-file",)),
    (
        "controller-shim-dir-missing",
        ["controller", "--cluster", "{good}", "--p4info", "{p4info}", "--shim-dir", "{missing}"],
        2,
        ("--shim-dir",),
    ),
    (
        "controller-state-unknown-switch",
        [*CONTROLLER, "--cluster", "{good}", "--state-file", "{state_unknown}"],
        2,
        ("names switch 'sp9'", "move it away"),
    ),
    (
        "controller-switches-not-object",
        [*CONTROLLER, "--cluster", "{good}", "--switches", "{not_object}"],
        2,
        ("switch process list",),
    ),
    # the agent
    ("agent-cluster-missing", [*AGENT, "--cluster", "{missing}"], 2, ("--cluster", "no such file")),
    (
        "agent-not-cache-switch",
        ["agent", "--switch", "cl0", "--p4info", "{p4info}", "--shim-dir", "{dir}", "--cluster", "{good}"],
        2,
        ("not a cache switch",),
    ),
    (
        "agent-unknown-switch",
        ["agent", "--switch", "zz", "--p4info", "{p4info}", "--shim-dir", "{dir}", "--cluster", "{good}"],
        2,
        ("no switch named 'zz'",),
    ),
    ("agent-device-config-dir", [*AGENT, "--cluster", "{good}", "--device-config", "{dir}"], 2, ("--device-config",)),
    ("agent-listen-port-0", [*AGENT, "--cluster", "{good}", "--listen", "127.0.0.1:0"], 2, ("--listen", "port 0")),
    # the shim
    ("shim-cluster-dir", [*SHIM, "--cluster", "{dir}"], 2, ("--cluster", "is a directory")),
    (
        "shim-unknown-server",
        ["shim", "--server", "zz", "--redis-url", "unix:///x.sock", "--control", "unix:/x.sock", "--cluster", "{good}"],
        2,
        ("no storage server 'zz'",),
    ),
    ("shim-listen-not-ip", [*SHIM, "--cluster", "{good}", "--listen", "999.1.1.1"], 2, ("--listen",)),
    (
        "shim-redis-url",
        ["shim", "--server", "r0s0", "--redis-url", "foo://x", "--control", "unix:/x.sock", "--cluster", "{good}"],
        2,
        ("--redis-url",),
    ),
    (
        "shim-control",
        ["shim", "--server", "r0s0", "--redis-url", "unix:///x.sock", "--control", "xyz", "--cluster", "{good}"],
        2,
        ("--control",),
    ),
    ("shim-redis-unreachable", [*SHIM, "--cluster", "{good}", "--listen", "127.0.0.1"], 1, ("cannot start",)),
    # the softswitch
    ("softswitch-grpc-port", [*SOFTSWITCH, "--grpc-addr", "127.0.0.1:65536"], 2, ("--grpc-addr", "65536")),
    (
        "softswitch-grpc-host",
        [*SOFTSWITCH, "--grpc-addr", "no-such-host.invalid:5000"],
        2,
        ("--grpc-addr", "not an IP address"),
    ),
    ("softswitch-device-id", [*SOFTSWITCH, "--device-id", str(1 << 64)], 2, ("--device-id",)),
    ("softswitch-log-dir", [*SOFTSWITCH, "--log-file", "{dir}"], 2, ("--log-file",)),
    ("softswitch-pcap-file", [*SOFTSWITCH, "--pcap-dir", "{good}"], 2, ("--pcap-dir",)),
    # the Mininet demo and `make up` (checked before anything needs root)
    ("demo-topo-dir", ["dcnet.demo", "--topo", "{dir}"], 2, ("--topo", "is a directory")),
    ("demo-slots", ["dcnet.demo", "--slots", "100000"], 2, ("--slots", "cache_slots", "1..4096")),
    ("demo-threshold", ["dcnet.demo", "--threshold", "0"], 2, ("--threshold", "hh_threshold")),
    ("demo-keys", ["dcnet.demo", "--keys", "-5"], 2, ("--keys",)),
    ("demo-duration", ["dcnet.demo", "--duration", "nan"], 2, ("--duration",)),
    ("distcache-bench-duration-nan", [*DC, "--cluster", "{good}", "bench", "--duration", "nan"], 1, ("--duration",)),
    ("up-topo-missing", ["dcnet.up", "--topo", "{missing}"], 2, ("--topo", "no such file")),
]
# where the compiled shim words it otherwise: Go's JSON reader, as the RFC, has no NaN
SHIM_SAYS = {"rate_nan": ("not JSON", "invalid character 'N'")}
# every bad topology, through every entry point that reads one
for name, (_, words) in BAD_TOPOLOGIES.items():
    CASES += [
        (f"distcache-{name}", [*DC, "--cluster", f"{{{name}}}", "get", "k"], 1, words),
        (f"ctl-{name}", [*CTL, "--cluster", f"{{{name}}}", "status"], 1, words),
        (f"controller-{name}", [*CONTROLLER, "--cluster", f"{{{name}}}"], 2, words),
        (f"agent-{name}", [*AGENT, "--cluster", f"{{{name}}}"], 2, words),
        # the shim checks what every field holds, not what one field says of another's address
        *(
            []
            if name == "controller_any"
            else [(f"shim-{name}", [*SHIM, "--cluster", f"{{{name}}}"], 2, SHIM_SAYS.get(name, words))]
        ),
        (f"demo-{name}", ["dcnet.demo", "--topo", f"{{{name}}}"], 2, words),
        (f"up-{name}", ["dcnet.up", "--topo", f"{{{name}}}"], 2, words),
    ]


@pytest.fixture(scope="module")
def answers(files: dict[str, Path]) -> dict[str, subprocess.CompletedProcess]:
    """Every case's run, a few at once: each is a Python start-up and an argument check, and one after
    another they took nearly three minutes of make test."""
    with ThreadPoolExecutor(max(2, os.cpu_count() or 1)) as pool:
        jobs = {name: pool.submit(run, argv, files) for name, argv, _, _ in CASES}
    return {name: job.result() for name, job in jobs.items()}


@pytest.mark.parametrize(("name", "code", "words"), [(c[0], *c[2:]) for c in CASES], ids=[c[0] for c in CASES])
def test_entry_point_says_one_line(
    answers: dict[str, subprocess.CompletedProcess], name: str, code: int, words: tuple[str]
) -> None:
    assert_one_line(answers[name], code, *words)


# -- the cluster description's checks ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("spines", 0, "1..63"),
        ("spines", 64, "1..63"),
        ("spines", True, "got true"),
        ("spines", 2.0, "got 2.0"),
        ("storage_racks", 65, "1..64"),
        ("client_racks", 128, "1..127"),
        ("servers_per_rack", 251, "1..250"),
        ("clients_per_rack", None, "got null"),
        ("cache_slots", p4names.CACHE_SLOTS + 1, f"1..{p4names.CACHE_SLOTS}"),
        ("cache_slots", 0, "1.."),
        ("hh_threshold", 1 << p4names.HH_THRESHOLD_BITS, "16-bit"),
        ("hh_threshold", 0, "1..65535"),
        ("hh_window_shift", p4names.TIMESTAMP_BITS, "0..47"),
        ("hh_window_shift", -1, "0..47"),
        ("grpc_base_port", 65536, "0..65535"),
        ("grpc_base_port", 65500, "over 65535"),
        ("agent_base_port", 65500, "over 65535"),
        ("agent_base_port", 50051, "also used by"),
        ("insert_rate", 0, "> 0"),
        ("insert_rate", float("inf"), "> 0"),
        ("insert_burst", 0, ">= 1"),
        ("server_rate", -1, ">= 0"),
        ("server_rate", float("nan"), "NaN"),
        ("server_burst", 1.5, "integer"),
        ("server_queue", 11, "0..10"),
        ("switch_rate", 2.5, "whole number"),
        ("switch_burst", False, "got false"),
        ("dead_after_ms", 0, "1..60000"),
        ("liveness_hold_ms", -5, "0..60000"),
        ("probe_skip_ms", -1, "0..60000"),
        ("dead_after_max_ms", 60_001, "1..60000"),
        ("dead_after_max_ms", 29, "at least dead_after_ms (30;"),
        ("hybrid_rate", "fast", "number"),
        ("mechanism", 7, "unknown mechanism"),
        ("mechanism", True, "got true"),
        ("redis_appendfsync", "sometimes", "always"),
        ("redis_maxmemory_policy", "lru-ish", "allkeys-lru"),
        ("redis_maxmemory", "lots", "256mb"),
        ("key_secret", "not hex", "hex digits"),
        ("description", 3, "string"),
        ("controller_address", "0.0.0.0:50050", "every interface"),
        ("controller_address", "[::]:50050", "every"),
        ("controller_address", "10.1.0.1:50050", "data network"),
        ("controller_address", "10.255.0.1:1", "data network"),
        ("controller_address", "224.0.0.1:50050", "unicast"),
        ("controller_address", "ctl.example:50050", "IP address"),
        ("controller_address", "127.0.0.1:0", "port 0"),
        ("controller_address", "127.0.0.1", "HOST:PORT"),
        ("controller_address", 50050, "HOST:PORT"),
        ("metrics_address", "0.0.0.0:9464", "every interface"),
        ("metrics_address", "10.2.0.1:9464", "data network"),
        ("metrics_address", "127.0.0.1:50050", "also the controller's"),
        ("metrics_address", None, 'or ""'),
        ("metrics_address", "127.0.0.1", "HOST:PORT"),
    ],
)
def test_cluster_field_is_checked(field: str, value: object, words: str) -> None:
    with pytest.raises(ClusterError) as e:
        Cluster(**{field: value})
    msg = str(e.value)
    assert msg.startswith(f"{field}:") and words in msg and "\n" not in msg, msg


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("spines", 63),
        ("storage_racks", 64),
        ("client_racks", 127),
        ("cache_slots", p4names.CACHE_SLOTS),
        ("hh_threshold", (1 << p4names.HH_THRESHOLD_BITS) - 1),
        ("hh_window_shift", p4names.TIMESTAMP_BITS - 1),
        ("switch_rate", 100),
        ("switch_rate", 100.0),
        ("server_rate", 0.5),
        ("controller_address", "localhost:50050"),
        ("controller_address", "[::1]:50050"),
        ("controller_address", "192.168.7.2:50050"),
        ("metrics_address", ""),
        ("metrics_address", "[::1]:9100"),
        ("mechanism", 4),
    ],
)
def test_cluster_limits_are_inclusive(field: str, value: object) -> None:
    c = Cluster(**{field: value})
    assert Cluster.from_json(c.to_json()) == c


def test_cluster_file_errors_name_the_file(tmp_path: Path) -> None:
    cases = {tmp_path: "is a directory", tmp_path / "missing.json": "no such file"}
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe")
    cases[tmp_path / "bin.json"] = "not a text (UTF-8) file"
    for path, words in cases.items():
        with pytest.raises(ClusterError, match=re.escape(words)) as e:
            Cluster.load(path)
        assert str(e.value).startswith(f"{path}: ")


def test_a_cluster_that_does_not_fit_the_switch_tables_is_not_deployable() -> None:
    """The simulator's paper-scale clusters are valid descriptions; a deployment needs every switch's
    ports to fit its port_kind table (p4src size.p4 MAX_PORTS)."""
    big = Cluster(spines=48, storage_racks=48, servers_per_rack=32)  # fig. 9(c)'s largest point
    with pytest.raises(ClusterError, match=f"over the {p4names.MAX_PORTS}"):
        big.check_deployable()
    Cluster(spines=32, storage_racks=32, servers_per_rack=32).check_deployable()


# -- the controller's state file ----------------------------------------------------------------------------------


def test_state_file_naming_an_unknown_switch_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "controller.state.json"
    ControllerState(failed={"sp1": Failure(admin=True, since=1.0)}).save(path)
    assert ControllerState.load(path, Cluster(spines=2)).failed["sp1"].admin  # sp1 exists with 2 spines
    with pytest.raises(ValueError, match=r"names switch 'sp1' \(failed\), which the cluster does not have") as e:
        ControllerState.load(path, Cluster(spines=1))
    assert "move it away" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ({"epoch": -1}, "epoch: expected an integer >= 0"),
        ({"epoch": True}, "epoch"),
        ({"mechanism": "magic"}, "mechanism"),
        ({"failed": []}, "failed"),
        ({"failed": {"sp0": {"admin": "yes", "since": 1}}}, "failed.sp0"),
        ({"failed": {"sp0": {"since": 1}}}, "failed.sp0"),
        ({"replicated": ["zz"]}, "replicated"),
        ({"replicated": [digest("k").hex()[:-2]]}, "replicated"),
        ({"last_failover_s": "soon"}, "last_failover_s"),
        ({"surprise": 1}, "unknown field"),
        ([], "JSON object"),
    ],
)
def test_state_file_fields_are_checked(tmp_path: Path, state: object, words: str) -> None:
    path = tmp_path / "controller.state.json"
    path.write_text(json.dumps(state))
    with pytest.raises(ValueError, match="move it away") as e:
        ControllerState.load(path, Cluster())
    assert words in str(e.value), str(e.value)
