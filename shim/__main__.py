"""Run one storage-server shim: ``python -m shim --cluster C --server NAME --redis-url URL --control ADDR``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

import redis.asyncio
from redis.exceptions import RedisError

from distcache.addresses import parse_address
from distcache.cluster import Cluster, ClusterError
from distcache.cmdline import ArgumentParser, input_file, ip_address, load_cluster, memory_size, output_file
from distcache.rpc.shim import grpc_target
from distcache.wire import MAX_VALUE, RETRY_SPAN
from shim.control import serve_control
from shim.dedup import DEDUP_MEMORY, ENTRY_BYTES, MARKER_DB
from shim.server import Shim
from shim.stream import STREAM_BUDGET

log = logging.getLogger("shim")


async def run(args: argparse.Namespace) -> int:
    cluster = Cluster.load(args.cluster)
    try:
        host = next(h for h in cluster.servers() if h.name == args.server)
    except StopIteration:
        log.error("no storage server %r in %s", args.server, args.cluster)
        return 2
    peer = args.coherence_peer
    password = args.redis_password_file.read_text().strip() if args.redis_password_file else None
    shim = Shim(
        cluster,
        host,
        args.redis_url,
        listen=args.listen,
        state_file=args.state_file,
        fresh=args.fresh,
        coherence_address=(lambda _spine_id: peer) if peer else None,
        dedup_memory=args.dedup_memory,
        redis_username=args.redis_user,
        redis_password=password,
        stream_budget=args.stream_budget,
        max_value=args.max_value,
    )
    try:
        await shim.start()
        control = await serve_control(shim, args.control)
    except (OSError, ConnectionError, RedisError) as e:
        log.error("cannot start: %s", e)
        await shim.close()
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"shim ready server={host.name} listen={shim.listen}:{shim.port} control={args.control}", flush=True)
    log.info("serving %s on %s:%d", host.name, shim.listen, shim.port)
    await stop.wait()
    await control.stop(0.5)
    log.info("exiting: %s", shim.stats())
    await shim.close()
    return 0


def host_port(text: str) -> tuple[str, int]:
    """``--coherence-peer``'s ``HOST:PORT``, parsed as the cluster file's addresses are (argparse type: a bad
    value is a usage error)."""
    try:
        return parse_address(text, "the peer")
    except ClusterError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m shim", description=__doc__)
    ap.add_argument("--cluster", required=True, type=input_file, help="cluster.json of the deployment")
    ap.add_argument("--server", required=True, help="this storage server's name in the cluster (e.g. r0s0)")
    ap.add_argument("--listen", type=ip_address, help="address to serve DistCache on (default: the server's address)")
    ap.add_argument("--redis-url", required=True, help="e.g. unix:///run/redis.sock or redis://127.0.0.1:6379")
    ap.add_argument("--redis-user", metavar="NAME", help="the Redis ACL user to log in as (default: Redis' default)")
    ap.add_argument(
        "--redis-password-file",
        type=input_file,
        metavar="FILE",
        help="a file holding --redis-user's password (a file, so no process listing shows it)",
    )
    ap.add_argument("--control", required=True, help="control channel: unix:/path or tcp:host:port")
    ap.add_argument(
        "--state-file", type=output_file, help="where the shim keeps the controller's partition across restarts"
    )
    ap.add_argument(
        "--coherence-peer",
        type=host_port,
        metavar="HOST:PORT",
        help="send every coherence packet (INVALIDATE/UPDATE) to this address instead of the spines' "
        "10.255.0.<id>:8888; for benchmarks and tests on loopback, where a peer that reflects "
        "them as acks plays the switches (default: the real spine addresses)",
    )
    ap.add_argument(
        "--fresh",
        action="store_true",
        help="the deployment's switches were just started and cache nothing: start with every switch's "
        "cached keys known (none). Without it the shim counts every key as cached at every switch "
        "until the controller's view arrives (a restart: switches may hold copies of its keys)",
    )
    ap.add_argument(
        "--dedup-memory",
        type=memory_size,
        default=DEDUP_MEMORY,
        metavar="SIZE",
        help=f"memory for the writes remembered for the {RETRY_SPAN:g} s retry span (e.g. 64mb, 1gb; about "
        f"{ENTRY_BYTES} B each): past it new writes are refused BUSY, never applied twice (default: "
        f"{DEDUP_MEMORY >> 20}mb)",
    )
    ap.add_argument(
        "--stream-budget",
        type=memory_size,
        default=STREAM_BUDGET,
        metavar="SIZE",
        help="memory for the stream path's requests and replies in flight, over every connection (e.g. 256mb, "
        "1gb): past it a request is answered BUSY unread, and no value longer than it can be stored or read "
        f"(default: {STREAM_BUDGET >> 20}mb)",
    )
    ap.add_argument(
        "--max-value",
        type=memory_size,
        default=MAX_VALUE,
        metavar="SIZE",
        help=f"the longest value a client may store (default and most: {MAX_VALUE >> 20}mb, Redis' "
        "proto-max-bulk-len); longer ones are refused TOO_LARGE",
    )
    ap.add_argument("--log-file", type=output_file, help="log here instead of stderr")
    ap.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = ap.parse_args(argv)
    cluster = load_cluster(ap, args.cluster)  # bad input is one line, before anything starts
    if args.server not in {h.name for h in cluster.servers()}:
        ap.error(
            f"--server: no storage server {args.server!r} in {args.cluster} "
            f"(its servers: {', '.join(h.name for h in cluster.servers())})"
        )
    if not 0 < args.max_value <= MAX_VALUE:
        ap.error(f"--max-value: {args.max_value} B; give 1b..{MAX_VALUE >> 20}mb (Redis' proto-max-bulk-len)")
    if args.stream_budget < 1 << 16:
        ap.error(f"--stream-budget: {args.stream_budget} B holds no useful frame; give at least 64kb")
    try:
        grpc_target(args.control)
    except ValueError as e:
        ap.error(f"--control: {e}")
    try:
        pool = redis.asyncio.ConnectionPool.from_url(args.redis_url)  # redis-py's own check of the URL, no connection
    except ValueError as e:
        ap.error(f"--redis-url: {e}")
    if pool.connection_kwargs.get("db") not in (None, 0, "0"):
        ap.error(
            f"--redis-url {args.redis_url}: names database {pool.connection_kwargs['db']}; name the server only "
            f"(user data is database 0, the shim's own records database {MARKER_DB})"
        )
    if bool(args.redis_user) != bool(args.redis_password_file):
        ap.error("--redis-user and --redis-password-file go together: give both or neither")
    if args.dedup_memory < ENTRY_BYTES:
        ap.error(f"--dedup-memory {args.dedup_memory}: holds no write; give at least {ENTRY_BYTES} bytes")
    logging.basicConfig(
        filename=args.log_file,
        level=args.log_level.upper(),
        format="%(asctime)s shim[%(process)d] %(levelname)s %(name)s: %(message)s",
    )
    # uvloop where available: the event loop's own overhead is a large part of a write (+40-60 % PUT/s measured
    # by make bench-shim); the plain asyncio loop otherwise
    try:
        import uvloop
    except ImportError:
        return asyncio.run(run(args))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
