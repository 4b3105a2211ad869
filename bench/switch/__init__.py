"""Packets per second through one switch, on real interfaces: ``make bench-switch``.

Why: ``make bench`` times softswitch's pipeline alone; this measures a whole
switch process (packet I/O, pipeline, locks, the P4Runtime server beside it)
the way it runs in a deployment, with the other targets beside it under the
same load in the same run -- BMv2 (its fast build, ``simple_switch_grpc-fast``
where a user installed it; else the logging build, and the run
says so) and the kernel target (``ebpf``: p4c-ebpf's build of the same P4 on
the ports' TC hooks) -- and, as the ceiling of the veths themselves, a program
that only turns reads around (the limit), so every figure can be judged by its
ratio to another on the same machine.

Targets: by default every one whose tools are here, in the order softswitch,
bmv2, ebpf, limit; each one missing is skipped with one line saying what it
needs.  ``--target NAME`` measures that one alone (``both``: softswitch and
BMv2), and fails with one line when its tools are missing.

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
P4Runtime (``make build`` writes them); softswitch and ebpf get softswitch's P4Info.

The sender is compiled (``build/pktsend``, tools/pktsend/pktsend.c, built by
``make deps``): one prebuilt frame, given as hex by the Python side (the wire
format stays defined in distcache/wire.py), written to an AF_PACKET socket on
``bpt3`` a batch per ``sendmmsg``, paced or as fast as it can; the Python
sender it replaces topped out near half a million frames a second, below the
kernel target.  The cores are split (RPS, on two cores or more): the sender
runs pinned to core 0, where the receive work of the harness's ends (the
frames coming back) also goes, and the receive work of the switch's ends
goes to the other cores -- so a switch that runs in the kernel's softirq
works on a core of its own, not inside the sender's system calls, and when it
falls behind its input's backlog fills and refuses frames (the kernel counts
them in ``bsw3``'s ``rx_dropped``) rather than slowing the sender down.

Three paths, each offered from spine port 3:

* hit: a GET for a cached, valid key (inserted into ``cache_lookup``, then made
  valid by a populate from the server port, as the shim does)
  with target = sl0's switch id: the switch answers it; the reply goes to the
  client through the spine the key's hash picks (ECMP; the key is chosen so it
  is sp0, port 2, but both spine ports are counted);
* miss: a GET for a key nobody cached, same target: forwarded to the server (port 1);
* forwarding: a plain UDP datagram (not DistCache) to the server's address: port 1.

The limit (``limit_pps``): in place of a switch, ``build/turnaround.bpf.o``
(tools/turnaround/turnaround.bpf.c, a tc program built by ``make deps``) on
``bsw3``'s ingress swaps the hit frame's MAC addresses, IPv4 addresses and
UDP ports, as a reply carries them, and redirects it out of ``bsw2``, the
port a hit's reply leaves by: the same veths a real hit crosses, with nothing
else done.  It is measured as the hit path is (bench/switch/limit.py).

Before each path one frame is sent and what comes out is decoded and checked
(port, operation, value; for the limit: every swapped field).  Then the offered
rate is found: the sender doubles its rate every half second until the switch
delivers less than 80 % of what reaches its interface (taken or refused), and
the measured run offers twice what the switch then delivered (and is run again
at a higher rate if the switch kept up after all), or all the sender can when
it could not double any more, so the switch is saturated while a paced sender
takes no more of the cores than it needs.  The table shows, per target and
path, delivered next to offered (``rx_packets`` of ``bsw3``: what reached the
switch's input) and refused (its ``rx_dropped``), who limited the path (the
switch when its input refused frames, when it delivered clearly less than it
was offered, or when the core its receive work ran on had no time left; else
the sender), the CPU the switch, the sender, the kernel (softirq) and other
processes (a shared machine) took in the window, and how busy each core was.
Delivered packets are the kernel's ``rx_packets`` of the receiving veth ends
(``/proc/net/dev`` of the namespace, the same counters as
``/sys/class/net/<if>/statistics``), each over a window of ``--seconds`` after
a warm-up; pps = delivered / window.  After each path the switch's ``dc_stats``
counter must have moved by the packets delivered (READ_HIT for hits, READ_MISS
for misses, neither for forwarding; the limit: its own count of frames turned),
else the run fails.

``--profile DIR`` samples softswitch with py-spy during one more hit run of at
least 5 s (after the measured one, so the figures are unperturbed) and writes
the raw stacks (``softswitch-hit.raw.txt``) and a summary (``summary.txt``,
``summary.json``: own and inclusive % per function, own % per file).  py-spy
samples without stopping the switch (``--nonblocking``: stopping it for each
sample cut its rate by two thirds), and the few stacks read while they
changed are left out; the pkt/s while sampled is reported next to it.

Progress, the tables and the ratios (softswitch / BMv2 per path,
``ebpf_hit/softswitch_hit``, ``ebpf_hit/limit``) go to stderr; stdout gets
only a line per target: ``hit_pps=N miss_pps=N fwd_pps=N`` (softswitch),
``bmv2_hit_pps=N bmv2_miss_pps=N bmv2_fwd_pps=N``, ``ebpf_hit_pps=N
ebpf_miss_pps=N ebpf_fwd_pps=N``, ``limit_pps=N``, each where that target ran
(``--json``: one JSON object instead, the ratios in it).

The modules, one job each: ``config`` (the bed's facts), ``namespace`` (the namespace the harness enters, the
cores' split), ``frames`` and ``probe`` (what is offered, one frame through and its check), ``sender`` (the
compiled sender process), ``bed`` (one switch, started by harness.switch, and its P4Runtime session), ``limit``
(the turnaround program in place of a switch), ``measure`` (rate search, window, counters), ``profile``
(py-spy), ``report`` (summary lines, ratios and tables), ``run`` (the targets, the run and its command line,
``python -m bench.switch``).
"""

from __future__ import annotations

from bench.pyspy import py_spy
from bench.switch.bed import SwitchBed
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
    "Frames",
    "Namespace",
    "SetupError",
    "SwitchBed",
    "build_frames",
    "main",
    "probe",
    "py_spy",
    "udp_payload",
]
