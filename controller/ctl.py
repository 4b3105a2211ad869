"""``distcache-ctl``: operate a running DistCache deployment through its controller.

Read commands (``status``, ``partitions``, ``hot``) print rich tables, or with
``--json`` one JSON object (field names as in distcache/proto/controller.proto).
``fail``, ``recover`` and ``mechanism`` change the deployment.  The controller
address comes from ``--controller``, ``$DISTCACHE_CONTROLLER``, or the
``controller_address`` of ``--cluster`` / ``$DISTCACHE_CLUSTER``.

Everything shown comes from the deployment and much of it from its clients (keys above all: a
client may write a key named ``[/]`` or ``[bold]x[/bold]``), so every string is printed as data
(rich ``Text``), never parsed as rich markup: a key is shown exactly as written, whatever it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from google.protobuf.message import Message
from rich.console import Console
from rich.table import Table
from rich.text import Text

from distcache.addresses import parse_address
from distcache.cluster import Cluster, ClusterError
from distcache.cmdline import Typer, fail
from distcache.rpc.controller import (
    ControllerClient,
    ControllerRequestError,
    ControllerUnreachableError,
    change_summary,
)
from distcache.rpc.protos import message_dict

app = Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Operate a DistCache deployment through its controller.",
)
out = Console()
err = Console(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object instead of tables")]


def say(*parts: str | Text) -> None:
    """Print one line of data to stdout: strings are shown as they are, never parsed as markup."""
    out.print(Text.assemble(*parts), highlight=False, soft_wrap=True)


def red(text: str) -> Text:
    return Text(text, style="red")


def _print_json(msg: Message) -> None:
    print(json.dumps(message_dict(msg), indent=1, sort_keys=True))


@app.callback()
def main(
    ctx: typer.Context,
    controller: Annotated[
        str | None, typer.Option(envvar="DISTCACHE_CONTROLLER", help="controller API address HOST:PORT")
    ] = None,
    cluster: Annotated[
        Path | None,
        typer.Option(envvar="DISTCACHE_CLUSTER", help="cluster.json of the deployment (for its controller address)"),
    ] = None,
    timeout: Annotated[float, typer.Option(min=0.1, help="seconds to wait for the controller")] = 60.0,
) -> None:
    """Operate a DistCache deployment through its controller."""
    address = controller
    if address is not None:
        try:
            parse_address(address, "--controller", names=True)
        except ClusterError as e:
            fail(str(e))
    if address is None and cluster is not None:
        try:
            address = Cluster.load(cluster).controller_address
        except ClusterError as e:
            fail(f"cluster file {e}")
    ctx.obj = ControllerClient(address or Cluster().controller_address, timeout=timeout)


def _call(ctx: typer.Context, method: str, *args: object) -> Message:
    client: ControllerClient = ctx.obj
    try:
        return getattr(client, method)(*args)
    except ControllerUnreachableError as e:
        fail(str(e), 2)
    except ControllerRequestError as e:
        fail(str(e))


@app.command()
def status(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Every switch: role, liveness, load, cache occupancy, hit ratio, digests, drops."""
    st = _call(ctx, "status")
    if as_json:
        _print_json(st)
        return
    t = Table(
        title=Text(
            f"mechanism {st.mechanism} · epoch {st.epoch} · failovers {st.failovers} · recoveries {st.recoveries}"
        ),
        title_justify="left",
    )
    for col in (
        "switch",
        "role",
        "state",
        "agent",
        "load/s",
        "cached",
        "hits",
        "misses",
        "hit ratio",
        "digests",
        "buckets",
        "drops",
    ):
        t.add_column(col, justify="left" if col in ("switch", "role", "state", "agent", "drops") else "right")
    for s in st.switches:
        state = (
            red("failed" + (" (operator)" if s.admin_failed else " (detected)"))
            if s.failed
            else Text("up", style="green")
            if s.alive
            else red("not answering")
        )
        cache = s.role != "client_leaf"
        cells = (
            s.name,
            s.role,
            state,
            (Text("up") if s.agent_alive else red("down")) if cache else "-",
            f"{s.load:,.0f}",
            f"{s.occupied}/{s.slots}" if cache else "-",
            f"{s.hits}" if cache else "-",
            f"{s.misses}" if cache else "-",
            f"{s.hit_ratio:.2f}" if cache else "-",
            f"{s.digests}" if cache else "-",
            f"{s.buckets}" if s.role == "spine" else "-",
            ", ".join(f"{k}={v}" for k, v in sorted(s.drops.items())) or "none",
        )
        t.add_row(*(c if isinstance(c, Text) else Text(c) for c in cells))
    out.print(t)
    if st.mechanism == "hybrid":
        say(f"replicated in every spine ({len(st.replicated)}): ", ", ".join(st.replicated) or "none yet")
    if st.failovers:
        say(f"last failure: detected in {st.last_detection_s:.2f} s, partition moved in {st.last_failover_s:.2f} s")
    ended = {
        f"{s.name}: " + ", ".join(f"{k} {v}" for k, v in sorted(s.spine_deaths.items()))
        for s in st.switches
        if s.spine_deaths
    }
    say("spine deaths seen by leaves' data planes: ", "; ".join(sorted(ended)) or "none")
    if st.spine_deaths:
        d = st.spine_deaths[-1]
        say(
            f"last: {d.leaf} found {d.spine} dead {d.detect_s * 1e3:.1f} ms after it last heard from it "
            f"(silent {d.silent_s:.2f} s)"
        )
    for s in st.switches:
        if s.detail:
            say(s.name, ": ", s.detail)


@app.command()
def partitions(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Spine partition: buckets per spine now and with every spine alive, and what moved."""
    p = _call(ctx, "partitions")
    if as_json:
        _print_json(p)
        return
    t = Table(title=Text(f"spine partition · epoch {p.epoch} · {len(p.owner)} buckets"), title_justify="left")
    for col in ("spine", "id", "buckets now", "originally", "state"):
        t.add_column(col)
    for s in p.spines:
        t.add_row(
            Text(s.spine),
            Text(str(s.switch_id)),
            Text(str(s.buckets)),
            Text(str(s.original)),
            red("failed") if s.failed else Text("up"),
        )
    out.print(t)
    if not p.moved:
        say("no bucket moved: every spine owns its original buckets")
        return
    flows: dict[tuple[str, str], int] = {}
    for m in p.moved:
        flows[(m.from_spine, m.to_spine)] = flows.get((m.from_spine, m.to_spine), 0) + 1
    say(
        f"{len(p.moved)} buckets moved: ",
        ", ".join(f"{a} -> {b or 'nowhere'}: {k}" for (a, b), k in sorted(flows.items())),
    )


@app.command()
def hot(
    ctx: typer.Context,
    switch: Annotated[str, typer.Option(help="one cache switch (default: all)")] = "",
    top: Annotated[int, typer.Option(min=1, help="keys per switch")] = 10,
    as_json: JsonOpt = False,
) -> None:
    """The most hit cached keys of each cache switch."""
    h = _call(ctx, "hot", switch, top)
    if as_json:
        _print_json(h)
        return
    for s in h.switches:
        if not s.keys:
            say(s.switch, ": nothing cached")
            continue
        t = Table(title=Text(s.switch), title_justify="left")
        for col in ("key", "recent hits", "hits since cached", "state", "slot"):
            t.add_column(col, justify="left" if col in ("key", "state") else "right", overflow="fold")
        for k in s.keys:
            t.add_row(Text(k.text), Text(str(k.hits)), Text(str(k.total_hits)), Text(k.state), Text(str(k.slot)))
        out.print(t)


@app.command(name="fail")
def fail_switch(
    ctx: typer.Context,
    switch: Annotated[str, typer.Argument(help="switch name, e.g. sp0")],
    keep_running: Annotated[
        bool, typer.Option(help="leave its process running (a drain: it serves nothing until recover flushes it)")
    ] = False,
) -> None:
    """Take a switch out of service: stop its process (in an emulation) and move a spine's buckets."""
    r = _call(ctx, "fail", switch, keep_running)
    say(change_summary(r))


@app.command()
def recover(ctx: typer.Context, switch: Annotated[str, typer.Argument(help="switch name, e.g. sp0")]) -> None:
    """Put a failed switch back: start it again, flush its cache, give a spine its buckets back."""
    r = _call(ctx, "recover", switch)
    say(change_summary(r))


@app.command()
def mechanism(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="nocache, partition, replication, distcache or hybrid")],
) -> None:
    """Change the caching mechanism of the whole cluster, safely while it serves.

    Client leaves take the new routes first, then the cache switches drop the keys they no
    longer own and cache what they now should; writes invalidate every copy throughout.
    """
    r = _call(ctx, "set_mechanism", name)
    say(r.message)


if __name__ == "__main__":
    app()
