"""Run the PTF tests against one data-plane target, inside a private network namespace.

    python -m tests.ptf.run --target softswitch|bmv2|ebpf [--pattern X] [--keep-logs DIR]

What it does, in the spirit of p4lang/tutorials' ``runptf.sh`` and PI's ``ptf_runner.py``:

1. creates a network namespace ``dcptf-<pid>`` holding ``lo`` and 8 veth pairs
   (switch side / test side, from ``tests/ptf/port_map.<target>.json``), with IPv6
   and TX checksum offload off and no addresses or routes: nothing leaves it;
2. starts the switch there with no pipeline (softswitch, or ``simple_switch_grpc --no-p4``)
   and waits for its P4Runtime port;
3. writes the pipeline files the tests push (P4Info + device config: empty for
   softswitch, the BMv2 JSON compiled by ``p4c-bm2-ss`` for bmv2);
4. runs ``ptf`` on ``tests/ptf/tests`` inside the namespace, streaming its output;
5. always tears everything down, and ends with one line ``N passed, N failed``.

Exit status: 0 when every test passed and at least one ran, 1 otherwise, 2 on a setup error,
130 when interrupted (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.netns import NamespaceError, delete_namespace, make_veth_namespace
from harness.p4c import CompileError, compile_v1model
from harness.processes import stop_group
from harness.switch import (
    BMV2_COMPILER,
    BMV2_SWITCH,
    DEVICE_ID,
    GRPC_ADDR,
    P4_V1MODEL,
    TARGETS,
    SwitchProcess,
    SwitchSpec,
    SwitchStartError,
    how_to_get,
    source_env,
)
from harness.switch import CPU_PORT as CPU_PORT  # where the tests' packet-outs enter (test_p4_constants)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TEST_DIR = HERE / "tests"
P4_SOURCE = P4_V1MODEL

# unittest at verbosity 2: "name ... ok" per test, then "Ran N tests in Xs" and "OK" / "FAILED (failures=1, ...)"
RESULT_RE = re.compile(
    r"^(?P<name>\S+)(?: \([\w.]+\))? \.\.\. (?P<res>ok|FAIL|ERROR|skipped|expected failure"
    r"|unexpected success)\b"
)
RAN_RE = re.compile(r"^Ran (\d+) tests? in ")
VERDICT_RE = re.compile(r"^(OK|FAILED)(?: \((.*)\))?\s*$")


class SetupError(RuntimeError):
    """The harness could not bring the test bed up."""


@dataclass
class Tally:
    """Test results, from the per-test lines and (authoritative) unittest's closing lines."""

    per_test: dict[str, int] = field(default_factory=lambda: {"passed": 0, "failed": 0, "skipped": 0})
    ran: int | None = None
    verdict: dict[str, int] | None = None

    def feed(self, line: str) -> None:
        line = line.rstrip("\n")
        m = RESULT_RE.match(line)
        if m:
            res = m["res"]
            key = "passed" if res in ("ok", "expected failure") else "skipped" if res == "skipped" else "failed"
            self.per_test[key] += 1
            return
        m = RAN_RE.match(line)
        if m:
            self.ran = int(m[1])
            return
        m = VERDICT_RE.match(line)
        if m and self.ran is not None:
            counts = {}
            for part in (m[2] or "").split(","):
                k, _, v = part.strip().partition("=")
                if v.isdigit():
                    counts[k] = int(v)
            self.verdict = counts

    def result(self) -> tuple[int, int, int]:
        """(passed, failed, skipped); failed counts failures, errors and unexpected successes."""
        if self.ran is not None and self.verdict is not None:
            v = self.verdict
            failed = v.get("failures", 0) + v.get("errors", 0) + v.get("unexpected successes", 0)
            skipped = v.get("skipped", 0)
            return self.ran - failed - skipped, failed, skipped
        t = self.per_test
        return t["passed"], t["failed"], t["skipped"]


def sh(*cmd: str, check: bool = True, **kw) -> subprocess.CompletedProcess:  # noqa: ANN003
    return subprocess.run(cmd, check=check, text=True, capture_output=True, **kw)


def load_port_map(target: str) -> list[dict]:
    path = HERE / f"port_map.{target}.json"
    ports = json.loads(path.read_text())["ports"]
    for p in ports:
        if not {"port", "switch_iface", "ptf_iface"} <= p.keys():
            raise SetupError(f"{path}: every port needs port, switch_iface and ptf_iface: {p}")
    return ports


class TestBed:
    """The namespace, the switch and the pipeline files of one run; ``close`` undoes all of it."""

    def __init__(self, target: str, ports: list[dict], workdir: Path, p4src: Path = P4_SOURCE) -> None:
        self.target, self.ports, self.workdir, self.p4src = target, ports, workdir, p4src
        self.ns = f"dcptf-{os.getpid()}"
        self.ns_created = False
        self.switch: SwitchProcess | None = None
        self.ptf: subprocess.Popen | None = None
        self.env = source_env(REPO / "mininet")  # this worktree's packages first, for the switch and ptf

    def in_ns(self, *cmd: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *cmd]

    # -- namespace ---------------------------------------------------------------------------
    def make_namespace(self) -> None:
        try:
            make_veth_namespace(self.ns, [(p["switch_iface"], p["ptf_iface"]) for p in self.ports])
        except NamespaceError as e:
            raise SetupError(str(e)) from None
        finally:
            self.ns_created = Path(f"/run/netns/{self.ns}").exists()  # whatever part of it exists is ours to delete

    # -- switch ------------------------------------------------------------------------------
    def start_switch(self) -> None:
        """Start the switch in the namespace with no pipeline (harness.switch: the one command line)."""
        spec = SwitchSpec(
            self.target,
            [(p["port"], p["switch_iface"]) for p in self.ports],
            log_file=self.workdir / "switch.log" if self.target != "bmv2" else None,
        )
        self.switch = SwitchProcess(spec, self.workdir / "switch.out", netns=self.ns)
        self.switch.start(self.env)

    def wait_for_switch(self, timeout: float = 30.0) -> float:
        """Block until the switch's gRPC port accepts inside the namespace; the seconds it took."""
        assert self.switch is not None
        try:
            return self.switch.wait_ready(timeout)
        except SwitchStartError as e:
            raise SetupError(str(e)) from None

    # -- pipeline files ----------------------------------------------------------------------
    def pipeline_files(self) -> tuple[Path, Path]:
        if self.target == "bmv2":
            try:
                built = compile_v1model(self.p4src)
            except CompileError as e:
                raise SetupError(str(e)) from None
            return built.p4info, built.json
        if str(REPO) not in sys.path:
            sys.path.insert(0, str(REPO))
        from google.protobuf import text_format

        from softswitch.dataplane import PROGRAM

        p4info, config = self.workdir / "softswitch.p4info.txt", self.workdir / "softswitch.config"
        p4info.write_text(text_format.MessageToString(PROGRAM.p4info()))
        config.write_bytes(b"")
        return p4info, config

    # -- ptf ---------------------------------------------------------------------------------
    def ptf_command(self, p4info: Path, device_config: Path, specs: list[str]) -> list[str]:
        params = (
            f"target={self.target!r};grpc_addr={GRPC_ADDR!r};p4info={str(p4info)!r};"
            f"device_config={str(device_config)!r};device_id={DEVICE_ID};"
            f"switch_pgid={self.switch.pid if self.switch is not None else 0}"  # to stop it, as a busy host does
        )
        ifaces = [a for p in self.ports for a in ("-i", f"{p['port']}@{p['ptf_iface']}")]
        return [
            sys.executable,
            ptf_binary(),
            "--test-dir",
            str(TEST_DIR),
            "--pypath",
            str(REPO),
            "--pypath",
            str(REPO / "mininet"),
            "--log-dir",
            str(self.workdir / "ptf"),
            "--test-params",
            params,
            *ifaces,
            *specs,
        ]

    def run_ptf(self, cmd: list[str], tally: Tally) -> int:
        with open(self.workdir / "ptf.out", "w") as transcript:
            self.ptf = subprocess.Popen(
                self.in_ns(*cmd),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=REPO,
                text=True,
                bufsize=1,
                start_new_session=True,
            )
            assert self.ptf.stdout is not None
            for line in self.ptf.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                transcript.write(line)
                tally.feed(line)
            return self.ptf.wait()

    def list_tests(self) -> list[str]:
        """Names (module.Class) of every test ptf would run, without touching any interface."""
        r = sh(
            sys.executable,
            ptf_binary(),
            "--test-dir",
            str(TEST_DIR),
            "--pypath",
            str(REPO),
            "--pypath",
            str(REPO / "mininet"),
            "--log-file",
            str(self.workdir / "ptf-list.log"),
            "--list-test-names",
            env=self.env,
            cwd=REPO,
            check=False,
        )
        if r.returncode != 0:
            raise SetupError(f"ptf --list-test-names failed:\n{r.stdout}{r.stderr}")
        return [ln.strip() for ln in r.stdout.splitlines() if ln.strip() and "." in ln and " " not in ln.strip()]

    # -- teardown ----------------------------------------------------------------------------
    def close(self) -> None:
        stop_group(self.ptf)
        if self.switch is not None:
            self.switch.stop()
        if self.ns_created:
            if delete_namespace(self.ns):  # what is still inside was started by this run
                self.ns_created = False
            else:
                print(f"warning: could not delete namespace {self.ns}", file=sys.stderr)


def ptf_binary() -> str:
    beside = Path(sys.executable).parent / "ptf"
    found = str(beside) if beside.exists() else shutil.which("ptf")
    if not found:
        raise SetupError("the `ptf` command is not installed (pip install ptf)")
    return found


def check_target(target: str) -> None:
    if target == "bmv2":
        missing = [b for b in (BMV2_SWITCH, BMV2_COMPILER) if shutil.which(b) is None]
        if missing:
            raise SetupError(f"--target bmv2: {how_to_get(missing)}; or use --target softswitch")
    if target == "ebpf":
        from softswitch.ebpf import build

        if missing := build.missing_tools():
            raise SetupError(f"--target ebpf: {how_to_get(missing)}")
    for tool in ("ip", "ethtool", "sysctl"):
        if shutil.which(tool) is None:
            raise SetupError(f"{tool} is not installed")
    if os.geteuid() != 0:
        raise SetupError("run as root: the harness creates a network namespace and veth pairs")


def select(all_tests: list[str], pattern: str | None) -> list[str]:
    """Test specs for ptf: all tests, or those whose name matches ``pattern`` (glob, else substring)."""
    if not pattern:
        return []
    glob = any(c in pattern for c in "*?[")
    return [t for t in all_tests if (fnmatch.fnmatchcase(t, pattern) if glob else pattern in t)]


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.ptf.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=TARGETS, default="softswitch")
    ap.add_argument("--pattern", help="run only tests whose module.Class name contains this (or matches this glob)")
    ap.add_argument("--keep-logs", metavar="DIR", help="copy the switch, ptf and pipeline files here")
    ap.add_argument(
        "--p4src",
        type=Path,
        default=P4_SOURCE,
        metavar="FILE",
        help=f"P4 program compiled for TARGET=bmv2 (default {P4_SOURCE.relative_to(REPO)})",
    )
    args = ap.parse_args(argv)

    # Ctrl-C and SIGTERM: tear down, then exit (SIGINT explicitly: a background job inherits it ignored)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    tally, rc, interrupted = Tally(), 2, False
    workdir = Path(tempfile.mkdtemp(prefix="dcptf-"))
    bed: TestBed | None = None
    try:
        check_target(args.target)
        bed = TestBed(args.target, load_port_map(args.target), workdir, p4src=args.p4src)
        specs: list[str] = []
        if args.pattern:
            specs = select(bed.list_tests(), args.pattern)
            if not specs:
                raise SetupError(f"no test matches --pattern {args.pattern!r}")
        t0 = time.monotonic()
        bed.make_namespace()
        bed.start_switch()
        p4info, device_config = bed.pipeline_files()  # compiles while the switch starts
        bed.wait_for_switch()
        print(
            f"ptf harness: {args.target} up in namespace {bed.ns} ({time.monotonic() - t0:.1f}s), "
            f"P4Runtime {GRPC_ADDR}; "
            + (f"logs kept in {args.keep_logs}" if args.keep_logs else "--keep-logs DIR keeps the logs"),
            flush=True,
        )
        ptf_rc = bed.run_ptf(bed.ptf_command(p4info, device_config, specs), tally)
        rc = 0 if ptf_rc == 0 else 1
        if bed.switch is not None and bed.switch.returncode() is not None:
            print(
                f"error: the switch exited with code {bed.switch.returncode()} during the run\n" + bed.switch.logs(),
                file=sys.stderr,
            )
            rc = 1
        if tally.ran is None:
            print(f"error: ptf exited with code {ptf_rc} without finishing the tests", file=sys.stderr)
            rc = 1
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: tearing down", file=sys.stderr)
    finally:
        # a second Ctrl-C or SIGTERM must not cut the teardown short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if bed is not None:
            bed.close()
        if args.keep_logs:
            dest = Path(args.keep_logs)
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copytree(workdir, dest, dirs_exist_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    passed, failed, skipped = tally.result()
    if skipped:
        print(f"{skipped} skipped")
    print(f"{passed} passed, {failed} failed", flush=True)
    if interrupted:
        return 130
    if rc == 0 and (failed or not passed):
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
