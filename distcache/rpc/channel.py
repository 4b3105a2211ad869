"""Waiting for a gRPC server to answer, the one way every client here does it."""

from __future__ import annotations

import grpc


def channel_ready(channel: grpc.Channel, timeout: float) -> bool:
    """Whether ``channel`` connects within ``timeout`` seconds.

    On a timeout the wait is cancelled: left running, it would keep watching the channel and fail
    with "Channel closed" in a gRPC thread once the caller closes the channel.
    """
    ready = grpc.channel_ready_future(channel)
    try:
        ready.result(timeout=timeout)
    except grpc.FutureTimeoutError:
        ready.cancel()
        return False
    return True
