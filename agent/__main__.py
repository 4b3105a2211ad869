"""``python -m agent`` (console script ``dc-agent``): one cache switch's agent process."""

from __future__ import annotations

import logging
import signal
import threading
from concurrent import futures

import grpc

from agent.agent import SwitchAgent, log
from agent.service import AgentService
from agent.state import StateFileError
from distcache.cmdline import ArgumentParser, existing_dir, input_file, listen_address, load_cluster, output_file
from distcache.rpc.protos import agent_grpc
from distcache.rpc.shim import shim_links


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(
        prog="python -m agent", description="The local agent of one cache switch (paper §4.3), run as its own process."
    )
    ap.add_argument("--cluster", required=True, type=input_file, help="cluster.json of the deployment")
    ap.add_argument("--switch", required=True, help="name of the cache switch (e.g. sp0, sl1)")
    ap.add_argument("--p4info", required=True, type=input_file, help="P4Info (text) of the pipeline")
    ap.add_argument("--device-config", type=input_file, help="device config file (BMv2 JSON); none for softswitch")
    ap.add_argument("--shim-dir", required=True, type=existing_dir, help="folder with the shims' control sockets")
    ap.add_argument("--state-file", type=output_file, help="where the agent keeps its per-slot version tags")
    ap.add_argument("--listen", type=listen_address, help="agent API address (default: the cluster's, on loopback)")
    ap.add_argument("--log-file", type=output_file)
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, filename=args.log_file, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    cluster = load_cluster(ap, args.cluster)
    try:
        sw = cluster.switch(args.switch)
    except KeyError as e:
        ap.error(e.args[0])
    device_config = args.device_config.read_bytes() if args.device_config else b""
    try:
        agent = SwitchAgent(
            cluster, sw, args.p4info, device_config, shim_links(cluster, args.shim_dir), state_file=args.state_file
        )
    except StateFileError as e:
        ap.exit(2, f"{ap.prog}: error: {e}\n")
    except (ValueError, OSError) as e:  # not a cache switch, a P4Info that is not one
        ap.error(str(e))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    agent_grpc.add_AgentServicer_to_server(AgentService(agent), server)
    listen = args.listen or cluster.agent_address(sw)
    if not server.add_insecure_port(listen):
        ap.error(f"cannot listen on {listen}")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    agent.start()
    log.info("agent of %s serving on %s", sw.name, listen)
    stop.wait()
    server.stop(1)
    agent.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
