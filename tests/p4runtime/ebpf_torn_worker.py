"""One side of the torn-read test (test_ebpf_torn_reads.py), as a process of its own on one CPU.

    python -m tests.p4runtime.ebpf_torn_worker reader|writer PROG IFINDEX CPU SECONDS SPEC.json

Runs the pinned ingress program PROG with BPF_PROG_TEST_RUN on frames that came in by IFINDEX (this process
is started inside the test's namespace), on CPU, for SECONDS.  A writer sends write after write of KEY, each
an INVALIDATE and its UPDATE with a new seq and the value ``seq`` (8 bytes) x 16: every chunk the same.  A
reader sends GETs and checks every cached reply: all 16 bytes of each chunk and all chunks the same words,
else the value is torn.  Prints one JSON line of counts.  A process, not a thread: the GIL would take turns.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from distcache.inet import csum16
from distcache.wire import MAX_CACHEABLE, Flag, Message, Op, decode, encode, populate_invalidate
from softswitch.ebpf import libbpf

ETH_IP_UDP = 14 + 20 + 8
OUT_SIZE = 512


def value_of(seq: int) -> bytes:
    return seq.to_bytes(8, "big") * (MAX_CACHEABLE // 8)


def frame(head: bytes, msg: Message) -> bytes:
    """``head`` (Ethernet, IPv4, UDP of a frame with an empty payload), lengths set for ``msg``."""
    payload = encode(msg)
    ip_len, udp_len = 20 + 8 + len(payload), 8 + len(payload)
    ip = bytearray(head[14:34])
    ip[2:4], ip[10:12] = ip_len.to_bytes(2, "big"), b"\0\0"
    ip[10:12] = csum16(bytes(ip)).to_bytes(2, "big")
    udp = head[34:38] + udp_len.to_bytes(2, "big") + b"\0\0"
    return head[:14] + bytes(ip) + udp + payload


def reader(prog: int, ifindex: int, until: float, spec: dict) -> dict:
    get = frame(bytes.fromhex(spec["get_head"]), Message(op=Op.GET, digest=bytes.fromhex(spec["key"]), seq=1,
                                                         target=spec["target"]))  # fmt: skip
    runs = hits = forwarded = 0
    torn: list[str] = []
    while time.monotonic() < until:
        for _ in range(200):
            _, out = libbpf.run_once(prog, get, ifindex=ifindex, out_size=OUT_SIZE)
            runs += 1
            m = decode(out[ETH_IP_UDP:])
            if m.op == Op.GET_REPLY and m.flags & Flag.CACHED:
                hits += 1
                if len(m.value) != MAX_CACHEABLE or m.value != m.value[:8] * (MAX_CACHEABLE // 8):
                    torn.append(m.value.hex())
            elif m.op == Op.GET and not m.value:
                forwarded += 1
            else:
                raise AssertionError(f"neither a cached reply nor the read: {m}")
    return {"runs": runs, "hits": hits, "forwarded": forwarded, "torn": len(torn), "examples": torn[:3]}


def writer(prog: int, ifindex: int, until: float, spec: dict) -> dict:
    head, key, target = bytes.fromhex(spec["write_head"]), bytes.fromhex(spec["key"]), spec["target"]
    seq = spec["first_seq"]
    populate = populate_invalidate(key, seq, target, spec["epoch"], spec["version"])  # arms the entry's tenure
    for msg in (populate, Message(op=Op.UPDATE, digest=key, seq=seq, value=value_of(seq), target=target)):
        libbpf.run_once(prog, frame(head, msg), ifindex=ifindex)
    writes = 0
    while time.monotonic() < until:
        for _ in range(100):
            seq += 1
            for msg in (Message(op=Op.INVALIDATE, digest=key, seq=seq, target=target),
                        Message(op=Op.UPDATE, digest=key, seq=seq, value=value_of(seq), target=target)):  # fmt: skip
                libbpf.run_once(prog, frame(head, msg), ifindex=ifindex)
            writes += 1
    return {"writes": writes, "last_seq": seq}


def main() -> int:
    mode, prog_path, ifindex, cpu, seconds, spec_path = sys.argv[1:]
    os.sched_setaffinity(0, {int(cpu)})
    spec = json.loads(Path(spec_path).read_text())
    prog = libbpf.map_get(Path(prog_path))  # bpf_obj_get: a pinned program as well as a map
    start = Path(spec["start"])  # both sides begin together: the test creates this file once both are ready
    print("ready", flush=True)
    while not start.exists():
        time.sleep(0.001)
    until = time.monotonic() + float(seconds)
    result = (reader if mode == "reader" else writer)(prog, int(ifindex), until, spec)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
