"""A small synchronous P4Runtime client: what the controller and agents need (the P4Info it resolves names
with is :mod:`p4rt.p4info`).

It speaks to any P4Runtime server (softswitch or BMv2's simple_switch_grpc)
by *names* resolved through the P4Info it pushed, so the same code drives both
targets even though their numeric ids differ.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

import grpc
from finsy.proto import p4i, p4r, p4r_grpc

from distcache.rpc.channel import channel_ready
from distcache.rpc.protos import FAST_RECONNECT
from p4rt.codec import P4RuntimeError, decode
from p4rt.p4info import MatchValue, P4Info

if TYPE_CHECKING:
    from p4rt.plan import SwitchPlan

log = logging.getLogger(__name__)

DIGEST_QUEUE = 256  # DigestLists waiting for the agent; a burst of reports beyond is dropped (acknowledged)


class SwitchConnection:
    """One P4Runtime session to one device, as its primary controller."""

    def __init__(self, address: str, device_id: int, election_id: int = 1, name: str = "") -> None:
        self.address, self.device_id, self.name = address, device_id, name or address
        self.election_id = election_id
        self.channel = grpc.insecure_channel(address, options=FAST_RECONNECT)
        self.stub = p4r_grpc.P4RuntimeStub(self.channel)
        self._requests: queue.Queue = queue.Queue()
        self._stream: grpc.Future | None = None  # the StreamChannel call: iterated, and cancelled by close()
        self._arbitrated = threading.Event()
        self._arbitration_status: int | None = None
        self.arbitration: p4r.MasterArbitrationUpdate | None = None
        self.applied: SwitchPlan | None = None  # the plan this connection last brought the switch to (reconcile)
        """The switch's last arbitration answer: its status says whether anyone is primary, its
        election_id the highest the switch has seen (a new primary needs at least that)."""
        self._reader: threading.Thread | None = None
        self.p4info: P4Info | None = None
        self.digest_lists: queue.Queue[p4r.DigestList] = queue.Queue(DIGEST_QUEUE)
        """DigestLists the switch sent on the stream, in arrival order (ack them with ``ack_digest``);
        at most DIGEST_QUEUE wait: beyond, a list is acknowledged unread and counted in ``digests_dropped``
        (reports of keys that stay hot come again next window, so a backlog is never worth keeping)."""
        self.digests_dropped = 0
        self.stream_closed = threading.Event()
        self.timeout: float | None = None
        """Deadline in seconds of each unary call and read (None: none); a hung switch then fails a call
        instead of holding its caller forever (the controller sets one, so no switch can stall it)."""

    # -- session ----------------------------------------------------------------------
    def connect(self, timeout: float = 10.0) -> None:
        """Open the stream channel and become primary (master arbitration)."""
        self.wait_ready(timeout)

        def requests() -> Iterator[p4r.StreamMessageRequest]:
            while True:
                item = self._requests.get()
                if item is None:
                    return
                yield item

        self._stream = self.stub.StreamChannel(requests())
        self._reader = threading.Thread(target=self._read_stream, daemon=True, name=f"p4rt-{self.name}")
        self._reader.start()
        req = p4r.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        req.arbitration.election_id.low = self.election_id
        self._requests.put(req)
        if not self._arbitrated.wait(timeout):
            raise P4RuntimeError(f"{self.name}: no arbitration answer from {self.address}", "DEADLINE_EXCEEDED")
        if self._arbitration_status != 0:
            raise P4RuntimeError(
                f"{self.name}: not primary for device {self.device_id} "
                f"(status {self._arbitration_status}); another controller holds it",
                "PERMISSION_DENIED",
            )

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Wait for the server without joining the stream: a read-only session (Read needs no arbitration)."""
        if not channel_ready(self.channel, timeout):
            raise P4RuntimeError(
                f"{self.name}: no P4Runtime server answers at {self.address} "
                f"within {timeout:.0f}s; is the switch running?",
                "UNAVAILABLE",
            )

    def _read_stream(self) -> None:
        try:
            for resp in self._stream or ():
                if resp.HasField("arbitration"):
                    self._arbitration_status = resp.arbitration.status.code
                    self.arbitration = resp.arbitration
                    self._arbitrated.set()
                elif resp.HasField("digest"):
                    try:
                        self.digest_lists.put_nowait(resp.digest)
                    except queue.Full:
                        self.digests_dropped += 1
                        self.ack_digest(resp.digest)
                elif resp.HasField("error"):
                    log.warning("%s: stream error: %s", self.name, resp.error)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                log.debug("%s: stream closed: %s", self.name, e.code())
        finally:
            self._arbitrated.set()
            self.stream_closed.set()

    def close(self) -> None:
        self._requests.put(None)
        if self._stream is not None:
            self._stream.cancel()
        self.channel.close()
        self.stream_closed.set()

    def __enter__(self) -> SwitchConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _election(self) -> p4r.Uint128:
        return p4r.Uint128(high=0, low=self.election_id)

    # -- pipeline ----------------------------------------------------------------------
    def set_pipeline(self, p4info: p4i.P4Info, device_config: bytes = b"") -> None:
        req = p4r.SetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            election_id=self._election(),
            action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
        )
        req.config.p4info.CopyFrom(p4info)
        req.config.p4_device_config = device_config
        self.applied = None  # a committed pipeline starts with empty tables
        self._call(self.stub.SetForwardingPipelineConfig, req, "SetForwardingPipelineConfig")
        self.p4info = P4Info(p4info)

    def has_pipeline(self) -> bool:
        """Whether the device holds a forwarding pipeline (False: new, or restarted and empty)."""
        req = p4r.GetForwardingPipelineConfigRequest(device_id=self.device_id)
        try:
            self.stub.GetForwardingPipelineConfig(req, timeout=5)
            return True
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.FAILED_PRECONDITION:
                return False
            raise P4RuntimeError(
                f"{self.name}: GetForwardingPipelineConfig failed: {e.code().name}", e.code().name
            ) from None

    def probe(self, timeout: float = 0.5) -> bool:
        """Whether the P4Runtime server answers a Capabilities request within ``timeout`` seconds."""
        try:
            self.stub.Capabilities(p4r.CapabilitiesRequest(), timeout=timeout)
            return True
        except grpc.RpcError:
            return False

    def use_p4info(self, p4info: p4i.P4Info) -> None:
        """Adopt the P4Info of a pipeline someone already pushed (e.g. after a restart)."""
        self.p4info = P4Info(p4info)

    def _need_p4info(self) -> P4Info:
        if self.p4info is None:
            raise P4RuntimeError(f"{self.name}: no pipeline pushed yet; call set_pipeline first", "FAILED_PRECONDITION")
        return self.p4info

    # -- writes ------------------------------------------------------------------------
    def write(
        self, updates: list[tuple[p4r.Update.Type.ValueType, p4r.TableEntry]], timeout: float | None = None
    ) -> None:
        """Apply (update type, entry) pairs in one Write; raise on any failure.  ``timeout``: this call's
        deadline instead of the connection's."""
        req = p4r.WriteRequest(device_id=self.device_id, election_id=self._election())
        for kind, entry in updates:
            u = req.updates.add(type=kind)
            u.entity.table_entry.CopyFrom(entry)
        self._call(self.stub.Write, req, "Write", timeout)

    def insert(self, table: str, match: dict, action: str, params: dict | None = None, priority: int = 0) -> None:
        e = self._need_p4info().table_entry(table, match, action, params, priority)
        self.write([(p4r.Update.INSERT, e)])

    def modify(self, table: str, match: dict, action: str, params: dict | None = None, priority: int = 0) -> None:
        e = self._need_p4info().table_entry(table, match, action, params, priority)
        self.write([(p4r.Update.MODIFY, e)])

    def delete(self, table: str, match: dict, priority: int = 0) -> None:
        e = self._need_p4info().match_entry(table, match, priority)
        self.write([(p4r.Update.DELETE, e)])

    def set_default(self, table: str, action: str, params: dict | None = None, timeout: float | None = None) -> None:
        e = self._need_p4info().table_entry(table, {}, action, params, default=True)
        self.write([(p4r.Update.MODIFY, e)], timeout)

    # -- meters ------------------------------------------------------------------------
    def set_meter(self, name: str, index: int, cir: int, cburst: int, pir: int, pburst: int) -> None:
        """Configure cell ``index`` of indirect meter ``name`` (a two-rate three-colour meter).

        Rates are in the meter's unit (packets or bytes) per second, bursts in that unit; ``cir``
        must not exceed ``pir``.  A new pipeline config leaves every cell unconfigured (all GREEN).
        """
        self._write_meter(name, index, (cir, cburst, pir, pburst))

    def clear_meter(self, name: str, index: int) -> None:
        """Make cell ``index`` of meter ``name`` unconfigured again: every packet GREEN (no limit)."""
        self._write_meter(name, index, None)

    def _write_meter(self, name: str, index: int, config: tuple[int, int, int, int] | None) -> None:
        meters = {m.preamble.name: m for m in self._need_p4info().info.meters}
        if name not in meters:
            raise P4RuntimeError(f"P4Info has no meter {name!r}", "NOT_FOUND")
        req = p4r.WriteRequest(device_id=self.device_id, election_id=self._election())
        me = req.updates.add(type=p4r.Update.MODIFY).entity.meter_entry
        me.meter_id = meters[name].preamble.id
        me.index.index = index
        if config is not None:
            me.config.cir, me.config.cburst, me.config.pir, me.config.pburst = config
        self._call(self.stub.Write, req, "Write")

    def read_meter(self, name: str) -> dict[int, tuple[int, int, int, int] | None]:
        """index -> (cir, cburst, pir, pburst) of every cell of meter ``name``; None for an unconfigured cell."""
        meters = {m.preamble.name: m for m in self._need_p4info().info.meters}
        if name not in meters:
            raise P4RuntimeError(f"P4Info has no meter {name!r}", "NOT_FOUND")
        req = p4r.ReadRequest(device_id=self.device_id)
        req.entities.add().meter_entry.meter_id = meters[name].preamble.id
        out: dict[int, tuple[int, int, int, int] | None] = {}
        for ent in self._read(req):
            me = ent.meter_entry
            c = me.config
            out[me.index.index] = (c.cir, c.cburst, c.pir, c.pburst) if me.HasField("config") else None
        return out

    # -- packet-out --------------------------------------------------------------------
    def packet_out(self, payload: bytes, **metadata: int) -> None:
        """Send ``payload`` into the switch's pipeline at its CPU port (P4Runtime PacketOut on the stream),
        with the program's packet_out header fields given by name.  Fire and forget, as P4Runtime's
        PacketOut is: a switch that refuses it answers with a stream error, which is logged."""
        if self._stream is None or self.stream_closed.is_set():
            raise P4RuntimeError(
                f"{self.name}: no open stream to send a packet-out on; connect first", "FAILED_PRECONDITION"
            )
        req = p4r.StreamMessageRequest()
        req.packet.CopyFrom(self._need_p4info().packet_out(payload, metadata))
        self._requests.put(req)

    # -- digests -----------------------------------------------------------------------
    def configure_digest(
        self,
        name: str,
        max_timeout_ns: int = 0,
        max_list_size: int = 1,
        ack_timeout_ns: int = 1_000_000_000,
        modify: bool = False,
    ) -> None:
        """Enable (or, with ``modify``, reconfigure) delivery of digest ``name`` on the stream."""
        req = p4r.WriteRequest(device_id=self.device_id, election_id=self._election())
        u = req.updates.add(type=p4r.Update.MODIFY if modify else p4r.Update.INSERT)
        de = u.entity.digest_entry
        de.digest_id = self._need_p4info().digest(name).preamble.id
        de.config.max_timeout_ns = max_timeout_ns
        de.config.max_list_size = max_list_size
        de.config.ack_timeout_ns = ack_timeout_ns
        self._call(self.stub.Write, req, "Write")

    def enable_digest(
        self, name: str, max_timeout_ns: int = 0, max_list_size: int = 1, ack_timeout_ns: int = 1_000_000_000
    ) -> None:
        """Deliver digest ``name`` on the stream with ``config`` (configure_digest's fields), whether or
        not it was configured before (a switch that kept its pipeline keeps its digest entries too)."""
        try:
            self.configure_digest(name, max_timeout_ns, max_list_size, ack_timeout_ns)
        except P4RuntimeError as e:
            if e.code != "ALREADY_EXISTS":
                raise
            self.configure_digest(name, max_timeout_ns, max_list_size, ack_timeout_ns, modify=True)

    def ack_digest(self, dl: p4r.DigestList) -> None:
        """Acknowledge a DigestList, so the switch may report the same data again."""
        req = p4r.StreamMessageRequest()
        req.digest_ack.digest_id = dl.digest_id
        req.digest_ack.list_id = dl.list_id
        self._requests.put(req)

    def decode_digest(self, dl: p4r.DigestList) -> tuple[str, list[dict[str, int]]]:
        """(digest name, one {member: int} per data item) of a DigestList."""
        name, members = self._need_p4info().digest_fields(dl.digest_id)
        rows = [{m: decode(d.bitstring) for m, d in zip(members, data.struct.members, strict=True)} for data in dl.data]
        return name, rows

    # -- reads -------------------------------------------------------------------------
    def read_table(self, table: str) -> list[tuple[dict[str, MatchValue], str, dict[str, int]]]:
        info = self._need_p4info()
        req = p4r.ReadRequest(device_id=self.device_id)
        req.entities.add().table_entry.table_id = info.table(table).preamble.id
        out = []
        for ent in self._read(req):
            _, match, action, params = info.describe_entry(ent.table_entry)
            out.append((match, action, params))
        return out

    def read_default(self, table: str) -> tuple[str, dict[str, int]]:
        """The default action of ``table`` and its parameters, as the switch holds them now."""
        info = self._need_p4info()
        req = p4r.ReadRequest(device_id=self.device_id)
        te = req.entities.add().table_entry
        te.table_id, te.is_default_action = info.table(table).preamble.id, True
        for ent in self._read(req):
            _, _, action, params = info.describe_entry(ent.table_entry)
            return action, params
        raise P4RuntimeError(f"{self.name}: no default entry read back for {table}", "NOT_FOUND")

    def read_counter(
        self, counter: str, index: int | None = None, indexes: Iterable[int] | None = None
    ) -> dict[int, tuple[int, int]]:
        """index -> (packets, bytes) for one cell, the cells ``indexes`` (one request), or all cells.

        Few cells are worth asking for by index: a switch may build its whole answer holding the lock
        its packets need (softswitch does; a full read of a 4096-cell counter took 15 ms there)."""
        return self.read_counters({counter: list(indexes) if indexes is not None else [index]})[counter]

    def read_counters(self, cells: Mapping[str, Iterable[int | None]]) -> dict[str, dict[int, tuple[int, int]]]:
        """counter -> index -> (packets, bytes) of the ``cells`` of several counters, in one request (an index
        None: every cell of that counter).  One round trip where a poll reads several counters together."""
        info = self._need_p4info()
        req = p4r.ReadRequest(device_id=self.device_id)
        names: dict[int, str] = {}
        for counter, indexes in cells.items():
            cid = info.counter(counter).preamble.id
            names[cid] = counter
            for i in indexes:
                ce = req.entities.add().counter_entry
                ce.counter_id = cid
                if i is not None:
                    ce.index.index = i
        out: dict[str, dict[int, tuple[int, int]]] = {c: {} for c in cells}
        if not req.entities:
            return out
        for ent in self._read(req):
            ce = ent.counter_entry
            out[names[ce.counter_id]][ce.index.index] = (ce.data.packet_count, ce.data.byte_count)
        return out

    def _read(self, req: p4r.ReadRequest) -> Iterator[p4r.Entity]:
        try:
            for resp in self.stub.Read(req, timeout=self.timeout):
                yield from resp.entities
        except grpc.RpcError as e:
            raise P4RuntimeError(f"{self.name}: Read failed: {e.code().name}: {e.details()}", e.code().name) from None

    def _call(self, method, req, what: str, timeout: float | None = None):  # noqa: ANN001, ANN202
        try:
            return method(req, timeout=timeout if timeout is not None else self.timeout)
        except grpc.RpcError as e:
            text, codes = _details(e)
            # a batch's status is UNKNOWN by the spec; when its failures agree, report their code
            code = codes.pop() if len(codes) == 1 else e.code().name
            raise P4RuntimeError(f"{self.name}: {what} failed: {e.code().name}: {text}", code) from None


def _details(e: grpc.RpcError) -> tuple[str, set[str]]:
    """The status text plus the per-update errors P4Runtime packs into the status details."""
    from finsy.proto import rpc_status

    text, codes = e.details() or "", set()
    for key, value in e.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        try:
            st = rpc_status.Status.FromString(value)
        except Exception:  # noqa: BLE001 - details are best effort
            continue
        errs = []
        for d in st.details:
            err = p4r.Error()
            if d.Unpack(err) and err.canonical_code != 0:
                name = next((c.name for c in grpc.StatusCode if c.value[0] == err.canonical_code), "UNKNOWN")
                codes.add(name)
                errs.append(f"[{name}] {err.message}")
        if errs:
            text += " " + "; ".join(errs)
    return text, codes
