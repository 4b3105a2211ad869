r"""``distcache``: get, put and delete keys of a DistCache deployment (``loadgen.cli`` adds ``bench``).

Every command needs the deployment's ``cluster.json`` (``--cluster`` or
``$DISTCACHE_CLUSTER``): it says which storage server owns each key.
``--server HOST[:PORT]`` sends every request to one address instead (a shim
on loopback, outside Mininet).

Keys and values are the user's data.  A key or value given on the command line
is the bytes the shell passed (``os.fsencode``: not necessarily UTF-8).  Shown on
a terminal, every byte that is not printable text is escaped (``\x1b``, ``\n``,
``\\``), so a stored value's escape sequences never reach it; ``--raw``, or
output that is no terminal, writes a value's bytes as they are.  Messages print
keys as data (rich ``Text``), never as rich markup, and errors are one line on
stderr.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from client_lib.client import Client, Resolver, numeric_address
from distcache.addresses import parse_address
from distcache.cluster import Cluster, ClusterError, Host
from distcache.cmdline import Typer, fail
from distcache.errors import DistCacheError, RequestTimeoutError
from distcache.wire import DC_PORT

app = Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Get, put and delete keys of a DistCache deployment, and benchmark it.",
)
err = Console(stderr=True)


@dataclass
class Opts:
    cluster: Path | None
    timeout: float
    retries: int
    server: str | None

    def load(self) -> Cluster:
        if self.cluster is None:
            fail("no cluster description: pass --cluster PATH (a run's cluster.json) or set DISTCACHE_CLUSTER")
        if not self.cluster.exists():
            fail(
                f"cluster file {self.cluster} does not exist; pass the cluster.json of a running deployment "
                f"(runs/<run>/cluster.json)"
            )
        try:
            return Cluster.load(self.cluster)
        except ClusterError as e:
            fail(f"cluster file {e}")

    def resolver(self) -> Resolver | None:
        """--server as a resolver (every key to that address), checked now: a bad port or a name that
        does not resolve is one line here rather than an error at the first request."""
        if not self.server:
            return None
        host, sep, port = self.server.rpartition(":")
        text = f"{host or '127.0.0.1'}:{port}" if sep else f"{self.server}:{DC_PORT}"
        try:
            addr = numeric_address(parse_address(text, "--server", names=True))
        except ClusterError as e:
            fail(str(e))
        except ValueError as e:
            fail(f"--server {self.server}: {e}")
        except OSError as e:
            fail(f"--server {self.server}: cannot resolve {text.rpartition(':')[0]} ({e.strerror or e})")
        return lambda _host: addr

    def client(self) -> tuple[Client, Cluster, Resolver]:
        cluster = self.load()
        resolve = self.resolver() or (lambda h: (h.ip, DC_PORT))
        try:
            return Client(cluster, timeout=self.timeout, retries=self.retries, resolve=resolve), cluster, resolve
        except ValueError as e:
            fail(str(e))


def _where(cluster: Cluster, resolve: Resolver, key: bytes) -> str:
    host: Host = cluster.server_for_key(cluster.digest(key))
    ip, port = resolve(host)
    return f"{host.name} ({ip}:{port})"


def _run(opts: Opts, key: bytes, call):  # noqa: ANN001, ANN202
    client, cluster, resolve = opts.client()
    try:
        with client:
            return call(client)
    except RequestTimeoutError:
        fail(
            f"no reply from {_where(cluster, resolve, key)} after {opts.retries + 1} tries of {opts.timeout}s; "
            f"is the deployment running?"
        )
    except DistCacheError as e:
        fail(f"{type(e).__name__}: {e}")
    except OSError as e:
        fail(f"cannot reach {_where(cluster, resolve, key)}: {e}")


@app.callback()
def main(
    ctx: typer.Context,
    cluster: Annotated[
        Path | None, typer.Option(envvar="DISTCACHE_CLUSTER", help="cluster.json of the deployment")
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            min=0.001,
            help="seconds to wait for a reply to one copy of a request "
            "(the retransmission timeout learns the round trip below it)",
        ),
    ] = 0.5,
    retries: Annotated[int, typer.Option(min=0, help="retries after a timeout")] = 3,
    server: Annotated[
        str | None,
        typer.Option(
            envvar="DISTCACHE_SERVER",
            help="send every request to HOST[:PORT] (e.g. a shim on loopback) instead of each key's server",
        ),
    ] = None,
) -> None:
    """Talk to a DistCache deployment."""
    ctx.obj = Opts(cluster, timeout, retries, server)


def shown(data: bytes) -> str:
    r"""``data`` as text safe for a terminal: UTF-8 text as it is, but a backslash doubled, ``\n``, ``\r``,
    ``\t`` spelled so, every other control or format character as ``\xNN``/``\uNNNN``, and every byte
    that is not UTF-8 as ``\xNN``."""
    out = []
    for ch in data.decode("utf-8", errors="surrogateescape"):
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch == "\\":
            out.append("\\\\")
        elif ch in _SPELLED:
            out.append(_SPELLED[ch])
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


_SPELLED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def arg_bytes(text: str) -> bytes:
    """A command-line argument as the bytes the shell passed (Python decoded them with surrogateescape)."""
    return os.fsencode(text)


def _text(value: bytes) -> tuple[str, str]:
    try:
        return value.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(value).decode(), "base64"


@app.command()
def get(
    ctx: typer.Context,
    key: str,
    as_json: Annotated[bool, typer.Option("--json", help="print key, value, cached, served_by, latency")] = False,
    raw: Annotated[bool, typer.Option("--raw", help="write the value's bytes as they are, even to a terminal")] = False,
) -> None:
    """Print the value of KEY (exit status 1 if it does not exist).  On a terminal, bytes that are not
    printable text are shown escaped (\\x1b, \\n, \\\\) unless --raw; piped or redirected, the value is
    written as it is."""
    kb = arg_bytes(key)
    r = _run(ctx.obj, kb, lambda c: c.get_reply(kb))
    if as_json:
        value, enc = _text(r.value) if r.value is not None else (None, None)
        key_text, key_encoding = _text(kb)
        print(
            json.dumps(
                {
                    "key": key_text,
                    "found": r.value is not None,
                    "value": value,
                    "encoding": enc,
                    "cached": r.cached,
                    "served_by": r.served_by,
                    "latency_us": round(r.latency * 1e6),
                    "attempts": r.attempts,
                    "key_encoding": key_encoding,  # last: the fields before it kept their order
                }
            )
        )
    elif r.value is not None:
        if raw or not sys.stdout.isatty():
            sys.stdout.buffer.write(r.value + b"\n")
        else:
            sys.stdout.write(shown(r.value) + "\n")
        sys.stdout.flush()
    if r.value is None:
        if not as_json:
            err.print(Text(f"not found: {shown(kb)}"), highlight=False, soft_wrap=True)
        raise typer.Exit(1)


@app.command()
def put(
    ctx: typer.Context,
    key: str,
    value: Annotated[str | None, typer.Argument(help="the value (the bytes given); or use --value-file")] = None,
    value_file: Annotated[
        Path | None, typer.Option(help="read the value (bytes) from this file; - for stdin", allow_dash=True)
    ] = None,
) -> None:
    """Store VALUE under KEY (acknowledged once every cached copy is invalid)."""
    if (value is None) == (value_file is None):
        fail("give exactly one of VALUE or --value-file")
    if value_file is not None:
        try:
            data = sys.stdin.buffer.read() if str(value_file) == "-" else value_file.read_bytes()
        except OSError as e:
            fail(f"cannot read {value_file}: {e}")
    else:
        assert value is not None  # exactly one of the two was given
        data = arg_bytes(value)
    kb = arg_bytes(key)
    _run(ctx.obj, kb, lambda c: c.put(kb, data))
    print("ok")


@app.command("del")
def delete(ctx: typer.Context, key: str) -> None:
    """Delete KEY; prints "deleted" or "absent"."""
    kb = arg_bytes(key)
    existed = _run(ctx.obj, kb, lambda c: c.delete(kb))
    print("deleted" if existed else "absent")


@app.command("exec", context_settings={"allow_interspersed_args": False})
def execute(
    ctx: typer.Context,
    command: str,
    args: Annotated[list[str] | None, typer.Argument(help="the command's arguments; the first is its key")] = None,
    key: Annotated[str | None, typer.Option(help="the key, where it is not the first argument")] = None,
) -> None:
    """Run COMMAND ARGS... (any single-key Redis command) at the key's storage server and print its reply as
    redis-cli does: (integer) 5, "text", (nil), a numbered list; Redis' error is one line, exit status 1."""
    argv = [arg_bytes(a) for a in args or []]
    kb = arg_bytes(key) if key is not None else (argv[0] if argv else b"")
    if key is None and not argv:
        fail(f"{command} needs its key: give it as the first argument, or --key")
    reply = _run(ctx.obj, kb, lambda c: c.execute(arg_bytes(command), *argv, key=kb))  # errors: one line, exit 1
    print("\n".join(_reply_lines(reply)))


def _reply_lines(reply: object, indent: str = "") -> list[str]:
    """A command's reply as redis-cli shows it (bytes escaped as shown() does: keys and values are data)."""
    if reply is None:
        return ["(nil)"]
    if isinstance(reply, int):
        return [f"(integer) {reply}"]
    if isinstance(reply, list):
        if not reply:
            return ["(empty array)"]
        out = []
        for i, item in enumerate(reply, 1):
            lines = _reply_lines(item, indent + "   ")
            out.append(f"{i}) {lines[0]}")
            out.extend(indent + "   " + ln for ln in lines[1:])
        return out
    return [f'"{shown(bytes(reply))}"' if isinstance(reply, (bytes, bytearray)) else str(reply)]
