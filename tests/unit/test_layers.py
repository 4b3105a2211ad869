"""The layers of the code base, as the README's layout table draws them, hold in the imports.

Libraries (what every part shares) import no application; an application imports libraries and never
another application -- it reaches one through its API (gRPC, a command line), not its modules.  Tools that
measure or drive the applications (``bench/``, ``model/``, the tests) may import anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LIBRARIES = {"distcache": "distcache", "p4rt": "p4rt", "harness": "harness", "client_lib": "client_lib",
             "simulator": "simulator"}  # fmt: skip
APPLICATIONS = {"controller": "controller", "agent": "agent", "shim": "shim", "softswitch": "softswitch",
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
