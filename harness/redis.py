"""A real redis-server on a Unix socket (no TCP port), as the tests, the shim benchmark and every storage
host of dcnet run it: one command line, one readiness check, and the users a storage host's Redis has.

Nothing may write behind the caches (docs/protocol.md, "Nothing writes behind the caches"): a storage host's
Redis disables its default user and has two, the shim's (every command; the only one that writes) and a
read-only one for operators (redis-cli reads what the switches hold and cannot change it).  It evicts nothing
(``maxmemory-policy noeviction``): an evicted key would leave its cached copies behind.
"""

from __future__ import annotations

import hashlib
import secrets
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness.processes import ServiceError

SHIM_USER = "distcache-shim"
READER_USER = "reader"
# the reader: read commands and its own connection's, nothing that writes, administers or could block the
# server (KEYS, DEBUG...: @dangerous); INFO for operators' and tests' statistics
READER_RULES = "-@all +@read +@connection -@admin -@dangerous +info"


def _sha256(password: str) -> str:
    """How an ACL file holds a password: its SHA-256, so the file does not reveal it."""
    return hashlib.sha256(password.encode()).hexdigest()


@dataclass(frozen=True)
class RedisUsers:
    """The passwords of a storage Redis's two users, kept in files of the run folder (mode 600)."""

    shim_password_file: Path
    reader_password_file: Path
    acl_file: Path

    @classmethod
    def create(cls, folder: Path) -> RedisUsers:
        """The users of every storage Redis of the deployment in ``folder``: new random passwords the first
        time, the same ones after (a restarted redis-server or shim logs in as before)."""
        users = cls(folder / "redis-shim.password", folder / "redis-reader.password", folder / "redis-users.acl")
        for path in (users.shim_password_file, users.reader_password_file):
            if not path.exists():
                path.touch(mode=0o600)
                path.write_text(secrets.token_hex(24) + "\n")
        users.acl_file.touch(mode=0o600)
        users.acl_file.write_text(
            # off: nobody logs in as it (a connection must AUTH as one of the two); its rules are still every
            # command's, as they must be: Redis replays the append-only file as the default user, and with
            # -@all every MULTI/EXEC in it failed NOPERM on a restart (7.0.15) and the data in it was lost
            "user default off resetpass ~* &* +@all\n"
            f"user {SHIM_USER} on #{_sha256(users.shim_password)} ~* &* +@all\n"
            f"user {READER_USER} on #{_sha256(users.reader_password)} ~* resetchannels {READER_RULES}\n"
        )
        return users

    @property
    def shim_password(self) -> str:
        return self.shim_password_file.read_text().strip()

    @property
    def reader_password(self) -> str:
        return self.reader_password_file.read_text().strip()


def redis_argv(
    sock: Path,
    folder: Path,
    *,
    durable: bool = False,
    appendfsync: str = "everysec",
    name: str = "redis",
    logfile: Path | None = None,
    users: RedisUsers | None = None,
    maxmemory: str = "",
    policy: str = "noeviction",
) -> list[str]:
    """redis-server serving on Unix socket ``sock`` (mode 700), its files in ``folder``: no snapshots; with
    ``durable``, an append-only file (``<name>.aof`` in ``folder``, fsync ``appendfsync``) that a restart
    reloads, else nothing on disk.  It evicts nothing unless ``policy`` (past ``maxmemory``) says so.  With
    ``users``, its users are those (a storage host's:
    the default user disabled); without, the default user may do anything (unit tests, benchmarks)."""
    argv = ["redis-server", "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700", "--save", ""]
    argv += ["--maxmemory-policy", policy]
    if maxmemory:
        argv += ["--maxmemory", maxmemory]
    if users is not None:
        argv += ["--aclfile", str(users.acl_file)]
    if durable:
        argv += ["--appendonly", "yes", "--appendfsync", appendfsync, "--appenddirname", f"{name}.aof"]
    else:
        argv += ["--appendonly", "no"]
    argv += ["--daemonize", "no", "--dir", str(folder)]
    if logfile is not None:
        argv += ["--logfile", str(logfile)]
    return argv


def wait_for_redis(sock: Path, proc: subprocess.Popen, timeout: float = 10.0, what: str = "redis-server") -> None:
    """Return once the redis-server ``proc`` answers PING on ``sock``; ServiceError (one line) if it exits
    first or does not within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServiceError(f"{what} exited with code {proc.returncode} before serving; see its log")
        if sock.exists():
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(1.0)
                    s.connect(str(sock))
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith((b"+PONG", b"-NOAUTH")):  # serving (to a user that logs in)
                        return
            except OSError:
                pass
        time.sleep(0.05)
    raise ServiceError(f"{what} did not answer on {sock} within {timeout:.0f} s")
