"""P4Runtime digests: softswitch's DigestLists held to BMv2's.

softswitch runs :class:`tests.common.softswitch_helpers.DigestPipeline`; BMv2 (when
``simple_switch_grpc`` and ``p4c-bm2-ss`` are on PATH) runs the same program
compiled from tests/p4/digest_test.p4, in a private network namespace with one
veth pair, its gRPC server on a unix socket.  Each scenario runs on both; the
few places where BMv2 strays from the P4Runtime spec are softswitch-only tests
at the end, and say what BMv2 does instead.
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import grpc
import pytest
from finsy.proto import p4i, p4r
from google.protobuf import text_format

from softswitch.state import SwitchState
from tests.common.p4rt_targets import BMV2_AVAILABLE
from tests.common.softswitch_helpers import (
    DIGEST_PROGRAM,
    DIGEST_SWITCH_ID,
    DIGEST_TEST_P4,
    Client,
    DigestPipeline,
    Stream,
    error_details,
    probe_frame,
    running_switch,
    sh,
    socket_in_netns,
    stop_process,
)

pytestmark = pytest.mark.timeout(90)

DEVICE = 1
MS = 1_000_000
UPD = p4r.Update
Item = tuple[int, int, int]


class DigestTarget:
    """A switch running the digest test program, with a primary client on a StreamChannel."""

    name = ""

    def __init__(self, client: Client, info: p4i.P4Info) -> None:
        self.client = client
        self.info = info
        self.digest_id = info.digests[0].preamble.id
        self.stream: Stream = client.become_primary(10)

    def inject(self, key: int, estimate: int = 5) -> None:
        raise NotImplementedError

    # -- P4Runtime --------------------------------------------------------------------------
    def entry(self, cfg: tuple[int, int, int] | None = None, digest_id: int | None = None) -> p4r.DigestEntry:
        de = p4r.DigestEntry(digest_id=self.digest_id if digest_id is None else digest_id)
        if cfg is not None:
            de.config.max_timeout_ns, de.config.max_list_size, de.config.ack_timeout_ns = cfg
        return de

    def write(
        self, utype: int, cfg: tuple[int, int, int] | None = None, digest_id: int | None = None
    ) -> tuple[str, tuple[int, ...]]:
        try:
            self.client.write([UPD(type=utype, entity=p4r.Entity(digest_entry=self.entry(cfg, digest_id)))])
        except grpc.RpcError as e:
            return e.code().name, tuple(c for c, _ in error_details(e))
        return "OK", ()

    def read(self, digest_id: int | None = None) -> tuple[str, list[p4r.Entity]]:
        try:
            return "OK", self.client.read(
                p4r.Entity(digest_entry=p4r.DigestEntry(digest_id=self.digest_id if digest_id is None else digest_id))
            )
        except grpc.RpcError as e:
            return e.code().name, []

    def ack(self, list_id: int) -> None:
        self.stream.send(
            p4r.StreamMessageRequest(digest_ack=p4r.DigestListAck(digest_id=self.digest_id, list_id=list_id))
        )

    def lists(self, wait: float) -> list[tuple[float, p4r.DigestList]]:
        """Every DigestList received within ``wait`` seconds, with its arrival time (from now)."""
        t0 = time.monotonic()
        out = []
        while (left := wait - (time.monotonic() - t0)) > 0:
            try:
                msg = self.stream.recv(timeout=left)
            except queue.Empty:
                break
            if msg.WhichOneof("update") == "digest":
                out.append((time.monotonic() - t0, msg.digest))
        return out

    def one_list(self, wait: float = 2.0) -> p4r.DigestList:
        got = self.lists_until(1, wait)
        assert len(got) == 1, got
        return got[0]

    def lists_until(self, n: int, wait: float) -> list[p4r.DigestList]:
        """Up to ``n`` DigestLists, waiting at most ``wait`` seconds for them."""
        t0 = time.monotonic()
        out: list[p4r.DigestList] = []
        while len(out) < n and (left := wait - (time.monotonic() - t0)) > 0:
            try:
                msg = self.stream.recv(timeout=left)
            except queue.Empty:
                break
            if msg.WhichOneof("update") == "digest":
                out.append(msg.digest)
        return out


def items(dl: p4r.DigestList) -> list[Item]:
    """The data of a DigestList as (key, estimate, switch_id), checking the encoding is canonical."""
    out = []
    for d in dl.data:
        assert d.WhichOneof("data") == "struct"
        vals = []
        for m in d.struct.members:
            b = m.bitstring
            assert b and (len(b) == 1 or b[0] != 0), f"not the shortest bytestring: {b!r}"
            vals.append(int.from_bytes(b, "big"))
        out.append(tuple(vals))
    return out  # type: ignore[return-value]


def it(key: int, estimate: int = 5) -> Item:
    return (key, estimate, DIGEST_SWITCH_ID)


# -- targets -------------------------------------------------------------------------------------------
class SoftswitchDigests(DigestTarget):
    name = "softswitch"

    def __init__(self, sw: object, client: Client) -> None:
        self.sw = sw
        super().__init__(client, DIGEST_PROGRAM.p4info())
        client.set_pipeline(self.info)

    def inject(self, key: int, estimate: int = 5) -> None:
        self.sw.handle_packet(1, probe_frame(key, estimate))  # type: ignore[attr-defined]


class Bmv2Digests(DigestTarget):
    name = "bmv2"

    def __init__(self, client: Client, info: p4i.P4Info, blob: bytes, netns: str) -> None:
        super().__init__(client, info)
        client.set_pipeline(info, device_config=blob)
        self.tx = socket_in_netns(netns, "h1")

    def inject(self, key: int, estimate: int = 5) -> None:
        self.tx.send(probe_frame(key, estimate))


@contextlib.contextmanager
def softswitch_digests() -> Iterator[DigestTarget]:
    with running_switch(DEVICE, DigestPipeline()) as sw:
        client = Client(sw.server.address, DEVICE)
        try:
            yield SoftswitchDigests(sw, client)
        finally:
            client.close()


def compile_digest_test(out: Path) -> tuple[p4i.P4Info, bytes]:
    subprocess.run(
        [
            "p4c-bm2-ss",
            "--arch",
            "v1model",
            "-o",
            str(out / "dt.json"),
            "--p4runtime-files",
            str(out / "dt.p4info.txtpb"),
            DIGEST_TEST_P4,
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    info = p4i.P4Info()
    text_format.Parse((out / "dt.p4info.txtpb").read_text(), info)
    return info, (out / "dt.json").read_bytes()


@contextlib.contextmanager
def bmv2_digests(out: Path) -> Iterator[DigestTarget]:
    """simple_switch_grpc in namespace dgt-<tag> on veth s1 (h1 is ours to send on), gRPC on a unix socket."""
    info, blob = compile_digest_test(out)
    ns = f"dgt-{uuid.uuid4().hex[:6]}"
    sock = out / "bmv2.sock"
    log = open(out / "bmv2.log", "wb")  # noqa: SIM115 - closed below
    proc = None
    try:
        sh("ip", "netns", "add", ns)
        for knob in ("all", "default"):  # no IPv6 chatter: every frame on s1 would be a probe
            sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w", f"net.ipv6.conf.{knob}.disable_ipv6=1")
        sh("ip", "-n", ns, "link", "add", "s1", "type", "veth", "peer", "name", "h1")
        for ifc in ("lo", "s1", "h1"):
            sh("ip", "-n", ns, "link", "set", ifc, "up")
        proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns,
                "simple_switch_grpc",
                "--device-id",
                str(DEVICE),
                "--no-p4",
                "--thrift-port",
                "9090",
                "-i",
                "1@s1",
                "--",
                "--grpc-server-addr",
                f"unix:{sock}",
                "--cpu-port",
                "510",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"simple_switch_grpc did not start; see {out / 'bmv2.log'}")
            time.sleep(0.05)
        client = Client(f"unix:{sock}", DEVICE)
        try:
            yield Bmv2Digests(client, info, blob, ns)
        finally:
            client.close()
    finally:
        if proc is not None:
            stop_process(proc)
        log.close()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


TARGETS = [
    "softswitch",
    pytest.param(
        "bmv2",
        marks=pytest.mark.skipif(
            not BMV2_AVAILABLE or os.geteuid() != 0, reason="needs simple_switch_grpc, p4c-bm2-ss and root"
        ),
    ),
]


@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DigestTarget]:
    if request.param == "softswitch":
        with softswitch_digests() as t:
            yield t
    else:
        with bmv2_digests(tmp_path) as t:
            yield t


# -- scenarios, on both targets ----------------------------------------------------------------------------
def test_no_digest_without_a_digest_entry(target: DigestTarget) -> None:
    assert target.read() == ("NOT_FOUND", [])
    target.inject(1)
    target.inject(2)
    assert target.lists(0.6) == []


def test_read_back_modify_and_delete(target: DigestTarget) -> None:
    assert target.write(UPD.INSERT, (200 * MS, 3, 1000 * MS)) == ("OK", ())
    code, ents = target.read()
    assert code == "OK" and len(ents) == 1
    assert ents[0].digest_entry == target.entry((200 * MS, 3, 1000 * MS))
    assert target.write(UPD.MODIFY, (0, 1, 0)) == ("OK", ())
    assert target.read()[1][0].digest_entry == target.entry((0, 1, 0))
    assert target.write(UPD.DELETE) == ("OK", ())
    assert target.read() == ("NOT_FOUND", [])


def test_each_digest_at_once_with_list_ids_going_up(target: DigestTarget) -> None:
    assert target.write(UPD.INSERT, (0, 1, 0)) == ("OK", ())
    target.inject(0x0102, 0)
    first = target.one_list()
    assert first.digest_id == target.digest_id and first.timestamp > 0
    assert items(first) == [it(0x0102, 0)]  # zero is one zero byte, 0x0102 two bytes
    target.inject(1 << 127, 0xFFFF)
    second = target.one_list()
    assert items(second) == [it(1 << 127, 0xFFFF)]
    assert second.list_id == first.list_id + 1
    # ack_timeout_ns 0: no memory of what was sent, a repeat goes out again
    target.inject(0x0102, 0)
    assert items(target.one_list()) == [it(0x0102, 0)]


def test_max_list_size_batches(target: DigestTarget) -> None:
    assert target.write(UPD.INSERT, (5000 * MS, 3, 5000 * MS)) == ("OK", ())
    for k in (1, 2):
        target.inject(k)
    assert target.lists(0.4) == []  # two of three: held (max_timeout_ns is 5 s)
    target.inject(3)
    assert items(target.one_list(1.0)) == [it(1), it(2), it(3)]
    for k in (4, 5, 6, 7):
        target.inject(k)
    assert items(target.one_list(1.0)) == [it(4), it(5), it(6)]


def test_max_timeout_flushes_a_short_list(target: DigestTarget) -> None:
    assert target.write(UPD.INSERT, (200 * MS, 10, 5000 * MS)) == ("OK", ())
    t0 = time.monotonic()
    target.inject(1)
    target.inject(2)
    dl = target.one_list(3.0)
    took = time.monotonic() - t0
    assert items(dl) == [it(1), it(2)]
    assert 0.15 <= took <= 1.5, took  # softswitch: 0.2 s; BMv2 up to its learn timeout + two PI sweeps


def test_unacked_duplicate_is_suppressed_until_acked(target: DigestTarget) -> None:
    assert target.write(UPD.INSERT, (0, 1, 10_000 * MS)) == ("OK", ())
    target.inject(9)
    first = target.one_list()
    target.inject(9)
    assert target.lists(0.5) == []  # same data, list not acked: suppressed
    target.inject(10, 1)  # other data goes through
    assert items(target.one_list()) == [it(10, 1)]
    target.ack(first.list_id)
    time.sleep(0.2)
    target.inject(9)
    again = target.one_list()
    assert items(again) == [it(9)]
    assert again.list_id > first.list_id


def test_unacked_duplicate_is_sent_again_after_ack_timeout(target: DigestTarget) -> None:
    assert target.write(UPD.INSERT, (0, 1, 500 * MS)) == ("OK", ())
    target.inject(9)
    target.one_list()
    t0 = time.monotonic()
    target.inject(9)
    assert target.lists(0.3) == []
    while time.monotonic() - t0 < 3.0:
        target.inject(9)
        got = target.lists(0.1)
        if got:
            assert [items(dl) for _, dl in got] == [[it(9)]]
            break
    else:
        pytest.fail("not sent again within 3 s of a 0.5 s ack timeout")
    assert time.monotonic() - t0 >= 0.45


def test_delete_stops_digests_and_list_ids_go_on(target: DigestTarget) -> None:
    assert target.write(UPD.INSERT, (0, 1, 10_000 * MS)) == ("OK", ())
    target.inject(1)
    first = target.one_list()
    assert target.write(UPD.DELETE) == ("OK", ())
    target.inject(2)
    assert target.lists(0.6) == []
    assert target.write(UPD.INSERT, (0, 1, 10_000 * MS)) == ("OK", ())
    target.inject(1)  # DELETE forgot the unacked list: no longer suppressed
    dl = target.one_list()
    assert items(dl) == [it(1)] and dl.list_id == first.list_id + 1


def test_no_primary_drops_lists(target: DigestTarget) -> None:
    assert target.write(UPD.INSERT, (0, 1, 0)) == ("OK", ())
    target.inject(1)
    first = target.one_list()
    target.stream.close()
    time.sleep(0.3)
    target.inject(2)
    target.inject(3)
    time.sleep(0.5)
    target.stream = target.client.become_primary(11)
    assert target.lists(0.8) == []  # nothing kept for a later primary
    target.inject(4)
    dl = target.one_list()
    assert items(dl) == [it(4)]
    assert dl.list_id == first.list_id + 3  # the two dropped lists used their ids


DIGEST_WRITE_ERRORS = [  # (name, update type, digest id or None for the program's, setup INSERT?, code)
    ("INSERT twice", UPD.INSERT, None, True, 6),
    ("MODIFY of a missing entry", UPD.MODIFY, None, False, 5),
    ("DELETE of a missing entry", UPD.DELETE, None, False, 5),
    ("unknown digest id", UPD.INSERT, 0x17000001, False, 5),
    ("digest id 0", UPD.INSERT, 0, False, 5),
]


@pytest.mark.parametrize("case", DIGEST_WRITE_ERRORS, ids=lambda c: c[0])
def test_digest_entry_write_errors(target: DigestTarget, case: tuple) -> None:
    _, utype, did, setup, code = case
    if setup:
        assert target.write(UPD.INSERT, (0, 1, 0)) == ("OK", ())
    assert target.write(utype, (0, 1, 0), did) == ("UNKNOWN", (code,))


def test_digest_entry_read_errors(target: DigestTarget) -> None:
    assert target.read(0x17000001) == ("NOT_FOUND", [])
    assert target.read() == ("NOT_FOUND", [])


# -- the P4Info a controller pushes must declare the program's digests --------------------------------------
def _struct(info: p4i.P4Info) -> p4i.P4StructTypeSpec:
    return info.type_info.structs["hh_digest_t"]


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda i: i.ClearField("digests"), "digest 'hh_digest_t' of program 'digest_test' is missing"),
        (lambda i: setattr(_struct(i).members[1].type_spec.bitstring.bit, "bitwidth", 32), "bit<32> estimate"),
        (lambda i: setattr(_struct(i).members[2], "name", "sw"), "bit<8> sw"),
        (lambda i: _struct(i).members.pop(), "{bit<128> key, bit<16> estimate}"),
        (lambda i: i.type_info.structs.pop("hh_digest_t"), "not in the P4Info's type_info"),
        (lambda i: i.digests[0].type_spec.bitstring.bit.SetInParent(), "only struct digests"),
        (
            lambda i: i.digests.add().preamble.CopyFrom(p4i.Preamble(id=0x17000002, name="other_t")),
            "P4Info has digest 'other_t'",
        ),
    ],
)
def test_p4info_with_a_different_digest_is_refused(mutate: object, words: str) -> None:
    info = DIGEST_PROGRAM.p4info()
    mutate(info)  # type: ignore[operator]
    with running_switch(DEVICE, DigestPipeline()) as sw:
        client = Client(sw.server.address, DEVICE)
        try:
            client.become_primary(1)
            with pytest.raises(grpc.RpcError) as ei:
                client.set_pipeline(info)
            assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert words in (ei.value.details() or ""), ei.value.details()
            client.set_pipeline(DIGEST_PROGRAM.p4info())  # the program's own is accepted
        finally:
            client.close()


def test_p4c_digest_p4info_is_accepted_and_identical(tmp_path: Path) -> None:
    """softswitch's P4Info for the digest program is p4c's, but for ids and the package name."""
    if not BMV2_AVAILABLE:
        pytest.skip("p4c-bm2-ss not installed")
    theirs, _ = compile_digest_test(tmp_path)
    from softswitch.server import p4info_mismatch

    assert p4info_mismatch(DIGEST_PROGRAM, theirs) is None
    ours = DIGEST_PROGRAM.p4info()
    ours.pkg_info.ClearField("name")
    assert ours.digests[0].preamble.id >> 24 == theirs.digests[0].preamble.id >> 24 == 0x17
    ours.digests[0].preamble.id = theirs.digests[0].preamble.id
    assert ours == theirs


# -- softswitch only: where BMv2 strays from the spec ------------------------------------------------------------
@pytest.fixture
def ss() -> Iterator[SoftswitchDigests]:
    with softswitch_digests() as t:
        yield t  # type: ignore[misc]


def test_read_all_digest_entries_with_id_0(ss: SoftswitchDigests) -> None:
    """The spec: digest_id 0 reads every configured digest.  BMv2 differs: UNIMPLEMENTED."""
    assert ss.read(0) == ("OK", [])
    assert ss.write(UPD.INSERT, (0, 1, 0)) == ("OK", ())
    code, ents = ss.read(0)
    assert code == "OK" and [e.digest_entry for e in ents] == [ss.entry((0, 1, 0))]


def test_digests_before_the_entry_are_not_delivered_after_it(ss: SoftswitchDigests) -> None:
    """BMv2 differs: its learn engine holds samples from before the INSERT and sends them after."""
    ss.inject(1)
    time.sleep(0.2)
    assert ss.write(UPD.INSERT, (0, 1, 0)) == ("OK", ())
    assert ss.lists(0.5) == []


def test_max_timeout_0_sends_at_once_whatever_the_list_size(ss: SoftswitchDigests) -> None:
    """BMv2 differs: with max_timeout_ns 0 it waits for max_list_size samples, with no timeout."""
    assert ss.write(UPD.INSERT, (0, 3, 0)) == ("OK", ())
    ss.inject(1)
    assert items(ss.one_list(0.5)) == [it(1)]


def test_max_list_size_holds_without_ack_timeout(ss: SoftswitchDigests) -> None:
    """BMv2 differs: with ack_timeout_ns 0 its lists grow past max_list_size."""
    assert ss.write(UPD.INSERT, (300 * MS, 2, 0)) == ("OK", ())
    for k in (1, 2, 3):
        ss.inject(k)
    got = ss.lists_until(2, 1.5)
    assert [items(dl) for dl in got] == [[it(1), it(2)], [it(3)]]


def test_duplicate_in_the_list_being_built_is_dropped(ss: SoftswitchDigests) -> None:
    """As BMv2 (its learn engine filter), even with ack_timeout_ns 0."""
    assert ss.write(UPD.INSERT, (300 * MS, 10, 0)) == ("OK", ())
    for k in (1, 1, 2, 1):
        ss.inject(k)
    assert items(ss.one_list(1.5)) == [it(1), it(2)]


def test_failed_packet_emits_no_digest(ss: SoftswitchDigests) -> None:
    class Failing(DigestPipeline):
        def process(self, state: SwitchState, ingress_port: int, packet: bytes, now_us: int) -> NoReturn:
            super().process(state, ingress_port, packet, now_us)
            raise RuntimeError("boom")

    assert ss.write(UPD.INSERT, (0, 1, 0)) == ("OK", ())
    ss.sw.pipeline = Failing()
    ss.inject(1)
    ss.sw.pipeline = DigestPipeline()
    ss.inject(2)
    assert [items(dl) for dl in ss.lists_until(2, 1.0)] == [[it(2)]]


def test_queue_is_bounded(ss: SoftswitchDigests) -> None:
    eng = ss.sw.server.service.digests
    assert ss.write(UPD.INSERT, (0, 1, 0)) == ("OK", ())
    eng._queue_cap = 0  # every message over the cap: dropped and counted, nothing sent
    ss.inject(1)
    assert eng.stats.dropped_queue_full == 1
    assert ss.lists(0.3) == []


def test_new_pipeline_config_forgets_digest_entries(ss: SoftswitchDigests) -> None:
    assert ss.write(UPD.INSERT, (0, 1, 0)) == ("OK", ())
    ss.inject(1)
    assert ss.one_list().list_id == 1
    ss.client.set_pipeline(ss.info)
    assert ss.read() == ("NOT_FOUND", [])
    assert ss.write(UPD.INSERT, (0, 1, 0)) == ("OK", ())
    ss.inject(1)
    assert ss.one_list().list_id == 1
