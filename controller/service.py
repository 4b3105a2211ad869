"""The controller daemon: ``python -m controller`` (``dc-controller``).

Serves the operator API (distcache/proto/controller.proto) that
``distcache-ctl`` talks to, on the cluster's ``controller_address`` (loopback
by default: the API can take switches out of service, so it must not be
reachable from the data network).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from concurrent import futures
from typing import TypeVar

import grpc

from controller.controller import Controller
from controller.health import ControllerError
from controller.metrics import serve_metrics
from controller.status import cluster_status, key_text
from distcache.cmdline import ArgumentParser, existing_dir, input_file, listen_address, load_cluster, output_file
from distcache.partition import spine_buckets
from distcache.rpc.protos import abort, controller_grpc, controller_pb2
from distcache.rpc.shim import shim_control
from harness.processes import SwitchProcessError, SwitchProcesses
from p4rt.client import P4RuntimeError

T = TypeVar("T")

log = logging.getLogger("controller")


class ControllerService(controller_grpc.ControllerServicer):
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.pool = futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="status")

    def Status(self, request, context):  # noqa: ANN001, ANN201, N802, ARG002
        return cluster_status(self.ctl, self.pool).cluster

    def Partitions(self, request, context):  # noqa: ANN001, ANN201, N802, ARG002
        ctl = self.ctl
        now, original = ctl.partition.buckets(), spine_buckets(ctl.partition.spine_ids)
        out = controller_pb2.PartitionStatus(owner=now, epoch=ctl.state.epoch)
        for sid in ctl.partition.spine_ids:
            sp = ctl.cluster.switch_by_id(sid)
            out.spines.add(
                spine=sp.name,
                switch_id=sid,
                buckets=now.count(sid),
                original=original.count(sid),
                failed=sp.name in ctl.state.failed,
            )
        for b, (was, is_) in enumerate(zip(original, now, strict=True)):
            if was != is_:
                out.moved.add(
                    bucket=b,
                    from_spine=ctl.cluster.switch_by_id(was).name,
                    to_spine=ctl.cluster.switch_by_id(is_).name if is_ else "",
                )
        return out

    def Hot(self, request, context):  # noqa: ANN001, ANN201, N802
        ctl = self.ctl
        names = [request.switch] if request.switch else list(ctl.agents)
        top = request.top or 10
        out = controller_pb2.HotReply()
        for name in names:
            if name not in ctl.agents:
                abort(
                    context,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{name!r} is not a cache switch; cache switches: {', '.join(ctl.agents)}",
                )
            if name in ctl.state.failed:
                out.switches.add(switch=name)
                continue
            if ctl.health[name].agent_alive is False:  # known hung or gone: do not wait for it
                abort(
                    context,
                    grpc.StatusCode.UNAVAILABLE,
                    f"the agent of {name} is not answering ({ctl.health[name].agent_error})",
                )
            try:
                st = ctl.agents[name].status(with_keys=True)
            except grpc.RpcError as e:
                abort(context, grpc.StatusCode.UNAVAILABLE, f"the agent of {name} does not answer ({e.code().name})")
            rows = sorted(zip(st.keys, st.slot_hits, strict=True), key=lambda r: (-r[0].hits, -r[1]))[:top]
            sh = out.switches.add(switch=name)
            for k, total in rows:
                sh.keys.add(key=k.key, text=key_text(k.key), hits=k.hits, total_hits=total, state=k.state, slot=k.slot)
        return out

    def _change(self, context: grpc.ServicerContext, fn: Callable[..., T], *args: object) -> T:
        try:
            return fn(*args)
        except ControllerError as e:
            abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except SwitchProcessError as e:
            abort(context, grpc.StatusCode.INTERNAL, str(e))

    def Fail(self, request, context):  # noqa: ANN001, ANN201, N802
        msg, moved, secs = self._change(context, self.ctl.fail, request.switch, request.keep_running)
        return controller_pb2.ChangeReply(message=msg, moved_buckets=moved, seconds=secs, epoch=self.ctl.state.epoch)

    def Recover(self, request, context):  # noqa: ANN001, ANN201, N802
        msg, moved, secs = self._change(context, self.ctl.recover, request.switch)
        return controller_pb2.ChangeReply(message=msg, moved_buckets=moved, seconds=secs, epoch=self.ctl.state.epoch)

    def SetMechanism(self, request, context):  # noqa: ANN001, ANN201, N802
        msg = self._change(context, self.ctl.set_mechanism, request.mechanism)
        return controller_pb2.ChangeReply(message=msg, epoch=self.ctl.state.epoch)


def serve(ctl: Controller, address: str) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    controller_grpc.add_ControllerServicer_to_server(ControllerService(ctl), server)
    if not server.add_insecure_port(address):
        raise OSError(f"cannot listen on {address}")
    server.start()
    return server


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m controller", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", required=True, type=input_file, help="cluster description (JSON)")
    ap.add_argument("--p4info", required=True, type=input_file, help="P4Info (text) of the pipeline")
    ap.add_argument("--device-config", type=input_file, help="device config file (BMv2 JSON); none for softswitch")
    ap.add_argument("--shim-dir", required=True, type=existing_dir, help="folder with the shims' control sockets")
    ap.add_argument(
        "--state-file", type=output_file, help="where the controller keeps its state (recovered on restart)"
    )
    ap.add_argument(
        "--switches",
        type=input_file,
        help="switches.json of an emulated deployment: lets `fail` stop and `recover` start switch processes",
    )
    ap.add_argument(
        "--listen",
        type=listen_address,
        help="operator API address (default: the cluster's controller_address, loopback)",
    )
    ap.add_argument(
        "--metrics",
        type=listen_address,
        help="Prometheus metrics address, HOST:PORT (default: the cluster's metrics_address, loopback)",
    )
    ap.add_argument("--log-file", type=output_file)
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, filename=args.log_file, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    try:
        cluster = load_cluster(ap, args.cluster)
        procs = SwitchProcesses(args.switches) if args.switches else None
        ctl = Controller(
            cluster,
            args.p4info,
            lambda h: shim_control(args.shim_dir, h.name),
            args.device_config.read_bytes() if args.device_config else b"",
            args.state_file,
            procs,
        )
    except (OSError, ValueError, SwitchProcessError) as e:
        ap.error(str(e))
    listen = args.listen or cluster.controller_address
    metrics = args.metrics or cluster.metrics_address
    try:
        ctl.start()
        server = serve(ctl, listen)
        if metrics:
            serve_metrics(ctl, metrics)
    except (OSError, P4RuntimeError, ConnectionError, grpc.RpcError) as e:
        log.error("cannot start: %s", e)
        print(f"controller: cannot start: {e}", flush=True)
        ctl.close()
        return 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info(
        "controller serving on %s (epoch %d, failed: %s)", listen, ctl.state.epoch, sorted(ctl.state.failed) or "none"
    )
    print(f"controller ready listen={listen} metrics={metrics or 'off'}", flush=True)
    stop.wait()
    server.stop(1)
    ctl.close()
    return 0
