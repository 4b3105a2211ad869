"""Arbitration and the stream channel of the P4Runtime server."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from finsy.proto import p4r, rpc_code
from google.protobuf import any_pb2

from softswitch.server.codec import (
    PACKET_IN_BACKLOG,
    SC,
    P4RuntimeError,
    _code_int,
    _err,
    _to_u128,
    _u128,
)
from softswitch.server.digests import DigestEngine
from softswitch.server.ids import PipelineConfig

log = logging.getLogger("softswitch.server")

_CLOSE = object()


@dataclass(eq=False)
class _Stream:
    """One StreamChannel: its identity once arbitrated and its outgoing queue."""

    out: queue.SimpleQueue[Any] = field(default_factory=queue.SimpleQueue)
    role: str | None = None  # None until the first arbitration update
    election_id: int | None = None  # None = unset (never primary)
    peer: str = ""


@dataclass
class _Role:
    streams: list[_Stream] = field(default_factory=list)
    highest: int | None = None  # highest election id ever seen (spec: election_id_past)
    primary: _Stream | None = None
    config: any_pb2.Any | None = None


@dataclass
class _Terminate:
    code: grpc.StatusCode
    message: str


class Arbitration:
    """StreamChannel: client arbitration per role (primary = highest election id), packet-in/out and digests
    on the primary's stream.  A part of :class:`~softswitch.server.service.P4RuntimeService` (its state
    is set up there)."""

    # set up by P4RuntimeService.__init__
    device_id: int
    digests: DigestEngine
    packet_out_handler: Callable[[p4r.PacketOut], None] | None
    digest_ack_handler: Callable[[p4r.DigestListAck], None] | None
    packet_ins_dropped: int
    _arb_lock: threading.Lock
    _roles: dict[str, _Role]
    _committed: PipelineConfig | None

    def primary_election_id(self, role: str = "") -> int | None:
        with self._arb_lock:
            r = self._roles.get(role)
            return r.primary.election_id if r and r.primary else None

    # -- StreamChannel ----------------------------------------------------------------------------
    def StreamChannel(
        self, request_iterator: Iterator[p4r.StreamMessageRequest], context: grpc.ServicerContext
    ) -> Iterator[p4r.StreamMessageResponse]:
        stream = _Stream(peer=context.peer())
        context.add_callback(lambda: stream.out.put(_CLOSE))
        reader = threading.Thread(
            target=self._read_stream, args=(stream, request_iterator), name=f"p4rt-stream-{stream.peer}", daemon=True
        )
        reader.start()
        log.debug("stream opened by %s", stream.peer)
        try:
            while True:
                msg = stream.out.get()
                if msg is _CLOSE:
                    return
                if isinstance(msg, _Terminate):
                    log.info("closing stream of %s: %s %s", stream.peer, msg.code.name, msg.message)
                    context.abort(msg.code, msg.message)
                yield msg
        finally:
            self._drop_stream(stream)
            log.debug("stream of %s closed", stream.peer)

    def _read_stream(self, stream: _Stream, requests: Iterator[p4r.StreamMessageRequest]) -> None:
        try:
            for req in requests:
                kind = req.WhichOneof("update")
                if kind == "arbitration":
                    err = self._arbitrate(stream, req.arbitration)
                    if err is not None:
                        stream.out.put(err)
                        return
                elif kind == "packet":
                    self._on_packet_out(stream, req.packet)
                elif kind == "digest_ack":
                    self._on_digest_ack(stream, req.digest_ack)
                else:
                    stream.out.put(
                        p4r.StreamMessageResponse(
                            error=p4r.StreamError(
                                canonical_code=rpc_code.UNIMPLEMENTED,
                                message=f"stream message {kind!r} not supported",
                                other=p4r.StreamOtherError(),
                            )
                        )
                    )
        except grpc.RpcError:
            pass  # client went away
        except Exception:  # a bug here must not leave the stream hanging
            log.exception("stream reader of %s failed", stream.peer)
        finally:
            stream.out.put(_CLOSE)

    def _arbitrate(self, stream: _Stream, upd: p4r.MasterArbitrationUpdate) -> _Terminate | None:
        role_name = upd.role.name if upd.HasField("role") else ""
        eid = _u128(upd.election_id) if upd.HasField("election_id") else None
        with self._arb_lock:
            if stream.role is None:
                if upd.device_id != self.device_id:
                    return _Terminate(
                        SC.NOT_FOUND, f"device id {upd.device_id} not found (this is device {self.device_id})"
                    )
                role = self._roles.setdefault(role_name, _Role())
                if eid is not None and any(s.election_id == eid for s in role.streams):
                    return _Terminate(SC.INVALID_ARGUMENT, f"Election id {eid} is already used by another controller")
                stream.role = role_name
                role.streams.append(stream)
            else:
                if upd.device_id != self.device_id:
                    return _Terminate(SC.FAILED_PRECONDITION, "device id differs from the stream's")
                if role_name != stream.role:
                    return _Terminate(SC.FAILED_PRECONDITION, "role differs from the stream's; open a new stream")
                role = self._roles[role_name]
                if eid is not None and any(s.election_id == eid for s in role.streams if s is not stream):
                    return _Terminate(SC.INVALID_ARGUMENT, f"Election id {eid} is already used by another controller")
            stream.election_id = eid
            was_primary = role.primary is stream
            if eid is not None and (role.highest is None or eid >= role.highest):
                changed = role.primary is not stream
                role.highest = eid
                role.primary = stream
                role.config = upd.role.config if upd.role.HasField("config") else None
                if changed:
                    log.info("primary for role %r is now %s (election id %d)", role_name or "default", stream.peer, eid)
                self._notify(role_name, role, role.streams)
            elif was_primary:
                role.primary = None
                log.info("primary %s for role %r stepped down", stream.peer, role_name or "default")
                self._notify(role_name, role, role.streams)
            else:
                self._notify(role_name, role, [stream])
        return None

    def _notify(self, role_name: str, role: _Role, streams: Sequence[_Stream]) -> None:
        """Send each of ``streams`` the arbitration advisory (caller holds _arb_lock)."""
        for s in streams:
            upd = p4r.MasterArbitrationUpdate(device_id=self.device_id)
            if role_name or role.config is not None:
                upd.role.name = role_name
                if role.config is not None:
                    upd.role.config.CopyFrom(role.config)
            if role.highest is not None:
                upd.election_id.CopyFrom(_to_u128(role.highest))
            if role.primary is s:
                upd.status.code = rpc_code.OK
                upd.status.message = "primary"
            elif role.primary is not None:
                upd.status.code = rpc_code.ALREADY_EXISTS
                upd.status.message = "backup: another controller is primary"
            else:
                upd.status.code = rpc_code.NOT_FOUND
                upd.status.message = "no primary"
            s.out.put(p4r.StreamMessageResponse(arbitration=upd))

    def _drop_stream(self, stream: _Stream) -> None:
        with self._arb_lock:
            if stream.role is None:
                return
            role = self._roles[stream.role]
            if stream in role.streams:
                role.streams.remove(stream)
            if role.primary is stream:
                role.primary = None
                log.info("primary %s for role %r disconnected", stream.peer, stream.role or "default")
                self._notify(stream.role, role, role.streams)
            stream.role = None

    def _is_primary_stream(self, stream: _Stream) -> bool:
        with self._arb_lock:
            return stream.role is not None and self._roles[stream.role].primary is stream

    def _on_packet_out(self, stream: _Stream, packet: p4r.PacketOut) -> None:
        code: int
        if not self._is_primary_stream(stream):
            code, msg = rpc_code.PERMISSION_DENIED, "only the primary controller may send packets"
        elif self.packet_out_handler is None:
            code, msg = rpc_code.UNIMPLEMENTED, "this pipeline has no packet-out support"
        else:
            try:
                self.packet_out_handler(packet)
                return
            except P4RuntimeError as e:
                code, msg = _code_int(e.status), e.message
            except Exception as e:
                log.exception("packet-out handler failed")
                code, msg = rpc_code.INTERNAL, f"packet-out failed: {e}"
        stream.out.put(
            p4r.StreamMessageResponse(
                error=p4r.StreamError(
                    canonical_code=code, message=msg, packet_out=p4r.PacketOutError(packet_out=packet)
                )
            )
        )

    def _on_digest_ack(self, stream: _Stream, ack: p4r.DigestListAck) -> None:
        if self.digest_ack_handler is not None and self._is_primary_stream(stream):
            self.digest_ack_handler(ack)

    def _send_to_primary(self, msg: p4r.StreamMessageResponse, role: str) -> bool:
        with self._arb_lock:
            r = self._roles.get(role)
            primary = r.primary if r else None
        if primary is None:
            return False
        if primary.out.qsize() >= PACKET_IN_BACKLOG:
            self.packet_ins_dropped += 1
            return False
        primary.out.put(msg)
        return True

    def send_packet_in(self, payload: bytes, metadata: Sequence[tuple[int, bytes]] = (), role: str = "") -> bool:
        """Hand a packet to the primary controller; False if none (or it lags too far)."""
        pkt = p4r.PacketIn(payload=payload)
        for mid, value in metadata:
            pkt.metadata.add(metadata_id=mid, value=value)
        return self._send_to_primary(p4r.StreamMessageResponse(packet=pkt), role)

    def _digest_ack(self, ack: p4r.DigestListAck) -> None:
        cfg = self._committed
        d = cfg.ids.digests.get(ack.digest_id) if cfg is not None else None
        if d is not None:  # an ack for an unknown digest or list is ignored, as BMv2
            self.digests.ack(d.name, ack.list_id)

    def send_digest_list(self, digest: p4r.DigestList, role: str = "") -> bool:
        """Hand a digest list to the primary controller; False if none."""
        return self._send_to_primary(p4r.StreamMessageResponse(digest=digest), role)

    # -- checks shared by the unary RPCs ------------------------------------------------------------
    def _check_device(self, device_id: int) -> None:
        if device_id != self.device_id:
            _err(SC.NOT_FOUND, f"device id {device_id} not found (this is device {self.device_id})")

    def _check_primary(self, role_name: str, election_id: p4r.Uint128 | None) -> None:
        with self._arb_lock:
            role = self._roles.get(role_name)
            if role is None and role_name:
                _err(SC.NOT_FOUND, f"role {role_name!r} not found")
            primary = role.primary if role else None
            eid = _u128(election_id) if election_id is not None else None
            if primary is None or eid is None or primary.election_id != eid:
                _err(
                    SC.PERMISSION_DENIED,
                    "not the primary controller "
                    f"(election id {eid}, primary {primary.election_id if primary else None})",
                )
