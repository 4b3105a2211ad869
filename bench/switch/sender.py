"""The sender: a spawned process inside the namespace that offers one prebuilt frame at a paced rate on an
AF_PACKET socket (the bed asks it over a pipe), so it takes no more of the two cores than the rate needs."""

from __future__ import annotations

import errno
import signal
import socket
import time
from multiprocessing.connection import Connection

from bench.switch.config import SENDER_BURST


def sender_main(conn: Connection, iface: str) -> None:
    """Offer frames on ``iface``: each request (frame, rate, seconds) is answered with (sent, errors, seconds).

    Paced: it writes what is due at ``rate`` since the request started, SENDER_BURST frames at a time, and
    sleeps when nothing is due, so it takes only the CPU that rate needs (the switch shares the 2 cores).
    A backlog of more than 20 ms (the sender was descheduled) is dropped, not sent as one burst.  rate 0:
    as fast as it can.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness stops it
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.bind((iface, 0))
    conn.send("ready")
    while True:
        req = conn.recv()
        if req is None:
            return
        frame, rate, seconds = req
        send, perf, sleep = sock.send, time.perf_counter, time.sleep
        sent = errors = 0
        t0 = perf()
        end, lag = t0 + seconds, max(1, int(rate * 0.02))
        base = 0  # frames the pacing forgave (backlog dropped)
        while (now := perf()) < end:
            due = int((now - t0) * rate) - base - sent - errors if rate else SENDER_BURST
            if due > lag:
                base += due - SENDER_BURST
                due = SENDER_BURST
            if due <= 0:
                sleep(min(2e-4, (base + sent + errors + 1) / rate - (now - t0)))
                continue
            for _ in range(min(due, SENDER_BURST)):
                try:
                    send(frame)
                    sent += 1
                except OSError as e:  # ENOBUFS: the device queue is full; count it and go on
                    if e.errno not in (errno.ENOBUFS, errno.EAGAIN):
                        raise
                    errors += 1
        conn.send((sent, errors, perf() - t0))
