"""Packets per second through one switch, on real interfaces: ``make bench-switch``.

Why: ``make bench`` times softswitch's pipeline alone; this measures a whole
switch process (packet I/O, pipeline, locks, the P4Runtime server beside it)
the way it runs in a deployment, and BMv2 (``simple_switch_grpc``) beside it
under the same load, so a change to softswitch can be judged by its ratio to
BMv2 on the same machine.

The bed, all of it its own and all of it removed at the end (also on Ctrl-C
and SIGTERM): a network namespace ``dcbench-<pid>`` holding ``lo`` and three
veth pairs (``bswN`` the switch's port N, ``bptN`` the harness's end), IPv6 and
TX checksum offload off, no addresses and no route out; the harness's main
thread joins the namespace (setns) before any thread exists, so its
P4Runtime channel reaches the switch on the namespace's loopback.  The switch
plays storage leaf sl0 of the 2-spine, 2-storage-rack cluster of the PTF
tests (``tests/ptf/dctest.py``) with the entries ``p4rt.plan.plan``
gives it: port 1 faces the storage server, ports 2 and 3 the spines sp0, sp1.
BMv2 starts with ``--no-p4`` and gets ``build/distcache.json`` + P4Info over
P4Runtime (``make build`` writes them); softswitch gets its own P4Info.

Three paths, each offered from spine port 3 by a sender process that writes
one prebuilt frame to an AF_PACKET socket on ``bpt3``, paced:

* hit: a GET for a cached, valid key (inserted into ``cache_lookup``, then made
  valid by a populate from the server port, as the shim does)
  with target = sl0's switch id: the switch answers it; the reply goes to the
  client through the spine the key's hash picks (ECMP; the key is chosen so it
  is sp0, port 2, but both spine ports are counted);
* miss: a GET for a key nobody cached, same target: forwarded to the server (port 1);
* forwarding: a plain UDP datagram (not DistCache) to the server's address: port 1.

Before each path one frame is sent and what comes out is decoded and checked
(port, operation, value).  Then the offered rate is found: the sender doubles
its rate every half second until the switch delivers less than 80 % of what
reaches its interface, and the measured run offers twice what the switch then
delivered (and is run again at a higher rate if the switch kept up after
all), so the switch is saturated while the sender, which shares the two
cores, takes no more than it needs.  The table shows offered next to
delivered, and the CPU the switch, the sender, the kernel (softirq) and
other processes (a shared machine) took in the window.  Delivered packets are the kernel's
``rx_packets`` of the receiving veth ends (``/proc/net/dev`` of the
namespace, the same counters as ``/sys/class/net/<if>/statistics``), offered
packets its ``rx_packets`` of ``bsw3``, each over a window of ``--seconds``
after a warm-up; pps = delivered / window.  After each path the switch's
``dc_stats`` counter must have moved by the packets delivered (READ_HIT for
hits, READ_MISS for misses, neither for forwarding), else the run fails.

``--profile DIR`` samples softswitch with py-spy during one more hit run of at
least 5 s (after the measured one, so the figures are unperturbed) and writes
the raw stacks (``softswitch-hit.raw.txt``) and a summary (``summary.txt``,
``summary.json``: own and inclusive % per function, own % per file).  py-spy
samples without stopping the switch (``--nonblocking``: stopping it for each
sample cut its rate by two thirds), and the few stacks read while they
changed are left out; the pkt/s while sampled is reported next to it.

Progress and the tables go to stderr; stdout gets only ``hit_pps=N miss_pps=N
fwd_pps=N`` (softswitch) and, when BMv2 ran, ``bmv2_hit_pps=N bmv2_miss_pps=N
bmv2_fwd_pps=N`` (``--json``: one JSON object instead).

The modules, one job each: ``config`` (the bed's facts), ``namespace`` (the namespace the harness enters),
``frames`` and ``probe`` (what is offered, one frame through and its check), ``sender`` (the paced sender
process), ``bed`` (one switch, started by harness.switch, and its P4Runtime session), ``measure`` (rate search,
window, counters), ``profile`` (py-spy), ``report`` (summary lines and tables), ``run`` (the run and its
command line, ``python -m bench.switch``).
"""

from __future__ import annotations

from bench.pyspy import py_spy
from bench.switch.bed import Bed
from bench.switch.config import (
    BMV2_JSON,
    BMV2_P4INFO,
    BUCKETS,
    CLUSTER,
    LEAF,
    PORTS,
    SERVER_PORT,
    SetupError,
)
from bench.switch.frames import Frames, build_frames, udp_payload
from bench.switch.namespace import Namespace
from bench.switch.probe import probe
from bench.switch.run import main
from harness.switch import BMV2_COMPILER, BMV2_SWITCH

__all__ = [  # what the tests that reuse the bed import (tests/e2e/test_netfaults.py, tests/e2e/test_bench_switch.py)
    "BMV2_COMPILER",
    "BMV2_JSON",
    "BMV2_P4INFO",
    "BMV2_SWITCH",
    "BUCKETS",
    "CLUSTER",
    "LEAF",
    "PORTS",
    "SERVER_PORT",
    "Bed",
    "Frames",
    "Namespace",
    "SetupError",
    "build_frames",
    "main",
    "probe",
    "py_spy",
    "udp_payload",
]
