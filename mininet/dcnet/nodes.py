"""The hosts of an emulated fabric, as Mininet nodes: each configures itself, a storage host runs its storage.

Mininet configures every host (``config``) while it builds the network and terminates it (``terminate``)
when it stops; so a :class:`FabricHost` sets its one route into the fabric there, and a :class:`StorageHost`
starts its redis-server and its shim there and stops them there, as Mininet's own nodes do with what they
run (cf. its ``LinuxRouter`` example).  Both run in the host's network namespace (``Host.popen``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from mininet.node import Host

from distcache.cluster import Host as HostSpec
from distcache.rpc.shim import shim_control
from harness.processes import Service, gateway_argv, shim_argv, wait_until
from harness.redis import SHIM_USER, RedisUsers, redis_argv, wait_for_redis


def redis_socket(run_dir: Path, server: str) -> Path:
    """The Unix socket the redis-server of storage host ``server`` serves on (no TCP port)."""
    return run_dir / f"redis-{server}.sock"


class FabricHost(Host):
    """A host of the fabric: its /32, one route into the fabric through its leaf, nothing else.

    No default route, so nothing leaves the emulation; the leaf's MAC is set by hand (the leaf answers no
    ARP); checksum offloads off, so the switches see packets as a NIC would send them; no IPv6 chatter."""

    def __init__(self, name: str, *, spec: HostSpec, **params: object) -> None:
        self.spec = spec
        super().__init__(name, **params)

    def config(self, **params: object) -> dict:
        r = super().config(**params)
        intf = self.defaultIntf().name
        self.cmd(f"ethtool -K {intf} tx off rx off >/dev/null 2>&1")
        self.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
        self.cmd("ip link set lo up")
        self.cmd(f"ip route replace 10.0.0.0/8 via {self.spec.gateway} dev {intf} onlink")
        self.cmd(f"ip neigh replace {self.spec.gateway} lladdr {self.spec.gateway_mac} dev {intf} nud permanent")
        return r


#: the port a client host's gateway serves Redis clients on (Redis' own)
GATEWAY_PORT = 6379


class ClientHost(FabricHost):
    """A client host: its Redis-protocol gateway (build/distcache-gateway) on the host's own address, port 6379,
    started once the host is configured and stopped with it, so any Redis client on the host can use the cache.

    Files in ``run_dir``: ``gateway-<name>.{log,out}``.  ``gateway`` is its service, which the fault tests kill
    and restart through the deployment."""

    def __init__(
        self,
        name: str,
        *,
        spec: HostSpec,
        run_dir: Path,
        cluster_path: Path,
        gateway_options: dict[str, object] | None = None,
        **params: object,
    ) -> None:
        """``gateway_options``: more of the gateway's options (e.g. the fault matrix's ``--timeout``)."""
        super().__init__(name, spec=spec, **params)
        self.gateway_address = f"{spec.ip}:{GATEWAY_PORT}"
        out, log = run_dir / f"gateway-{name}.out", run_dir / f"gateway-{name}.log"
        options = {"--cluster": cluster_path, "--listen": self.gateway_address, "--log-file": log}
        self.gateway = Service(
            f"gateway-{name}",
            gateway_argv({**options, **(gateway_options or {})}),
            out=out,
            log=log,
            timeout=15.0,
            popen=self.popen,
        )

    def config(self, **params: object) -> dict:
        r = super().config(**params)
        self.start_gateway(wait=False)
        return r

    def start_gateway(self, wait: bool = True) -> subprocess.Popen:
        """Start the gateway; returns once it serves (its ready line in its output; without ``wait``: at once,
        the caller waits for ``self.gateway``)."""
        out = self.gateway.out
        offset = out.stat().st_size if out.exists() else 0

        def ready(proc: subprocess.Popen, timeout: float) -> None:
            def said() -> bool:
                if not out.exists():
                    return False
                with open(out, "rb") as f:
                    f.seek(offset)
                    return b"gateway ready" in f.read()

            wait_until(said, proc, timeout, f"gateway on {self.name}", "say it is ready", self.gateway.log)

        self.gateway.ready = ready
        return self.gateway.start() if wait else self.gateway.launch()

    def terminate(self) -> None:
        self.gateway.stop()
        super().terminate()


class StorageHost(FabricHost):
    """A storage server: its redis-server (durable by its append-only file, fsync ``appendfsync``; a restart
    reloads what the file kept) and its shim, started once the host is configured and stopped with it.

    Files in ``run_dir``, by the server's name: ``redis-<name>.{sock,log,out,aof}``,
    ``shim-<name>.{sock,log,out,state.json}``.  ``redis`` and ``shim`` are the two services, which the fault
    tests kill and restart through the deployment."""

    def __init__(
        self,
        name: str,
        *,
        spec: HostSpec,
        run_dir: Path,
        cluster_path: Path,
        appendfsync: str,
        users: RedisUsers,
        maxmemory: str = "",
        policy: str = "noeviction",
        breaks: Sequence[str] = (),
        **params: object,
    ) -> None:
        super().__init__(name, spec=spec, **params)
        sock = redis_socket(run_dir, name)
        self.redis = Service(
            f"redis-{name}",
            redis_argv(
                sock,
                run_dir,
                durable=True,
                appendfsync=appendfsync,
                name=f"redis-{name}",
                logfile=run_dir / f"redis-{name}.log",
                users=users,
                maxmemory=maxmemory,
                policy=policy,
            ),
            out=run_dir / f"redis-{name}.out",
            socket=sock,
            ready=lambda proc, timeout: wait_for_redis(sock, proc, timeout, f"redis-server on {name}"),
            timeout=10.0,
            popen=self.popen,
        )
        self._breaks = tuple(breaks)
        control, shim_log, state = (
            shim_control(run_dir, name),
            run_dir / f"shim-{name}.log",
            run_dir / f"shim-{name}.state.json",
        )
        self._shim_options: dict[str, object] = {
            "--cluster": cluster_path,
            "--server": name,
            "--listen": spec.ip,
            "--redis-url": f"unix://{sock}",
            "--redis-user": SHIM_USER,
            "--redis-password-file": users.shim_password_file,
            "--control": control,
            "--state-file": state,
            "--log-file": shim_log,
        }
        self.shim = Service(
            f"shim-{name}",
            shim_argv(self._shim_options, breaks),
            out=run_dir / f"shim-{name}.out",
            log=shim_log,
            state_file=state,
            socket=Path(control.removeprefix("unix:")),
            timeout=15.0,
            popen=self.popen,
        )

    def config(self, **params: object) -> dict:
        r = super().config(**params)
        self.redis.start()
        # the switches start after the hosts: they cache nothing yet; the deployment waits for every shim at once
        self.start_shim(fresh=True, wait=False)
        return r

    def start_shim(
        self, fresh: bool = False, wait: bool = True, clock_back: bool = False, dedup_memory: int | None = None
    ) -> subprocess.Popen:
        """Start the shim; returns once it listens (without ``wait``: at once, the caller waits for
        ``self.shim``).  ``fresh`` only when the deployment starts: no switch caches anything yet and no
        earlier life of this shim applied a write.  ``clock_back``: this life's wall clock reads an hour
        early (tests/breaks.py's ``clock-back`` condition: the fault matrix's clock stepped back).
        ``dedup_memory``: the bytes of its dedup table (``--dedup-memory``; default: the shim's)."""
        args = ["--fresh"] if fresh else []
        if dedup_memory is not None:
            args += ["--dedup-memory", str(dedup_memory)]
        argv = self.shim.argv
        if clock_back:
            self.shim.argv = shim_argv(self._shim_options, [*self._breaks, "clock-back"])
        try:
            return self.shim.start(*args) if wait else self.shim.launch(*args)
        finally:
            self.shim.argv = argv

    def terminate(self) -> None:
        self.shim.stop()
        self.redis.stop()
        super().terminate()
