"""``python -m client_lib``: the ``distcache`` command."""

from client_lib.cli import app

app(prog_name="distcache")
