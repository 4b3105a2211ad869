"""bench.switch's --target: each name measures that target, never another one in its place."""

from __future__ import annotations

import pytest

from bench.switch.config import SetupError
from bench.switch.run import check_targets
from softswitch.ebpf import build


def test_softswitch_is_softswitch() -> None:
    assert check_targets("softswitch") == ["softswitch"]


def test_ebpf_is_the_kernel_target_or_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    if not build.missing_tools():
        assert check_targets("ebpf") == ["ebpf"]  # it measured BMv2 in its place before
    monkeypatch.setattr(build, "missing_tools", lambda: ["p4c-ebpf"])
    with pytest.raises(SetupError, match="--target ebpf needs p4c-ebpf"):
        check_targets("ebpf")
