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
import time
from collections.abc import Callable
from concurrent import futures
from typing import TypeVar

import grpc

from controller.controller import Controller
from controller.core import ControllerError
from distcache import p4names as n
from distcache.api import abort, controller_grpc, controller_pb2
from distcache.cluster import Role, is_cache_switch
from distcache.cmdline import ArgumentParser, existing_dir, input_file, listen_address, load_cluster, output_file
from distcache.hashing import user_key
from distcache.partition import spine_buckets
from harness.processes import SwitchProcessError, SwitchProcesses
from p4rt.client import P4RuntimeError

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger("controller")

STATUS_WAIT = 1.5  # seconds the Status API waits for live counters and agents before using cached ones
ROLE_NAMES = {Role.SPINE: "spine", Role.STORAGE_LEAF: "storage_leaf", Role.CLIENT_LEAF: "client_leaf"}


def key_text(wkey: bytes) -> str:
    """The user key of a wire key when it is short and printable, else its hex."""
    k = user_key(wkey)
    if k is not None:
        try:
            text = k.decode()
            if text.isprintable():
                return text
        except UnicodeDecodeError:
            pass
    return wkey.hex()


class ControllerService(controller_grpc.ControllerServicer):
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.pool = futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="status")

    def Status(self, request, context):  # noqa: ANN001, ANN201, N802, ARG002
        """Answers within STATUS_WAIT whatever hangs: counters and agents are read now, all at once and
        each with a short deadline; what does not answer in time is shown as the health poll last saw it
        (an agent that the poll found not answering is not asked again here)."""
        ctl = self.ctl
        switches = ctl.cluster.switches()
        reads = {sw.name: self.pool.submit(ctl.read_stats, sw.name) for sw in switches if ctl.health[sw.name].alive}
        deaths = {
            sw.name: self.pool.submit(ctl.read_deaths, sw.name)
            for sw in switches
            if ctl.health[sw.name].alive and sw.role in (Role.CLIENT_LEAF, Role.STORAGE_LEAF)
        }
        agents = {
            name: self.pool.submit(ctl.poll_agent, name)
            for name in ctl.agent_status
            if ctl.health[name].agent_alive is not False
        }
        by = time.monotonic() + STATUS_WAIT

        def result(job: futures.Future[R] | None) -> R | None:
            if job is None:
                return None
            try:
                return job.result(timeout=max(0.0, by - time.monotonic()))
            except Exception:  # noqa: BLE001 - a switch or agent that did not answer: shown from the cache
                return None

        out = controller_pb2.ClusterStatus(
            mechanism=ctl.cluster.mechanism.name.lower(),
            failovers=ctl.state.failovers,
            recoveries=ctl.state.recoveries,
            epoch=ctl.state.epoch,
            last_detection_s=ctl.state.last_detection_s,
            last_failover_s=ctl.state.last_failover_s,
            replicated=sorted(key_text(k) for k in ctl.replicated),
        )
        for death in list(ctl.spine_deaths):
            out.spine_deaths.add(
                leaf=death.leaf, spine=death.spine, detect_s=death.detect_s, silent_s=death.silent_s, at=death.at
            )
        owned: dict[int, int] = {}
        for sid in ctl.buckets:
            owned[sid] = owned.get(sid, 0) + 1
        for sw in switches:
            h = ctl.health[sw.name]
            failure = ctl.state.failed.get(sw.name)
            notes = [d] if (d := ctl.detail(sw.name)) else []
            st = out.switches.add(
                name=sw.name,
                role=ROLE_NAMES[sw.role],
                switch_id=sw.switch_id,
                alive=h.alive,
                failed=failure is not None,
                admin_failed=bool(failure and failure.admin),
                load=ctl.load(sw.name),
                buckets=owned.get(sw.switch_id, 0),
            )
            counters = result(reads.get(sw.name))
            if counters is None and sw.name in reads:
                notes.append("counters not readable now" + (", as last read" if h.stats else ""))
                counters = (h.stats, h.drops) if h.stats else None
            if counters is not None:
                stats, drops = counters
                for s in n.Stat:
                    st.stats[s.name] = stats.get(int(s), (0, 0))[0]
                for reason in n.DropReason:
                    if drops.get(int(reason), (0, 0))[0]:
                        st.drops[reason.name] = drops[int(reason)][0]
                st.hits, st.misses = st.stats["READ_HIT"], st.stats["READ_MISS"]
                st.hit_ratio = st.hits / (st.hits + st.misses) if st.hits + st.misses else 0.0
            if (dead := result(deaths.get(sw.name))) is not None:
                st.spine_deaths.update(dead)
            if is_cache_switch(sw):
                a = result(agents.get(sw.name))
                st.agent_alive = a is not None
                if a is None:
                    notes.append(
                        f"agent: not answering ({h.agent_error or 'no reply in time'})"
                        + (", figures as last seen" if h.agent is not None else "")
                    )
                    a = h.agent
                if a is not None:
                    st.slots, st.occupied = a.slots, a.occupied
                    st.digests, st.auto_inserted = a.digests, a.auto_inserted
            st.detail = "; ".join(notes)
        return out

    def Partitions(self, request, context):  # noqa: ANN001, ANN201, N802, ARG002
        ctl = self.ctl
        now, original = ctl.buckets, spine_buckets(ctl.spine_ids())
        out = controller_pb2.PartitionStatus(owner=now, epoch=ctl.state.epoch)
        for sid in ctl.spine_ids():
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
            lambda h: f"unix:{args.shim_dir / f'shim-{h.name}.sock'}",
            args.device_config.read_bytes() if args.device_config else b"",
            args.state_file,
            procs,
        )
    except (OSError, ValueError, SwitchProcessError) as e:
        ap.error(str(e))
    listen = args.listen or cluster.controller_address
    try:
        ctl.start()
        server = serve(ctl, listen)
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
    print(f"controller ready listen={listen}", flush=True)
    stop.wait()
    server.stop(1)
    ctl.close()
    return 0
