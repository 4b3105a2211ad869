"""P4Runtime targets for conformance tests: an in-process softswitch and a BMv2 ``simple_switch_grpc``.

Both run on loopback with the DistCache program and are driven with the raw
client of :mod:`tests.common.softswitch_helpers`; a test names entities through the
P4Info the target runs (softswitch's own, or p4c's for BMv2), so one request
table applies to both even though their numeric ids differ.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from finsy.proto import p4i, p4r
from google.protobuf import text_format

from harness.p4c import compile_v1model
from tests.common.softswitch_helpers import (
    Client,
    error_details,
    free_tcp_port,
    running_switch,
    stop_process,
)

DEVICE = 1
PRIMARY_ELECTION_ID = 10
BMV2_AVAILABLE = bool(shutil.which("simple_switch_grpc") and shutil.which("p4c-bm2-ss"))

Outcome = tuple[str, tuple[int, ...]]
"""What a target answered: the RPC's gRPC status code name and the per-item p4.v1.Error codes."""


class Names:
    """Ids of a P4Info by name (tables, actions, params, match fields, counters, registers)."""

    def __init__(self, info: p4i.P4Info) -> None:
        self.info = info
        self._ids = {
            x.preamble.name: x.preamble.id
            for kind in (info.tables, info.actions, info.counters, info.registers)
            for x in kind
        }
        self._params = {a.preamble.name: {p.name: p.id for p in a.params} for a in info.actions}
        self._fields = {t.preamble.name: {f.name: f.id for f in t.match_fields} for t in info.tables}

    def id(self, name: str) -> int:
        return self._ids[name]

    def param(self, action: str, name: str) -> int:
        return self._params[action][name]

    def field(self, table: str, name: str) -> int:
        return self._fields[table][name]


@dataclass
class Target:
    """One running P4Runtime server with a primary client that pushed the DistCache pipeline."""

    name: str
    client: Client
    names: Names
    before_pipeline: dict[str, Outcome] = field(default_factory=dict)  # answers seen before the push

    def write(self, updates: Sequence[p4r.Update], election_id: int | None = PRIMARY_ELECTION_ID) -> Outcome:
        req = p4r.WriteRequest(device_id=DEVICE, updates=list(updates))
        if election_id is not None:
            req.election_id.low = election_id
        try:
            self.client.stub.Write(req, timeout=10)
        except grpc.RpcError as e:
            return e.code().name, tuple(c for c, _ in error_details(e))
        return "OK", ()

    def read(self, entities: Sequence[p4r.Entity]) -> tuple[Outcome, list[p4r.Entity]]:
        got: list[p4r.Entity] = []
        try:
            for resp in self.client.stub.Read(p4r.ReadRequest(device_id=DEVICE, entities=list(entities)), timeout=10):
                got.extend(resp.entities)
        except grpc.RpcError as e:
            return (e.code().name, tuple(c for c, _ in error_details(e))), got
        return ("OK", ()), got

    def clear_tables(self) -> None:
        """Delete every table entry (default entries are left as they are)."""
        (code, _), ents = self.read([p4r.Entity(table_entry=p4r.TableEntry())])
        assert code == "OK", code
        if ents:
            outcome = self.write([p4r.Update(type=p4r.Update.DELETE, entity=e) for e in ents])
            assert outcome == ("OK", ()), outcome


def probe_before_pipeline(client: Client, info: p4i.P4Info) -> dict[str, Outcome]:
    """What a fresh switch answers before any pipeline is pushed (the client is already primary)."""
    from tests.p4runtime.test_p4runtime_conformance import BEFORE_PIPELINE  # the request table lives with the tests

    t = Target("probe", client, Names(info))
    out: dict[str, Outcome] = {}
    for case in BEFORE_PIPELINE:
        out[case.name] = case.run(t)
    return out


def _push(client: Client, info: p4i.P4Info, device_config: bytes) -> None:
    client.set_pipeline(info, device_config=device_config, election_id=PRIMARY_ELECTION_ID)


@contextlib.contextmanager
def softswitch_target() -> Iterator[Target]:
    from softswitch.dataplane import PROGRAM

    with running_switch(DEVICE) as sw:
        client = Client(sw.server.address, DEVICE)
        try:
            client.become_primary(PRIMARY_ELECTION_ID)
            info = PROGRAM.p4info()
            before = probe_before_pipeline(client, info)
            _push(client, info, b"")
            yield Target("softswitch", client, Names(info), before)
        finally:
            client.close()


def compile_p4src(out_dir: Path) -> tuple[p4i.P4Info, bytes]:
    """p4c-bm2-ss on the repository's p4src/v1model/distcache.p4 (harness.p4c: compiled once per content):
    (P4Info, BMv2 JSON); the files are copied into ``out_dir`` too."""
    built = compile_v1model()
    for f in (built.p4info, built.json):
        shutil.copyfile(f, out_dir / f.name)
    info = p4i.P4Info()
    text_format.Parse(built.p4info.read_text(), info)
    return info, built.json.read_bytes()


@contextlib.contextmanager
def bmv2_process(out_dir: Path) -> Iterator[str]:
    """``simple_switch_grpc --no-p4`` on loopback (no interfaces); yields its gRPC address; killed at the end."""
    grpc_port, thrift_port = free_tcp_port(), free_tcp_port()
    addr = f"127.0.0.1:{grpc_port}"
    log = open(out_dir / "bmv2.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            "simple_switch_grpc",
            "--device-id",
            str(DEVICE),
            "--no-p4",
            "--thrift-port",
            str(thrift_port),
            "--",
            "--grpc-server-addr",
            addr,
            "--cpu-port",
            "510",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"simple_switch_grpc exited ({proc.returncode}); see {out_dir / 'bmv2.log'}")
            with grpc.insecure_channel(addr) as ch:
                try:
                    grpc.channel_ready_future(ch).result(timeout=0.5)
                    break
                except grpc.FutureTimeoutError:
                    if time.monotonic() > deadline:
                        raise TimeoutError("simple_switch_grpc did not open its gRPC port") from None
        yield addr
    finally:
        stop_process(proc)
        log.close()


@contextlib.contextmanager
def bmv2_target(out_dir: Path) -> Iterator[Target]:
    info, blob = compile_p4src(out_dir)
    with bmv2_process(out_dir) as addr:
        client = Client(addr, DEVICE)
        try:
            client.become_primary(PRIMARY_ELECTION_ID)
            before = probe_before_pipeline(client, info)
            _push(client, info, blob)
            yield Target("bmv2", client, Names(info), before)
        finally:
            client.close()


__all__ = [
    "BMV2_AVAILABLE",
    "DEVICE",
    "Names",
    "Outcome",
    "Target",
    "bmv2_target",
    "compile_p4src",
    "softswitch_target",
]
