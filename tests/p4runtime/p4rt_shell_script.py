"""Drive one switch with p4lang's p4runtime-shell, as an operator would, and print what each step answered.

Run by tests/p4runtime/test_p4runtime_shell.py with the interpreter of a separate venv that has
``p4runtime-shell`` (it pins its own protobuf and grpcio, older than ours), never with the project's:
``python p4rt_shell_script.py PLAN.json``.  The plan names the switch's address, the P4Info and device
config to push and the packet-out frames to send.  Names come from ``distcache.p4names`` (stdlib only,
imported from the repository root); everything else is p4runtime-shell's own API (``p4runtime_sh.shell``),
with its client's raw ``write_update``/``read_one`` only where the shell would refuse the request before
sending it (a key too wide, an unknown table): those steps test the server, not the shell.

Output: one JSON object, step name -> outcome, a short string that is the same on every target whose
P4Runtime server answers alike: ``ok``, ``ok <what was read>``, ``write <code of each failed update>``,
``rpc <gRPC code>`` or ``shell <exception>`` (refused by p4runtime-shell itself).  Ids never appear
(softswitch's and p4c's differ): entries are printed by name, values as hex.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import grpc
from p4.v1 import p4runtime_pb2
from p4runtime_sh import shell as sh
from p4runtime_sh.p4runtime import P4RuntimeException, P4RuntimeWriteException
from p4runtime_sh.utils import UserError

from distcache import p4defines, p4names

Step = Callable[[str, Callable[[], str | None]], None]
"""Runs one named step and records its outcome (see :func:`outcome`)."""
DIGEST_WAIT_S = 5.0
FULL_TABLE = p4names.PORT_KIND  # exact on a 9-bit port, size MAX_PORTS: filled to see what one more insert gets


def code_name(code: int) -> str:
    from google.rpc import code_pb2

    return str(code_pb2.Code.Name(code))


def outcome(fn: Callable[[], str | None]) -> str:
    """Run one step; its result, or the error it met, as one short string."""
    try:
        got = fn()
    except P4RuntimeWriteException as e:
        return "write " + ",".join(code_name(err.canonical_code) for _, err in e.errors)
    except P4RuntimeException as e:
        return f"rpc {e.grpc_error.code().name}"
    except grpc.RpcError as e:
        return f"rpc {e.code().name}"
    except UserError as e:
        return f"shell {type(e).__name__}"
    return "ok" if got is None else f"ok {got}"


def hexs(b: bytes) -> str:
    return "0x" + b.hex() if b else "''"


def show_table_entry(msg: p4runtime_pb2.TableEntry) -> str:
    """A TableEntry by names: table, match fields, action and parameters (hex as sent on the wire)."""
    table = sh.context.get_name_from_id(msg.table_id)
    parts = []
    for fm in msg.match:
        name = sh.context.get_mf_name(table, fm.field_id)
        kind = fm.WhichOneof("field_match_type")
        v = getattr(fm, kind)
        if kind == "lpm":
            parts.append(f"{name}={hexs(v.value)}/{v.prefix_len}")
        elif kind == "ternary":
            parts.append(f"{name}={hexs(v.value)}&{hexs(v.mask)}")
        elif kind == "range":
            parts.append(f"{name}={hexs(v.low)}..{hexs(v.high)}")
        else:
            parts.append(f"{name}={hexs(v.value)}")
    act = msg.action.action
    action = sh.context.get_name_from_id(act.action_id) if act.action_id else "-"
    params = ",".join(f"{sh.context.get_param_name(action, p.param_id)}={hexs(p.value)}" for p in act.params)
    default = " default" if msg.is_default_action else ""
    return f"[{table.split('.')[-1]}{default} {' '.join(parts)} -> {action.split('.')[-1]}({params})]"


def read_entries(te: sh.TableEntry) -> str:
    got = [show_table_entry(e.msg()) for e in te.read()]
    return f"{len(got)}:" + "".join(sorted(got))


def raw_read(entity: p4runtime_pb2.Entity) -> list[p4runtime_pb2.Entity]:
    out: list[p4runtime_pb2.Entity] = []
    for resp in sh.client.read_one(entity):
        out.extend(resp.entities)
    return out


def port_kind(port: str, kind: str = "1") -> sh.TableEntry:
    te = sh.TableEntry(p4names.PORT_KIND)(action=p4names.SET_PORT_KIND)
    te.match[p4names.KEY_INGRESS_PORT] = port
    te.action["kind"] = kind
    return te


def lpm(prefix: str = "10.2.0.0/16", port: str = "1") -> sh.TableEntry:
    te = sh.TableEntry(p4names.IPV4_LPM)(action=p4names.SET_NHOP)
    te.match[p4names.KEY_IPV4_DST] = prefix
    te.action["dmac"] = "02:00:00:00:00:01"
    te.action["port"] = port
    return te


def default_of(table: str) -> sh.TableEntry:
    te = sh.TableEntry(table)
    te.is_default = True
    return te


def raw_port_kind_insert(port_bytes: bytes) -> None:
    """An INSERT of port_kind with the exact key's bytes as given (the shell refuses a bad width itself)."""
    msg = port_kind("1").msg()
    msg.match[0].exact.value = port_bytes
    update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
    update.entity.table_entry.CopyFrom(msg)
    sh.client.write_update(update)


def counter(name: str, index: int | None) -> sh.CounterEntry:
    ce = sh.CounterEntry(name)
    if index is not None:
        ce.index = index
    return ce


def read_counter(name: str, index: int) -> str:
    (ce,) = list(counter(name, index).read())
    return f"packets={ce.packet_count}"


def meter(index: int, cir: int | None = None, cburst: int = 0, pir: int = 0, pburst: int = 0) -> sh.MeterEntry:
    me = sh.MeterEntry(p4names.CACHE_METER)
    me.index = index
    if cir is not None:
        me.cir, me.cburst, me.pir, me.pburst = cir, cburst, pir, pburst
    return me


def read_meter(index: int) -> str:
    (me,) = list(meter(index).read())
    msg = me.msg()
    if not msg.HasField("config"):
        return "unconfigured"
    c = msg.config
    return f"cir={c.cir} cburst={c.cburst} pir={c.pir} pburst={c.pburst}"


def digest_entry(name: str, max_list_size: int = 1) -> sh.DigestEntry:
    de = sh.DigestEntry(name)
    # a 1 ms timeout, as the controller's: with 0, BMv2 holds a list until it has max_list_size digests
    de.max_timeout_ns, de.max_list_size, de.ack_timeout_ns = 1_000_000, max_list_size, 1_000_000_000
    return de


def read_digest_entry(name: str) -> str:
    got = list(sh.DigestEntry(name).read())
    return ",".join(
        f"max_timeout_ns={d.max_timeout_ns} max_list_size={d.max_list_size} ack_timeout_ns={d.ack_timeout_ns}"
        for d in got
    )


def run(plan: dict[str, Any]) -> dict[str, str]:
    r: dict[str, str] = {}

    def step(name: str, fn: Callable[[], str | None]) -> None:
        r[name] = outcome(fn)

    # pipeline push: the shell's own --config path (VERIFY_AND_COMMIT), then a read of what the switch runs
    sh.setup(
        device_id=plan["device_id"],
        grpc_addr=plan["grpc_addr"],
        election_id=(0, 1),
        config=sh.FwdPipeConfig(plan["p4info"], plan["device_config"]),
        verbose=False,
    )
    step("pipeline: tables in the P4Info read back", lambda: str(len(list(sh.P4Objects(sh.P4Type.table)))))
    digests = sh.DigestList()  # the shell's digest receiver (it acks each list); started once the stream is up
    try:
        tables(step)
        defaults(step)
        counters_and_meters(step)
        digest_path(step, plan, digests)
        errors(step)
        # last: a target that takes a device config it cannot run may be left without a working pipeline
        step("pipeline: push the other target's device config", lambda: wrong_push(plan))
        step("pipeline: tables readable after that push", lambda: read_entries(sh.TableEntry(p4names.PORT_KIND)))
    finally:
        sh.teardown()
    return r


def wrong_push(plan: dict[str, Any]) -> None:
    sh.client.set_fwd_pipe_config(plan["p4info"], plan["wrong_device_config"])


def tables(step: Step) -> None:
    step("port_kind: insert", lambda: port_kind("1").insert())
    step("port_kind: read one", lambda: read_entries(port_kind("1")))
    step("port_kind: modify", lambda: port_kind("1", "2").modify())
    step("port_kind: read all", lambda: read_entries(sh.TableEntry(p4names.PORT_KIND)))
    step("port_kind: insert again", lambda: port_kind("1").insert())
    step("port_kind: delete", lambda: port_kind("1").delete())
    step("port_kind: delete again", lambda: port_kind("1").delete())
    step("port_kind: modify missing", lambda: port_kind("1").modify())
    step("ipv4_lpm: insert /16", lambda: lpm().insert())
    step("ipv4_lpm: insert /24", lambda: lpm("10.2.3.0/24", "2").insert())
    step("ipv4_lpm: read all", lambda: read_entries(sh.TableEntry(p4names.IPV4_LPM)))
    step("ipv4_lpm: modify /24", lambda: lpm("10.2.3.0/24", "3").modify())
    step("ipv4_lpm: read /24", lambda: read_entries(lpm("10.2.3.0/24")))

    def cache_entry() -> sh.TableEntry:
        te = sh.TableEntry(p4names.CACHE_LOOKUP)(action=p4names.CACHE_HIT)
        te.match[p4names.KEY_DC_KEY] = "0x" + "ab" * 16
        te.action["slot"], te.action["version"] = "7", "1"
        return te

    step("cache_lookup: insert a 128-bit key", lambda: cache_entry().insert())
    step("cache_lookup: read", lambda: read_entries(sh.TableEntry(p4names.CACHE_LOOKUP)))

    def client_source() -> sh.TableEntry:
        te = sh.TableEntry(p4names.CLIENT_SOURCE)(action=p4names.SOURCE_OK)
        te.match[p4names.KEY_INGRESS_PORT], te.match[p4names.KEY_IPV4_SRC] = "3", "10.2.0.0/16"
        return te

    step("client_source: insert exact+lpm", lambda: client_source().insert())
    step("client_source: read", lambda: read_entries(sh.TableEntry(p4names.CLIENT_SOURCE)))
    step("every table: wildcard read", lambda: wildcard(is_default=False))
    for name in (p4names.IPV4_LPM, p4names.CACHE_LOOKUP, p4names.CLIENT_SOURCE):
        step(f"{name.split('.')[-1]}: delete what a read returns", lambda t=name: delete_all(t))
    step("every table: empty after deletes", lambda: wildcard(is_default=False))


def wildcard(*, is_default: bool) -> str:
    """A read of table_id 0 (every table), of the non-default entries or of the default ones."""
    entity = p4runtime_pb2.Entity()
    entity.table_entry.is_default_action = is_default
    got = [e.table_entry for e in raw_read(entity)]
    tables = {sh.context.get_name_from_id(te.table_id) for te in got}
    if is_default:  # one per table, each marked default: the count, whether every table is there, port_kind's
        every = tables == {t.name for t in sh.P4Objects(sh.P4Type.table)}
        mine = [show_table_entry(te) for te in got if sh.context.get_name_from_id(te.table_id) == p4names.PORT_KIND]
        alldef = all(te.is_default_action for te in got)
        return f"{len(got)} entries, every table {every}, all default {alldef}, {''.join(mine)}"
    return f"{len(got)}:" + "".join(sorted(show_table_entry(te) for te in got))


def defaults(step: Step) -> None:
    step("ipv4_lpm default: read", lambda: read_entries(default_of(p4names.IPV4_LPM)))
    step("port_kind default: read", lambda: read_entries(default_of(p4names.PORT_KIND)))

    def port_kind_default() -> None:
        te = sh.TableEntry(p4names.PORT_KIND)(action=p4names.SET_PORT_KIND)
        te.is_default = True
        te.action["kind"] = "2"
        te.modify()

    step("port_kind default: modify to set_port_kind", port_kind_default)
    step("port_kind default: read after modify", lambda: read_entries(default_of(p4names.PORT_KIND)))
    step("every table: wildcard read of default entries", lambda: wildcard(is_default=True))
    step("port_kind default: reset (modify, no action)", lambda: default_of(p4names.PORT_KIND).modify())
    step("port_kind default: read after reset", lambda: read_entries(default_of(p4names.PORT_KIND)))
    step("switch_config default: read", lambda: read_entries(default_of(p4names.SWITCH_CONFIG)))

    def no_action_default() -> None:  # NoAction is not among ipv4_lpm's actions: the shell refuses it
        te = sh.TableEntry(p4names.IPV4_LPM)(action=p4names.NO_ACTION)
        te.is_default = True
        te.modify()

    step("ipv4_lpm default: modify to an action not its own", no_action_default)

    def insert_default() -> None:
        te = sh.TableEntry(p4names.IPV4_LPM)(action=p4names.DROP)
        te.is_default = True
        te.insert()

    step("ipv4_lpm default: insert", insert_default)


def counters_and_meters(step: Step) -> None:
    step("dc_stats[3]: read", lambda: read_counter(p4names.DC_STATS, 3))

    def set_counter() -> None:
        ce = counter(p4names.DC_STATS, 3)
        ce.packet_count = 5
        ce.modify()

    step("dc_stats[3]: modify to 5", set_counter)
    step("dc_stats[3]: read after modify", lambda: read_counter(p4names.DC_STATS, 3))
    step("dc_stats: read every cell", lambda: str(len(list(counter(p4names.DC_STATS, None).read()))))
    step("dc_stats: read index out of range", lambda: read_counter(p4names.DC_STATS, p4names.N_STATS))

    def zero_counter() -> None:
        ce = counter(p4names.DC_STATS, 3)
        ce.packet_count = 0
        ce.modify()

    step("dc_stats[3]: modify back to 0", zero_counter)
    step("cache_meter[0]: read unconfigured", lambda: read_meter(0))
    step("cache_meter[0]: modify", lambda: meter(0, 5, 5, 10, 8).modify())
    step("cache_meter[0]: read after modify", lambda: read_meter(0))
    step("cache_meter[0]: modify cir > pir", lambda: meter(0, 10, 5, 5, 5).modify())
    step("cache_meter[0]: read after refused modify", lambda: read_meter(0))
    step("cache_meter[1]: modify index out of range", lambda: meter(1, 5, 5, 10, 8).modify())
    step("cache_meter[0]: reset (modify, no config)", lambda: meter(0).modify())
    step("cache_meter[0]: read after reset", lambda: read_meter(0))


def digest_path(step: Step, plan: dict[str, Any], digests: sh.DigestList) -> None:
    """A spine_death_t digest made by packet-outs alone (no interface needed): a client leaf sends a probe
    for spine 1 (the ask), waits past its liveness threshold, then is told that the CPU port faces spine 1
    (port_spine) and sends another: a packet "from" spine 1 after an unanswered ask is a death that ended,
    which a client leaf counts (spine_deaths[1]) and reports (p4src/include/control/liveness.p4)."""
    probe = bytes.fromhex(plan["probe_frame"])
    step("spine_death_t: digest entry insert", lambda: digest_entry(p4names.SPINE_DEATH_DIGEST).insert())
    step("spine_death_t: digest entry read", lambda: read_digest_entry(p4names.SPINE_DEATH_DIGEST))
    step("spine_death_t: digest entry modify", lambda: digest_entry(p4names.SPINE_DEATH_DIGEST, 4).modify())
    step("spine_death_t: digest entry read after modify", lambda: read_digest_entry(p4names.SPINE_DEATH_DIGEST))
    step("spine_death_t: digest entry insert again", lambda: digest_entry(p4names.SPINE_DEATH_DIGEST).insert())

    def leaf_config() -> None:
        te = sh.TableEntry(p4names.SWITCH_CONFIG)(action=p4names.SET_CONFIG)
        te.is_default = True
        te.action["switch_id"], te.action["role"], te.action["mechanism"] = (
            str(plan["switch_id"]),
            str(p4defines.ROLE_CLIENT_LEAF),
            "1",
        )
        te.modify()
        lv = sh.TableEntry(p4names.LIVENESS_CONFIG)(action=p4names.SET_LIVENESS)
        lv.is_default = True
        lv.action["dead_after"], lv.action["dead_after_max"], lv.action["hold"] = "1000", "1000", "0"
        lv.action["peak_decay_shift"], lv.action["probe_skip"], lv.action["fenced"] = "8", "0", "0"
        lv.modify()

    step("client leaf: switch_config and liveness_config defaults", leaf_config)
    step("packet-out: a probe for spine 1", lambda: sh.PacketOut(probe, spine_id="1").send())
    time.sleep(0.2)

    def cpu_port_faces_spine_1() -> None:
        te = sh.TableEntry(p4names.PORT_SPINE)(action=p4names.SET_PORT_SPINE)
        te.match[p4names.KEY_INGRESS_PORT] = str(p4names.CPU_PORT)
        te.action["spine_id"] = "1"
        te.insert()

    step("port_spine: the CPU port faces spine 1", cpu_port_faces_spine_1)
    step("packet-out: the second probe", lambda: sh.PacketOut(probe, spine_id="1").send())

    def receive() -> str:
        got = list(digests.sniff(timeout=DIGEST_WAIT_S))
        lists = [m.digest for m in got]
        datas = [d for lst in lists for d in lst.data]
        fields = [[int.from_bytes(m.bitstring, "big") for m in d.struct.members] for d in datas]
        names = {sh.context.get_name_from_id(lst.digest_id) for lst in lists}
        return f"lists={len(lists)} digests={len(datas)} names={sorted(names)} switch,spine={[f[:2] for f in fields]}"

    step("spine_death_t: received", receive)
    step("probes_sent[1]: read", lambda: read_counter(p4names.PROBES_SENT, 1))
    step("spine_deaths[1]: read", lambda: read_counter(p4names.SPINE_DEATHS, 1))
    step("spine_death_t: digest entry delete", lambda: sh.DigestEntry(p4names.SPINE_DEATH_DIGEST).delete())
    step("spine_death_t: digest entry read after delete", lambda: read_digest_entry(p4names.SPINE_DEATH_DIGEST))
    step("packet-out: not a probe (dropped, counted)", lambda: sh.PacketOut(probe[:14], spine_id="1").send())
    time.sleep(0.2)
    step("dc_drops: every reason counted", drops_of_short_frame)


def drops_of_short_frame() -> str:
    counts = {int(r): int(read_counter(p4names.DC_DROPS, int(r)).split("=")[1]) for r in p4names.DropReason}
    return ",".join(f"{p4names.DropReason(r).name}={c}" for r, c in counts.items() if c)


def delete_all(table: str) -> None:
    sh.TableEntry(table).read(lambda te: te.delete())


def fill() -> None:
    for port in range(p4names.MAX_PORTS):
        port_kind(str(port)).insert()


def errors(step: Step) -> None:
    step("error: key wider than the field (shell)", lambda: port_kind("512").insert())
    step("error: key wider than the field (sent)", lambda: raw_port_kind_insert(b"\x02\x00"))
    step("error: key of empty bytes (sent)", lambda: raw_port_kind_insert(b""))
    step("error: unknown table (shell)", lambda: read_entries(sh.TableEntry("DcIngress.no_such_table")))

    def unknown_table() -> str:
        entity = p4runtime_pb2.Entity()
        entity.table_entry.table_id = 0x02ABCDEF
        return str(len(raw_read(entity)))

    step("error: unknown table (sent)", unknown_table)
    step("port_kind: delete what a read returns", lambda: delete_all(FULL_TABLE))
    step("full table: fill", fill)
    step("error: full table, one more insert", lambda: port_kind(str(p4names.MAX_PORTS)).insert())
    step("full table: entries", lambda: read_entries(sh.TableEntry(FULL_TABLE)).split(":")[0])
    step("full table: delete every entry", lambda: delete_all(FULL_TABLE))
    step("full table: after deleting every entry", lambda: read_entries(sh.TableEntry(FULL_TABLE)))


def main() -> None:
    if len(sys.argv) != 2:
        print("usage: p4rt_shell_script.py PLAN.json", file=sys.stderr)
        sys.exit(2)
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    print(json.dumps(run(plan), indent=1))


if __name__ == "__main__":
    main()
