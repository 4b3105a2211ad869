"""Draw the architecture picture of the README from the cluster `make run` starts.

The boxes and links come from ``Cluster`` (the same switches, hosts and links the launcher builds from
``topologies/demo-2spine-2rack.json``), so the picture cannot show a switch the demo lacks; the two read
paths follow the client-rack leaf's routing (a read goes to the key's spine or to its storage leaf, the less
loaded; a hit is answered by that cache, a miss goes on to the key's shim and its redis-server).

    python -m tools.draw_architecture            # writes docs/figures/architecture.svg and .png
    python -m tools.draw_architecture --out DIR

The SVG keeps its text as text (``svg.fonttype: none``), so ``tests/unit/test_architecture_figure.py`` can
hold the checked-in picture's labels to what this script draws today.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from distcache.cluster import Cluster, Role, is_cache_switch

REPO = Path(__file__).resolve().parents[1]
TOPOLOGY = REPO / "topologies" / "demo-2spine-2rack.json"
OUT = REPO / "docs" / "figures"

HIT, MISS, CONTROL = "#2e7d32", "#e65100", "#1565c0"
Y_CONTROLLER, Y_SPINE, Y_LEAF, Y_HOST = 9.0, 6.6, 4.0, 1.4


@dataclass(frozen=True)
class Box:
    """One node of the picture: its centre, size and the text it shows."""

    name: str
    x: float
    y: float
    text: str
    color: str
    w: float = 1.7
    h: float = 0.9


def spread(names: list[str], lo: float, hi: float) -> dict[str, float]:
    """x positions for ``names`` spread evenly over [lo, hi]."""
    if len(names) == 1:
        return {names[0]: (lo + hi) / 2}
    step = (hi - lo) / (len(names) - 1)
    return {n: lo + i * step for i, n in enumerate(names)}


def layout(cluster: Cluster) -> dict[str, Box]:
    """Every switch and host of ``cluster`` as a box: spines on top, client racks left, storage racks right."""
    spines = [s.name for s in cluster.switches() if s.role == Role.SPINE]
    client_leaves = [s.name for s in cluster.switches() if s.role == Role.CLIENT_LEAF]
    storage_leaves = [s.name for s in cluster.switches() if s.role == Role.STORAGE_LEAF]
    boxes: dict[str, Box] = {}
    for name, x in spread(spines, 4.2, 9.8).items():
        boxes[name] = Box(name, x, Y_SPINE, f"{name}\nspine: cache", "#fff3e0")
    for name, x in spread(client_leaves, 0.9, 4.9).items():
        boxes[name] = Box(name, x, Y_LEAF, f"{name}\nclient-rack leaf: router", "#e3f2fd", w=2.1)
    for name, x in spread(storage_leaves, 9.1, 13.1).items():
        boxes[name] = Box(name, x, Y_LEAF, f"{name}\nstorage-rack leaf: cache", "#fff3e0", w=2.1)
    for h in cluster.clients():
        boxes[h.name] = Box(h.name, boxes[h.switch].x, Y_HOST, f"{h.name}\nclient_lib / distcache", "#f5f5f5", w=2.1)
    for h in cluster.servers():
        boxes[h.name] = Box(h.name, boxes[h.switch].x, Y_HOST, f"{h.name}\nshim + redis-server", "#fce4ec", w=2.1)
    for sw in cluster.switches():
        if is_cache_switch(sw):
            b = boxes[sw.name]
            dy = 0.95 if sw.role == Role.SPINE else -0.95
            boxes[f"agent-{sw.name}"] = Box(
                f"agent-{sw.name}", b.x + 1.2, b.y + dy, f"agent {sw.name}", "#ede7f6", w=1.3, h=0.5
            )
    boxes["controller"] = Box(
        "controller", 7.0, Y_CONTROLLER, "controller\npartition · health · failover", "#e8eaf6", w=3.6, h=0.8
    )
    return boxes


def edge(ax: plt.Axes, a: Box, b: Box, **style: object) -> None:
    """A line between the borders of two boxes (not their centres, so arrowheads stay visible)."""
    (x0, y0), (x1, y1) = border(a, b), border(b, a)
    ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), **style))  # type: ignore[arg-type]


def border(a: Box, b: Box) -> tuple[float, float]:
    """Where the segment from ``a``'s centre towards ``b``'s leaves ``a``'s box."""
    dx, dy = b.x - a.x, b.y - a.y
    tx = (a.w / 2) / abs(dx) if dx else float("inf")
    ty = (a.h / 2) / abs(dy) if dy else float("inf")
    t = min(tx, ty, 1.0)
    return a.x + dx * t, a.y + dy * t


def path(ax: plt.Axes, boxes: dict[str, Box], hops: list[str], color: str, there: float, back: float) -> None:
    """A request's path over ``hops`` (solid, shifted by ``there`` beside the links) and its reply (dotted,
    shifted by ``back``)."""
    legs = list(itertools.pairwise(hops))
    for a, b in [*legs, *[(b, a) for a, b in reversed(legs)]]:
        ba, bb = boxes[a], boxes[b]
        forward = (a, b) in legs
        shift = there if forward else back
        s = Box(a, ba.x + shift, ba.y, "", "", ba.w, ba.h)
        e = Box(b, bb.x + shift, bb.y, "", "", bb.w, bb.h)
        edge(ax, s, e, arrowstyle="-|>", mutation_scale=11, color=color, lw=1.6, linestyle="-" if forward else ":")


def draw(cluster: Cluster, out: Path) -> list[str]:
    """Draw ``cluster``'s architecture into ``out``/architecture.{svg,png}; returns the labels drawn."""
    boxes = layout(cluster)
    plt.rcParams["svg.fonttype"] = "none"
    plt.rcParams["svg.hashsalt"] = "distcache"
    fig, ax = plt.subplots(figsize=(12, 7.4))
    ax.set_xlim(-0.4, 15.0)
    ax.set_ylim(-1.3, 9.6)
    ax.axis("off")
    for ln in cluster.links():
        edge(ax, boxes[ln.a], boxes[ln.b], arrowstyle="-", color="#9e9e9e", lw=1.0)
    for name, b in boxes.items():
        if name.startswith("agent-"):
            edge(ax, b, boxes[name.removeprefix("agent-")], arrowstyle="-", color=CONTROL, lw=0.9, linestyle="--")
    for sw in cluster.switches():
        if sw.role == Role.CLIENT_LEAF:
            edge(ax, boxes["controller"], boxes[sw.name], arrowstyle="-", color=CONTROL, lw=0.9, linestyle="--")
    for name in [n for n in boxes if n.startswith("agent-")] + [h.name for h in cluster.servers()]:
        edge(ax, boxes["controller"], boxes[name], arrowstyle="-", color=CONTROL, lw=0.6, linestyle="--", alpha=0.5)
    client, leaf = cluster.clients()[0], cluster.client_leaf(0).name
    spine, server = cluster.spine(0).name, cluster.servers()[0]
    path(ax, boxes, [client.name, leaf, spine], HIT, -0.5, -0.3)
    path(ax, boxes, [client.name, leaf, spine, server.switch, server.name], MISS, 0.3, 0.5)
    labels = []
    for b in boxes.values():
        ax.add_patch(
            FancyBboxPatch(
                (b.x - b.w / 2, b.y - b.h / 2), b.w, b.h, boxstyle="round,pad=0.04", fc=b.color, ec="#424242", lw=1
            )
        )
        ax.text(b.x, b.y, b.text, ha="center", va="center", fontsize=8.5)
        labels.append(b.text)
    legend = [
        (HIT, "-", "read hit: the client leaf picks the less loaded of the key's two caches; that cache answers"),
        (MISS, "-", "read miss (and every write): on to the key's shim, which asks Redis; the reply comes back"),
        (CONTROL, "--", "control: P4Runtime (agents: inserts from hot-key digests), gRPC to agents and shims"),
        ("#9e9e9e", "-", "data links (Mininet veths; the switches run softswitch, BMv2 or eBPF)"),
    ]
    for i, (color, style, text) in enumerate(legend):
        y = -0.05 - i * 0.32
        ax.plot([0.0, 0.6], [y, y], color=color, linestyle=style, lw=1.6)
        ax.text(0.75, y, text, va="center", fontsize=8.5)
        labels.append(text)
    title = f"DistCache-P4, as make run starts it ({TOPOLOGY.name})"
    ax.set_title(title, fontsize=11)
    labels.append(title)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "architecture.svg", bbox_inches="tight", metadata={"Date": None})
    fig.savefig(out / "architecture.png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return labels


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.draw_architecture", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help=f"folder for architecture.svg and .png (default {OUT})")
    args = ap.parse_args(argv)
    try:
        draw(Cluster.load(TOPOLOGY), args.out)
    except OSError as e:
        print(f"error: cannot write the picture: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.out / 'architecture.svg'} and {args.out / 'architecture.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
