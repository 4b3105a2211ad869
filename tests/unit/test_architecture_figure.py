"""The README's architecture picture is drawn from the code (tools/draw_architecture.py): every switch and
host the demo's cluster has is in it, and the checked-in SVG shows what the script draws today."""

from __future__ import annotations

import html
import re
from pathlib import Path

from distcache.cluster import Cluster, is_cache_switch
from tools.draw_architecture import OUT, TOPOLOGY, draw


def svg_text(path: Path) -> set[str]:
    """The text of every <text> element of an SVG drawn with svg.fonttype 'none'."""
    return {html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", path.read_text())}


def test_the_picture_has_every_switch_host_and_agent_of_the_demo(tmp_path: Path) -> None:
    cluster = Cluster.load(TOPOLOGY)
    lines = {line for label in draw(cluster, tmp_path) for line in label.split("\n")}
    for sw in cluster.switches():
        assert sw.name in lines, sw.name
        if is_cache_switch(sw):
            assert f"agent {sw.name}" in lines, sw.name
    for h in cluster.hosts():
        assert h.name in lines, h.name
    assert (tmp_path / "architecture.png").stat().st_size > 10_000
    assert svg_text(tmp_path / "architecture.svg") == lines


def test_the_checked_in_picture_is_the_one_the_script_draws(tmp_path: Path) -> None:
    draw(Cluster.load(TOPOLOGY), tmp_path)
    drawn = svg_text(tmp_path / "architecture.svg")
    assert svg_text(OUT / "architecture.svg") == drawn, "stale: run make diagram and commit docs/figures/architecture.*"
    assert (OUT / "architecture.png").stat().st_size > 10_000
