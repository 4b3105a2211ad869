"""What every DistCache command line shares: bad input is one line on stderr and a nonzero exit.

Every entry point (``distcache``, ``distcache-ctl``, ``python -m controller``, ``agent``,
``shim``, ``softswitch``, ``dcnet.demo``/``dcnet.up``) is used by people who mistype: a path to a
folder, a port out of range, a topology with a wrong field.  Each of those must get one line that
names the argument and what it must be, not a traceback and not argparse's usage block or typer's
box around a wrapped message.  The argument types here check files and addresses when the
arguments are parsed, before anything starts, so no process is half started when one is wrong.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import sys
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

from distcache.addresses import parse_address, service_address
from distcache.cluster import Cluster, ClusterError

try:  # typer >= 0.29 ships its own copy of click
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
except ImportError:  # pragma: no cover - older typer on click
    from click.exceptions import ClickException, NoArgsIsHelpError  # type: ignore[no-redef]


def one_line(text: str) -> str:
    """``text`` on one line (messages from libraries may carry newlines)."""
    return " ".join(str(text).split())


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors: ``PROG: error: MESSAGE (see PROG --help)``, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def load_cluster(parser: argparse.ArgumentParser, path: str | Path, *, deployable: bool = True) -> Cluster:
    """The cluster in ``path``, or the parser's one-line error naming the file and the field.

    ``deployable``: also check what running switches need (every switch's ports fit its tables).
    """
    try:
        cluster = Cluster.load(path)
        if deployable:
            cluster.check_deployable()
    except ClusterError as e:
        parser.error(f"cluster file {e}" if str(e).startswith(str(path)) else f"cluster file {path}: {e}")
    return cluster


# -- argparse types: each raises ArgumentTypeError, which argparse reports as "argument --x: <why>" -----


def input_file(text: str) -> Path:
    """A file that exists and can be read (``--p4info``, ``--device-config``, ``--cluster``)."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{text}: not readable")
    return path


def output_file(text: str) -> Path:
    """A file this process will write (``--log-file``, ``--state-file``): not a directory, in one that exists."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a directory; give a file name")
    parent = path.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: its directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{text}: not writable")
    return path


def existing_dir(text: str) -> Path:
    """A directory that exists (``--shim-dir``: where the shims' control sockets are)."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: {'not a directory' if path.exists() else 'no such directory'}")
    return path


def output_dir(text: str) -> Path:
    """A directory this process writes into (``--pcap-dir``, ``--run-dir``): a directory or a new one."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: exists and is not a directory")
    return path


def listen_address(text: str) -> str:
    """An operator API address to listen on (controller, agent): HOST:PORT on loopback or a management net."""
    try:
        service_address(text, "address")
    except ClusterError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("address: ")) from None
    return text


def bind_address(text: str) -> str:
    """HOST:PORT for a server to bind, port 0 meaning any free one (softswitch's ``--grpc-addr``)."""
    try:
        parse_address(text, "address", port_zero=True)
    except ClusterError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("address: ")) from None
    return text


def ip_address(text: str) -> str:
    """One IP address (no port), e.g. the shim's ``--listen``."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IP address") from None
    return text


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}


def memory_size(text: str) -> int:
    """A size in bytes written as redis.conf writes one: ``1048576``, ``64mb``, ``1gb``, ``500k`` (k, m, g:
    powers of 1000; kb, mb, gb: of 1024; any case)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kmg]b?|b)?\s*", text.lower())
    if m is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: write e.g. 65536, 500kb, 64mb or 1gb")
    return int(m.group(1)) * _UNITS[m.group(2) or ""]


# -- typer ------------------------------------------------------------------------------------------


class Typer(typer.Typer):
    """typer.Typer whose usage errors (bad option values, missing arguments) are one line.

    typer draws them in a box over several lines; here they read like argparse's:
    ``PROG: error: MESSAGE (see PROG --help)``, with click's exit status (2).
    """

    def __call__(self, *args: object, **kwargs: object) -> NoReturn:
        try:
            rv = super().__call__(*args, **{**kwargs, "standalone_mode": False})
        except NoArgsIsHelpError as e:
            e.show()
            sys.exit(e.exit_code)
        except ClickException as e:
            ctx = getattr(e, "ctx", None)
            prog = ctx.command_path if ctx is not None else Path(sys.argv[0]).name
            hint = f" (see {prog} --help)" if ctx is not None else ""
            print(f"{prog}: error: {one_line(e.format_message())}{hint}", file=sys.stderr)
            sys.exit(e.exit_code)
        except typer.Abort:
            print("Aborted!", file=sys.stderr)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


_err = Console(stderr=True)


def fail(msg: str, code: int = 1) -> NoReturn:
    """A command-line tool's error: one line on stderr, then exit ``code``.  ``msg`` is data (it may quote
    a key, a path or a switch name), never markup."""
    _err.print(Text.assemble(("error:", "red"), " ", msg), highlight=False, soft_wrap=True)
    raise typer.Exit(code)
