"""Client of the controller's operator API (what ``distcache-ctl`` and the deployment use)."""

from __future__ import annotations

import grpc

from distcache.rpc.channel import channel_ready
from distcache.rpc.protos import FAST_RECONNECT, controller_grpc, controller_pb2


class ControllerUnreachableError(ConnectionError):
    """No controller answers at the address; the message says how to start one."""


class ControllerRequestError(RuntimeError):
    """The controller refused a request; the message is the controller's explanation."""


START_HINT = (
    "start it with `python -m controller --cluster runs/<run>/cluster.json --p4info ... --shim-dir "
    "runs/<run>` (make run starts one for its deployment)"
)


def change_summary(reply: controller_pb2.ChangeReply) -> str:
    """The line ``distcache-ctl fail``/``recover`` prints for the controller's answer (whoever sent it)."""
    return f"{reply.message} ({reply.seconds:.2f} s, epoch {reply.epoch})"


class ControllerClient:
    def __init__(self, address: str, timeout: float = 60.0) -> None:
        self.address, self.timeout = address, timeout
        self.channel = grpc.insecure_channel(address, options=FAST_RECONNECT)
        self.stub = controller_grpc.ControllerStub(self.channel)

    def wait_ready(self, timeout: float = 15.0) -> None:
        if not channel_ready(self.channel, timeout):
            raise ControllerUnreachableError(f"controller not reachable at {self.address}; is it running? {START_HINT}")

    def _call(self, method: str, request: object) -> object:
        try:
            return getattr(self.stub, method)(request, timeout=self.timeout)
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise ControllerUnreachableError(
                    f"controller not reachable at {self.address} ({e.code().name}); is it running? {START_HINT}"
                ) from None
            raise ControllerRequestError(e.details() or e.code().name) from None

    def status(self) -> controller_pb2.ClusterStatus:
        return self._call("Status", controller_pb2.Empty())

    def partitions(self) -> controller_pb2.PartitionStatus:
        return self._call("Partitions", controller_pb2.Empty())

    def hot(self, switch: str = "", top: int = 10) -> controller_pb2.HotReply:
        return self._call("Hot", controller_pb2.HotRequest(switch=switch, top=top))

    def fail(self, switch: str, keep_running: bool = False) -> controller_pb2.ChangeReply:
        return self._call("Fail", controller_pb2.SwitchRequest(switch=switch, keep_running=keep_running))

    def recover(self, switch: str) -> controller_pb2.ChangeReply:
        return self._call("Recover", controller_pb2.SwitchRequest(switch=switch))

    def set_mechanism(self, mechanism: str) -> controller_pb2.ChangeReply:
        return self._call("SetMechanism", controller_pb2.MechanismRequest(mechanism=mechanism))

    def close(self) -> None:
        self.channel.close()
