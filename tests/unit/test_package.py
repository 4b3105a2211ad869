"""The package installs whole: a wheel built from the checkout, installed into a fresh virtual environment (its
dependencies borrowed from the project's, never its source tree), runs the project's commands.  An editable
install hides a package left out of the build (softswitch.server once was); a wheel does not."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = (
    "distcache",
    "p4rt",
    "harness",
    "agent",
    "softswitch",
    "controller",
    "client_lib",
    "loadgen",
    "dcnet",  # in mininet/
)
COMMANDS = (
    ["python", "-m", "softswitch", "--help"],
    ["distcache", "--help"],
    ["distcache-ctl", "--help"],
    ["python", "-m", "controller", "--help"],
)
# what the build copy leaves out: setuptools builds in its source tree (build/lib, *.egg-info), and build/ is ours
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "runs", "__pycache__", "*.egg-info", ".*_cache")

pytestmark = pytest.mark.timeout(240)


def run(argv: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """``argv`` with no PYTHONPATH: a source tree on it would be taken for the installed package (pip then
    skips the install as already satisfied, and the commands import the checkout)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def _install(tmp: Path) -> tuple[Path, Path]:
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=NOT_SOURCE)
    pip = [sys.executable, "-m", "pip"]
    build = run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp), str(src)], tmp, 180)
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = tmp.glob("distcache_p4-*.whl")
    venv = tmp / "venv"
    made = run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], tmp)
    assert made.returncode == 0, made.stderr
    install = run([*pip, "--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps", str(wheel)], tmp)
    assert install.returncode == 0, install.stdout + install.stderr
    # the dependencies from the project's environment: a plain path, so its .pth files (the editable install's
    # finder, which would import the checkout) are not run
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return wheel, venv / "bin"


def test_the_wheel_installs_whole_and_its_commands_run(tmp_path: Path) -> None:
    """One test, built, installed and run in a row: what the suite runs meanwhile never sees its venv."""
    with tempfile.TemporaryDirectory(prefix="wheel-check-") as d:
        wheel, bin_dir = _install(Path(d))
        names = zipfile.ZipFile(wheel).namelist()
        folders = {name.rsplit("/", 1)[0] for name in names if name.endswith(".py")}
        on_disk = {
            str(p.parent.relative_to(REPO)).removeprefix("mininet/")
            for pkg in PACKAGES
            for p in (REPO / ("mininet/dcnet" if pkg == "dcnet" else pkg)).rglob("*.py")
            if "__pycache__" not in p.parts
        }
        assert on_disk - folders == set(), f"packages missing from the wheel: {sorted(on_disk - folders)}"
        assert {"distcache/proto/shim.proto", "distcache/proto/controller.proto"} <= set(names)
        assert not [name for name in names if name.startswith(("tests/", "bench/", "model/", "tools/", "mininet/"))]
        for argv in COMMANDS:
            # cwd: not the checkout, whose folders would be imported instead of the wheel's
            proc = run([str(bin_dir / argv[0]), *argv[1:]], tmp_path, 60)
            assert proc.returncode == 0, (argv, proc.stdout[-2000:] + proc.stderr[-2000:])
            assert "usage" in proc.stdout.lower(), (argv, proc.stdout[:500])
        code = "import softswitch.server, dcnet; print(dcnet.__file__)"
        where = run([str(bin_dir / "python"), "-c", code], tmp_path)
        assert where.returncode == 0, where.stderr
        assert where.stdout.startswith(str(bin_dir.parent)), where.stdout
