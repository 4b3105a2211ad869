"""Base class of the DistCache PTF tests (run them with ``python -m tests.ptf.run``).

Every test starts from an empty pipeline: ``setUp`` pushes the P4Info and device
config named in the test params with VERIFY_AND_COMMIT, which resets every table,
counter and register on both targets.  The P4Runtime session (gRPC channel, stream,
primary arbitration) is opened once per ptf process and shared by the tests: the
push is what makes state fresh, the session is only transport.
"""

from __future__ import annotations

import atexit
import logging
import sys
import time
from pathlib import Path

import ptf
import ptf.testutils as tu
from ptf.base_tests import BaseTest

from p4rt.client import SwitchConnection
from p4rt.p4info import load_p4info

log = logging.getLogger("dcptf")

DEFAULT_NEGATIVE_TIMEOUT = 0.3  # seconds expect_none() listens for stray frames (ptf's default is 0.1)

_session: dict[str, object] = {}


def _shared_connection(params: dict) -> tuple[SwitchConnection, object, bytes]:
    """(connection, P4Info, device config), built on first use and kept for the whole ptf run."""
    if not _session:
        sw = SwitchConnection(params["grpc_addr"], int(params.get("device_id", 1)), name=params.get("target", ""))
        sw.connect(timeout=10)
        log.info(
            "P4Runtime session to %s (controller from %s)",
            params["grpc_addr"],
            sys.modules[SwitchConnection.__module__].__file__,
        )
        atexit.register(sw.close)
        _session.update(sw=sw, p4info=load_p4info(params["p4info"]), config=Path(params["device_config"]).read_bytes())
    return _session["sw"], _session["p4info"], _session["config"]  # type: ignore[return-value]


class P4RuntimeTest(BaseTest):
    """A PTF test with a P4Runtime connection to the switch under test and a fresh pipeline."""

    def setUp(self) -> None:
        super().setUp()
        t0 = time.monotonic()
        self.params = tu.test_params_get()
        for key in ("grpc_addr", "p4info", "device_config"):
            if key not in self.params:
                self.fail(f"test param {key!r} missing: run the tests with python -m tests.ptf.run")
        self.target: str = self.params.get("target", "softswitch")
        self.dataplane = ptf.dataplane_instance
        self.sw, p4info, config = _shared_connection(self.params)
        self.sw.set_pipeline(p4info, config)
        self.dataplane.flush()
        self.setup_seconds = time.monotonic() - t0
        log.info("setUp %s: %.3fs", self, self.setup_seconds)

    def tearDown(self) -> None:
        # the connection outlives the test (closed at exit); drop what the switch sent that nobody checked
        self.dataplane.flush()
        super().tearDown()

    # -- control plane -----------------------------------------------------------------------
    def insert(self, table: str, match: dict, action: str, params: dict | None = None, priority: int = 0) -> None:
        self.sw.insert(table, match, action, params, priority)

    def set_default(self, table: str, action: str, params: dict | None = None) -> None:
        self.sw.set_default(table, action, params)

    def set_meter(self, name: str, index: int, cir: int, cburst: int, pir: int, pburst: int) -> None:
        """Configure one cell of an indirect meter: rates in units per second, bursts in units.

        The pipeline push of ``setUp`` leaves every meter unconfigured (every packet GREEN).
        """
        self.sw.set_meter(name, index, cir, cburst, pir, pburst)

    def counter(self, name: str, index: int) -> int:
        """Packets counted in cell ``index`` of counter ``name``."""
        return self.sw.read_counter(name, index).get(index, (0, 0))[0]

    def wait_counter(self, name: str, index: int, value: int, timeout: float = 2.0) -> int:
        """Poll a counter cell until it reaches ``value`` (the switch works asynchronously); its last value."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.counter(name, index)
            if got >= value or time.monotonic() > deadline:
                return got
            time.sleep(0.02)

    # -- data plane --------------------------------------------------------------------------
    def send(self, port: int, pkt: object) -> None:
        tu.send_packet(self, port, pkt)

    def expect(self, pkt: object, port: int, timeout: float | None = None) -> None:
        tu.verify_packet(self, pkt, port, timeout=timeout)

    def expect_none(self, timeout: float = DEFAULT_NEGATIVE_TIMEOUT) -> None:
        """No frame (other than those already verified) comes out of any port within ``timeout``."""
        tu.verify_no_other_packets(self, timeout=timeout)
