"""The layers of the code base, as the README's layout table draws them, hold in the imports.

Libraries (what every part shares) import no application; an application imports libraries and never
another application -- it reaches one through its API (gRPC, a command line), not its modules.  Tools that
measure or drive the applications (``bench/``, ``model/``, the tests) may import anything.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LIBRARIES = {"distcache": "distcache", "p4rt": "p4rt", "harness": "harness", "client_lib": "client_lib",
             "simulator": "simulator", "loadgen": "loadgen"}  # fmt: skip
APPLICATIONS = {"controller": "controller", "agent": "agent", "softswitch": "softswitch",
                "dcnet": "mininet/dcnet"}  # fmt: skip
OURS = LIBRARIES | APPLICATIONS


def imports(package: str, folder: str) -> list[tuple[str, str]]:
    """(file, imported module) for every absolute import of one of our packages in ``package``."""
    out = []
    for f in sorted((REPO / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            out += [(str(f.relative_to(REPO)), m) for m in names if m.split(".")[0] in set(OURS) - {package}]
    return out


@pytest.mark.parametrize("package", sorted(LIBRARIES))
def test_a_library_imports_no_application(package: str) -> None:
    bad = [(f, m) for f, m in imports(package, LIBRARIES[package]) if m.split(".")[0] in APPLICATIONS]
    assert bad == [], f"library {package} imports applications: {bad}"


@pytest.mark.parametrize("package", sorted(APPLICATIONS))
def test_an_application_imports_no_other_application(package: str) -> None:
    bad = [(f, m) for f, m in imports(package, APPLICATIONS[package]) if m.split(".")[0] in APPLICATIONS]
    assert bad == [], f"application {package} imports other applications: {bad}"


def test_every_package_has_a_layer() -> None:
    """A new top-level package must be placed in a layer (or among the tools) before it is used."""
    tools = {"bench", "model", "tests", "tools", "mininet", "docs", "p4src", "topologies", "build", "runs"}
    packages = {p.name for p in REPO.iterdir() if (p / "__init__.py").exists()} - tools
    assert packages <= set(OURS), f"packages in no layer: {sorted(packages - set(OURS))}"


def test_the_p4runtime_server_reaches_the_pipeline_only_through_its_interface() -> None:
    """softswitch's P4Runtime server (softswitch/server/) sees the program (softswitch.program: the P4Info)
    and the typed interface of the state it serves (softswitch.target), never a data plane's modules (the
    state that implements the interface, softswitch.dataplane, its ports, the switch process around it), so
    another data plane could be served by the same server."""
    allowed = ("softswitch.server", "softswitch.target", "softswitch.program")
    used = imports("", "softswitch/server")
    bad = [(f, m) for f, m in used if m.split(".")[0] == "softswitch" and not m.startswith(allowed)]
    assert bad == [], f"the P4Runtime server imports more of softswitch than its interface: {bad}"
    assert any(m.startswith("softswitch.target") for _, m in used)  # the reader sees its imports at all


def all_imports(folder: str) -> list[tuple[str, str]]:
    """(file, module) for every absolute import in ``folder``, ours or not."""
    out = []
    for f in sorted((REPO / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                out += [(str(f.relative_to(REPO)), a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.append((str(f.relative_to(REPO)), node.module))
    return out


def test_the_tools_import_no_test_code() -> None:
    """Generators and helpers (tools/) are what the build runs: they may not depend on the test suite."""
    bad = [(f, m) for f, m in all_imports("tools") if m.split(".")[0] == "tests"]
    assert bad == [], f"tools import tests: {bad}"


def test_the_client_library_pulls_in_no_load_generator() -> None:
    """An application imports client_lib: it pays for no numpy, simulator or load generator (loadgen/)."""
    heavy = {"numpy", "scipy", "matplotlib", "simulator", "loadgen"}
    bad = [(f, m) for f, m in all_imports("client_lib") if m.split(".")[0] in heavy]
    assert bad == [], f"client_lib imports {bad}"
    code = "import sys, client_lib, client_lib.client, client_lib.cli; print(sorted(set(sys.modules) & HEAVY))"
    proc = subprocess.run(
        [sys.executable, "-c", code.replace("HEAVY", repr(heavy))], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


CODE = (*LIBRARIES.values(), *APPLICATIONS.values(), "bench", "model", "tools")
MAX_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    """A module longer than that holds more than one job: split it by what each part does."""
    long = {
        str(f.relative_to(REPO)): n
        for folder in CODE
        for f in (REPO / folder).rglob("*.py")
        if (n := len(f.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, long


def test_what_plans_entries_needs_no_p4runtime_connection() -> None:
    """The planner and the P4Info context build and describe entries by name; only p4rt.client talks gRPC."""
    for f in ("p4rt/plan.py", "p4rt/p4info.py"):
        used = [m for g, m in all_imports("p4rt") if g == f]
        assert used, f  # the reader sees the file's imports
        assert not [m for m in used if m in ("p4rt.client", "grpc") or m.startswith("finsy.proto.p4r_grpc")], (f, used)
