"""``python -m loadgen``: the ``distcache`` command."""

from loadgen.cli import app

app(prog_name="distcache")
