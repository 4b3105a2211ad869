"""P4Runtime tests: softswitch and BMv2 processes on loopback, spoken to over P4Runtime (conformance,
the controller's and agents' clients, digests, packet I/O)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from softswitch.ebpf import build, layout
from tests.common.marks import mark_folder
from tests.common.p4rt_targets import BMV2_AVAILABLE, Target, bmv2_target, softswitch_target


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, Path(__file__).parent, "p4runtime")


TARGETS = [
    "softswitch",
    pytest.param(
        "bmv2",
        marks=pytest.mark.skipif(not BMV2_AVAILABLE, reason="simple_switch_grpc and p4c-bm2-ss are not both on PATH"),
    ),
]


@pytest.fixture(scope="module", params=TARGETS)
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """A switch running the DistCache pipeline with a primary client: softswitch, and BMv2 where installed,
    so a module's requests run on both (one switch per module and target)."""
    if request.param == "softswitch":
        with softswitch_target() as t:
            yield t
    else:
        with bmv2_target(Path(tmp_path_factory.mktemp("bmv2"))) as t:
            yield t


@pytest.fixture(scope="session")
def ebpf_build(tmp_path_factory: pytest.TempPathFactory) -> build.BpfBuild:
    """The PSA build of p4src/ as a BPF object (p4c-ebpf, clang, llc), once per session, through a build cache
    of its own (the cache's reuse is tested in test_ebpf_build.py)."""
    return build.cached({}, tmp_path_factory.mktemp("ebpf"))


@pytest.fixture(scope="session")
def ebpf_layouts(ebpf_build: build.BpfBuild) -> dict[str, layout.MapLayout]:
    """Its maps' layouts, from its BTF."""
    return layout.load(ebpf_build.object_file)
