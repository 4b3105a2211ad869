"""Command line of the softswitch, shaped like ``simple_switch_grpc``'s.

    python -m softswitch --device-id 1 --grpc-addr 127.0.0.1:50001 -i 1@s1-eth1 -i 2@s1-eth2

Prints one line ``softswitch ready device_id=N grpc=ADDR ports=...`` on
stdout once it serves (launchers wait for it); exits 0 on SIGTERM/SIGINT,
1 if it cannot start, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from distcache.cmdline import ArgumentParser, bind_address, output_dir, output_file
from softswitch.server import DEFAULT_GRPC_ADDR
from softswitch.switch import PIPELINES, SoftSwitch, load_pipeline

if TYPE_CHECKING:
    from softswitch.ebpf.switch import EbpfSwitch

DROP_PORT = 511  # BMv2's drop port: never a real port
MAX_DEVICE_ID = (1 << 64) - 1  # P4Runtime's device_id is a uint64


def parse_port(text: str) -> tuple[int, str]:
    """``PORT@IFACE`` -> (port, iface)."""
    num, sep, iface = text.partition("@")
    if not sep or not iface or not num.isdigit():
        raise argparse.ArgumentTypeError(f"expected PORT@IFACE, got {text!r}")
    port = int(num)
    if not 0 <= port < DROP_PORT:
        raise argparse.ArgumentTypeError(f"port {port} not in 0..{DROP_PORT - 1} ({DROP_PORT} is the drop port)")
    return port, iface


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="softswitch", description="Software P4 switch with a P4Runtime server.")
    p.add_argument("--device-id", type=int, default=1, help="P4Runtime device id (> 0; default 1)")
    p.add_argument(
        "--grpc-addr",
        default=DEFAULT_GRPC_ADDR,
        type=bind_address,
        help=f"P4Runtime server address host:port (default {DEFAULT_GRPC_ADDR}; port 0 picks one)",
    )
    p.add_argument(
        "-i",
        "--interface",
        dest="interfaces",
        action="append",
        type=parse_port,
        default=[],
        metavar="PORT@IFACE",
        help="attach switch port PORT to interface IFACE (repeatable)",
    )
    p.add_argument(
        "--pipeline",
        default="distcache",
        help=f"pipeline: {', '.join(sorted(PIPELINES))} or module:Class (default distcache)",
    )
    p.add_argument("--pcap-dir", type=output_dir, help="write <iface>_in.pcap / <iface>_out.pcap captures here")
    p.add_argument(
        "--egress-loss",
        type=float,
        default=0.0,
        metavar="PERCENT",
        help="lose this percentage of transmitted frames, like `tc netem loss` on every link (fault "
        "injection for tests, where the kernel has no netem; default 0)",
    )
    p.add_argument(
        "--dataplane",
        choices=["python", "ebpf"],
        default="python",
        help="python: softswitch runs the packets (default); ebpf: the PSA build runs them in the kernel, on "
        "the interfaces' TC hooks (needs root, p4c-ebpf, clang, llc; --pipeline, --pcap-dir and "
        "--egress-loss are python's alone)",
    )
    p.add_argument(
        "--work-dir",
        type=output_dir,
        help="ebpf: the build cache, one directory per distinct build, reused while the P4 sources, defines and "
        "tools are the same (default: build/ebpf in the checkout)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="ebpf: say which build tools are missing (exit 1) or that none is (exit 0), and start nothing",
    )
    p.add_argument(
        "--cleanup",
        action="store_true",
        help="ebpf: take a kernel switch's data plane down once its process is gone, start nothing: with the "
        "switch's own --device-id and -i ports, that switch's programs off its ports, its CPU-port veth and pins "
        "removed (what stopping it after a SIGKILL runs); without -i, what every killed kernel switch left",
    )
    p.add_argument("--log-file", type=output_file, help="log to this file instead of stderr")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def _maintenance(parser: argparse.ArgumentParser, args: argparse.Namespace, ports: dict[int, str]) -> int:
    """--check and --cleanup: what a launcher (dcnet, ``make clean``) asks the kernel target without importing
    it -- an application is reached through its command line, not its modules."""
    if args.dataplane != "ebpf":
        parser.error("--check and --cleanup are the ebpf data plane's: add --dataplane ebpf")
    if args.check and args.cleanup:
        parser.error("give --check or --cleanup, not both")
    if args.check:
        from softswitch.ebpf.build import missing_tools

        if missing := missing_tools():
            print(f"softswitch: missing {' '.join(missing)}", file=sys.stderr)
            return 1
        print("softswitch: ebpf build tools found")
        return 0
    from softswitch.ebpf.switch import remove_leftovers, remove_switch

    try:
        if ports:
            remove_switch(args.device_id, list(ports.values()))
        else:
            remove_leftovers()
    except (OSError, RuntimeError) as e:
        print(f"softswitch: cleanup failed: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    ports: dict[int, str] = {}
    for port, iface in args.interfaces:
        if port in ports:
            parser.error(f"port {port} given twice")
        if iface in ports.values():
            parser.error(f"interface {iface} given twice")
        ports[port] = iface
    if args.check or args.cleanup:
        return _maintenance(parser, args, ports)
    if not 0 < args.device_id <= MAX_DEVICE_ID:
        parser.error(f"--device-id must be 1..{MAX_DEVICE_ID} (P4Runtime's device_id is a uint64)")
    if not 0 <= args.egress_loss < 100:
        parser.error("--egress-loss must be a percentage in [0, 100)")
    if args.dataplane == "ebpf" and (args.pipeline != "distcache" or args.pcap_dir or args.egress_loss):
        parser.error("--pipeline, --pcap-dir and --egress-loss are the python data plane's; drop them for ebpf")
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        filename=args.log_file,
        format=f"%(asctime)s softswitch[{args.device_id}] %(levelname)s %(name)s: %(message)s",
    )
    log = logging.getLogger("softswitch")
    switch: SoftSwitch | EbpfSwitch
    try:
        if args.dataplane == "ebpf":
            from softswitch.ebpf.switch import EbpfSwitch

            cache = {"work_dir": Path(args.work_dir)} if args.work_dir else {}
            switch = EbpfSwitch(device_id=args.device_id, grpc_addr=args.grpc_addr, ports=ports, **cache)
        else:
            switch = SoftSwitch(
                load_pipeline(args.pipeline),
                device_id=args.device_id,
                grpc_addr=args.grpc_addr,
                ports=ports,
                pcap_dir=args.pcap_dir,
                egress_loss=args.egress_loss / 100,
            )
        switch.start()
    except Exception as e:
        if args.log_file or log.isEnabledFor(logging.DEBUG):  # on stderr, the line below says it once
            log.error("cannot start: %s", e, exc_info=log.isEnabledFor(logging.DEBUG))
        print(f"softswitch: cannot start: {e}", file=sys.stderr)
        return 1

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %s: stopping", signal.Signals(signum).name)
        switch.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    port_desc = ",".join(f"{n}@{i}" for n, i in sorted(ports.items())) or "-"
    log.info(
        "softswitch device %d: pipeline %s (%s data plane), grpc %s, ports %s",
        args.device_id,
        args.pipeline,
        args.dataplane,
        switch.server.address,
        port_desc,
    )
    print(f"softswitch ready device_id={args.device_id} grpc={switch.server.address} ports={port_desc}", flush=True)
    try:
        switch.run()
    finally:
        switch.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
