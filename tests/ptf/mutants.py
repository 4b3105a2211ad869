"""Does the suite catch a broken data plane?  ``python -m tests.ptf.mutants`` (``make mutants``).

Each mutant is one deliberate change to p4src/ — the eight found by hand before the
suite existed, and one per defect it fixed.  For each, the source is changed in place
(and always restored), then the constants test and the PTF suite on BMv2 run against
it; a mutant that makes no test fail is reported as SURVIVED and the run fails.
Needs root, p4c-bm2-ss and simple_switch_grpc; takes a few minutes.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
P4 = REPO / "p4src" / "include"


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # relative to p4src/include
    old: str
    new: str
    count: int = 1  # occurrences of ``old`` that must be replaced


MUTANTS = (
    Mutant("ROLE_SPINE renumbered", "define.p4", "ROLE_SPINE = 1;", "ROLE_SPINE = 4;"),
    Mutant(
        "PORT_CLIENT and PORT_STORAGE swapped",
        "define.p4",
        "PORT_CLIENT = 1;\nconst bit<8> PORT_STORAGE = 2;",
        "PORT_CLIENT = 2;\nconst bit<8> PORT_STORAGE = 1;",
    ),
    Mutant("load freshness <= 1 made == 0", "control/routing.p4", "meta.epoch - e <= 1", "meta.epoch - e == 0", 2),
    Mutant(
        "untrusted-coherence drop removed",
        "control/validation.p4",
        "(op == OP_INVALIDATE || op == OP_UPDATE) && meta.port_kind != PORT_STORAGE",
        "false",
    ),
    Mutant("FLAG_CACHED changed", "define.p4", "FLAG_CACHED = 0x01;", "FLAG_CACHED = 0x02;"),
    Mutant(
        "anti-spoofing check removed",
        "control/validation.p4",
        "!client_source.apply().hit",
        "!(client_source.apply().hit || true)",
    ),
    Mutant("DC_VERSION changed", "define.p4", "DC_VERSION = 2;", "DC_VERSION = 3;"),
    Mutant(
        "the probe port's frames parsed as plain frames",
        "../v1model/distcache.p4",
        "|| standard_metadata.ingress_port == PROBE_PORT",
        "",
    ),
    Mutant("crc32 made crc16", "../v1model/arch.p4", "HashAlgorithm.crc32", "HashAlgorithm.crc16"),
    Mutant(
        "a header with options checksummed as if it had none",
        "../v1model/distcache.p4",
        "hdr.ipv4.isValid() && hdr.ipv4.ihl == IPV4_MIN_IHL,",
        "hdr.ipv4.isValid(),",
    ),
    Mutant(
        "UPDATE ignores the entry's tenure",
        "control/coherence.p4",
        "} else if (same_tenure && armed && last_seq == hdr.dc.seq",
        "} else if (armed && last_seq == hdr.dc.seq",
    ),
    Mutant(
        "any INVALIDATE arms a new tenure, not only its own populate",
        "control/coherence.p4",
        "(own_populate || (same_tenure && armed)) ? 1w1 : 1w0",
        "1w1",
    ),
    Mutant(
        "INVALIDATEs passing a new entry before its populate leave no floor",
        "control/coherence.p4",
        "if (!same_tenure || ahead[63:63] == 0) {",
        "if ((same_tenure && ahead[63:63] == 0) || own_populate) {",
    ),
    Mutant(
        "INVALIDATE record overwritten by older seqs",
        "control/coherence.p4",
        "if (!same_tenure || ahead[63:63] == 0) {",
        "if (true) {",
    ),
    Mutant(
        "replies from client ports accepted",
        "control/validation.p4",
        "op == OP_UPDATE_ACK || reply)",
        "op == OP_UPDATE_ACK)",
    ),
    Mutant(
        "client requests keep their telemetry fields",
        "control/telemetry.p4",
        "if (meta.port_kind == PORT_CLIENT) {",
        "if (false) {",
    ),
    Mutant(
        "hit replies keep the other layer's fields",
        "control/telemetry.p4",
        "if (meta.served == 1) {\n                        hdr.dc.leaf_id = 0;",
        "if (false) {\n                        hdr.dc.leaf_id = 0;",
    ),
    Mutant(
        "the checksum of a header with options not updated for its TTL",
        "control/forwarding.p4",
        "hdr.ipv4.hdrChecksum = ~sum[15:0];",
        "",
    ),
    Mutant(
        "detector reports every read over the threshold (no Bloom filter)",
        "control/detector.p4",
        "if (s0 != tag || s1 != tag || s2 != tag) {",
        "if (true) {",
    ),
    Mutant(
        "detector counts keys already in the cache",
        "control/detector.p4",
        "if (meta.op == OP_GET && meta.cache_hit == 0) {",
        "if (meta.op == OP_GET) {",
    ),
    Mutant(
        "detector windows never age",
        "control/detector.p4",
        "dc_shr48(io.now, meta.hh_window_shift, windows);",
        "windows = 1;",
    ),
    Mutant(
        "TTL not checked (wraps from 0 to 255)", "control/validation.p4", "if (hdr.ipv4.ttl <= 1) {", "if (false) {"
    ),
    Mutant(
        "leaves send what came down from a spine back up (not valley-free)",
        "control/validation.p4",
        "!rack_hosts.apply().hit",
        "!(rack_hosts.apply().hit || true)",
    ),
    Mutant(
        "packets forwarded back out of their ingress port",
        "control/forwarding.p4",
        "meta.nhop_port == io.ingress_port && !answered",
        "false && !answered",
    ),
    Mutant(
        "attempt ignored by routing (retries go to the first copy's cache)",
        "control/routing.p4",
        "bit<8> attempt = (hdr.dc.flags & FLAG_ATTEMPT) >> (bit<5>)FLAG_ATTEMPT_SHIFT;",
        "bit<8> attempt = 0;",
    ),
    Mutant(
        "attempt 1 goes to the pick, not the other candidate",
        "control/routing.p4",
        "hdr.dc.target = other;",
        "hdr.dc.target = chosen;",
    ),
    Mutant(
        "attempt ignored by transit (retries go up the first copy's spine)",
        "control/forwarding.p4",
        "bucket = bucket + (bit<16>)((hdr.dc.flags & FLAG_ATTEMPT) >> (bit<5>)FLAG_ATTEMPT_SHIFT);",
        "bucket = bucket;",
    ),
    Mutant(
        "attempt steers transit from any port (replies leave their key's spine)",
        "control/forwarding.p4",
        "if (meta.port_kind == PORT_CLIENT) {\n                    bucket = bucket +",
        "if (true) {\n                    bucket = bucket +",
    ),
    # liveness (issue 16, item 1)
    Mutant(
        "probes and probe replies from hosts accepted",
        "control/validation.p4",
        "} else if ((op == OP_PROBE || op == OP_PROBE_REPLY) && !probe_ok) {",
        "} else if (false) {",
    ),
    Mutant(
        "any packet-out accepted, not only probes",
        "control/validation.p4",
        "} else if (from_cpu && !(leaf && hdr.dc.isValid() && hdr.dc.op == OP_PROBE)) {",
        "} else if (false) {",
    ),
    Mutant(
        "a dead spine stays a read candidate",
        "control/routing.p4",
        "if (dead == 1) {\n                    bit<8> instead = 0;",
        "if (false) {\n                    bit<8> instead = 0;",
    ),
    Mutant(
        "a replicated key's read gives up the other replica",
        "control/routing.p4",
        "instead = meta.replica_alt;",
        "instead = 0;",
    ),
    Mutant("transit ignores dead spines", "control/forwarding.p4", "if (alt_dead == 0) {", "if (false) {"),
    Mutant(
        "no hysteresis: a dead spine is back at its first reply",
        "control/liveness.p4",
        "|| heard < hold || fence == 1)",
        "|| fence == 1)",
    ),
    Mutant("a fenced spine is still chosen", "control/liveness.p4", "|| fence == 1)", ")"),
    Mutant(
        "a fence read from the mask's upper half only",
        "control/liveness.p4",
        "spine >= 32 ? meta.fenced[63:32] : meta.fenced[31:0]",
        "meta.fenced[63:32]",
    ),
    Mutant(
        "hold counted from the reply, not from when the spine was found dead",
        "control/liveness.p4",
        "DC_WRITE(spine_hold, 48, s, asked + threshold + (bit<48>)meta.hold);",
        "DC_WRITE(spine_hold, 48, s, now + (bit<48>)meta.hold);",
    ),
    Mutant("every probe restarts a silent spine's clock", "control/probe.p4", "if (asked <= heard) {", "if (true) {"),
    Mutant(
        "a probe skipped whatever its spine's silence",
        "control/probe.p4",
        "io.now - heard < (bit<48>)meta.probe_skip",
        "true",
    ),
    Mutant(
        "no probe ever skipped",
        "control/probe.p4",
        "io.now - heard < (bit<48>)meta.probe_skip",
        "false",
    ),
    Mutant(
        "a death's detection time counted from the probe, not from the last packet heard",
        "control/liveness.p4",
        "bit<48> detect = asked + threshold - heard;",
        "bit<48> detect = threshold;",
    ),
    Mutant(
        "only probe replies are heard (traffic does not keep a spine alive)",
        "control/liveness.p4",
        "if (port_spine.apply().hit && meta.from_spine != 0) {",
        "if (port_spine.apply().hit && meta.from_spine != 0 && hdr.dc.isValid() && hdr.dc.op == OP_PROBE_REPLY) {",
    ),
    Mutant("probe replies not counted", "control/probe.p4", "probes_answered.count((bit<32>)meta.from_spine);", ""),
    Mutant(
        "a fixed threshold: how slowly a spine answers is not learned",
        "control/liveness.p4",
        "bit<32> t = peak + margin;\n        t = t > rto ? t : rto;",
        "bit<32> t = 0;",
    ),
    Mutant(
        "the threshold never comes down to dead_after", "control/liveness.p4", "var4 - (var4 >> 2) + dev", "var4 + dev"
    ),
)


def failures(output: str) -> list[str]:
    return sorted(
        set(re.findall(r"^(\S+) \.\.\. (?:FAIL|ERROR)", output, flags=re.M))
        | {m for m in re.findall(r"^FAILED (\S+::\S+)", output, flags=re.M)}
    )


def run(mutant: Mutant, python: str) -> list[str]:
    path = P4 / mutant.file
    original = path.read_text()
    if original.count(mutant.old) != mutant.count:
        raise SystemExit(f"mutant {mutant.name!r}: expected {mutant.count} of {mutant.old!r} in {path}")
    try:
        path.write_text(original.replace(mutant.old, mutant.new))
        out = subprocess.run(
            [
                python,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "tests/unit/test_p4_constants.py",
                "tests/p4runtime/test_p4info_parity.py",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
        ).stdout
        ptf = subprocess.run(
            [python, "-m", "tests.ptf.run", "--target", "bmv2"], cwd=REPO, capture_output=True, text=True
        )
        return failures(out + "\n" + ptf.stdout + ptf.stderr) or (
            ["(compile failed)"] if "p4c-bm2-ss failed" in ptf.stderr else []
        )
    finally:
        path.write_text(original)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.ptf.mutants", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="run only mutants whose name contains this")
    args = ap.parse_args(argv)
    survived = 0
    for m in MUTANTS:
        if args.only and args.only not in m.name:
            continue
        caught = run(m, sys.executable)
        survived += not caught
        shown = ", ".join(caught[:6]) + (f" (+{len(caught) - 6} more)" if len(caught) > 6 else "")
        print(f"{'caught  ' if caught else 'SURVIVED'} {m.name}: {shown or 'no test failed'}", flush=True)
    print(f"mutants={len(MUTANTS) if not args.only else 'some'} survived={survived}")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
