"""A private network namespace holding veth pairs, as the PTF runner and the switch benchmark build it: lo
up, IPv6 off (no router solicitations among the frames under test), TX checksum offload off (the frames a
switch sends keep the checksums it computed), no addresses and no route out."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


class NamespaceError(RuntimeError):
    """The namespace or its veth pairs could not be set up (one line: why)."""


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=False)


def make_veth_namespace(name: str, pairs: list[tuple[str, str]]) -> None:
    """Create namespace ``name`` (taking over one a dead run of ours left: names carry our pid) holding the
    veth ``pairs`` (one end, the other end), every interface up."""
    if _run("ip", "netns", "add", name).returncode != 0:
        _run("ip", "netns", "del", name)
        r = _run("ip", "netns", "add", name)
        if r.returncode != 0:
            raise NamespaceError(f"cannot create network namespace {name} (root needed): {r.stderr.strip()}")
    script = [
        "set -e",
        "ip link set lo up",
        "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1",
    ]
    script += [f"ip link add {a} type veth peer name {b}" for a, b in pairs]
    for i in (i for pair in pairs for i in pair):
        script += [
            f"sysctl -qw net.ipv6.conf.{i}.disable_ipv6=1",
            f"ethtool -K {i} tx off >/dev/null",
            f"ip link set {i} up",
        ]
    r = _run("ip", "netns", "exec", name, "sh", "-c", "\n".join(script))
    if r.returncode != 0:
        raise NamespaceError(f"setting up namespace {name} failed: {r.stderr.strip()}")


def delete_namespace(name: str) -> bool:
    """Kill what is left inside namespace ``name`` (a run's own namespace: whatever runs there was started
    by it, the switch's children say) and delete it; whether it is gone."""
    for pid in _run("ip", "netns", "pids", name).stdout.split():
        if pid.isdigit() and int(pid) != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    return _run("ip", "netns", "del", name).returncode == 0
