"""DcTelemetry (p4src/include/control/telemetry.p4): loads counted, stamped, recorded."""

from __future__ import annotations

from distcache import p4names
from distcache.cluster import PortKind, Role
from distcache.p4names import Stat
from distcache.wire import Op
from softswitch.dataplane.header import (
    DC_LEAF_ID,
    DC_LEAF_LOAD,
    DC_OP,
    DC_SERVED_BY,
    DC_SPINE_ID,
    DC_SPINE_LOAD,
    DC_TARGET,
    Headers,
    Meta,
)
from softswitch.program import Register
from softswitch.state import SwitchState

REGISTERS = (
    Register(p4names.LOAD_COUNT, 32, 1),
    Register(p4names.LOAD_EPOCH, 32, 1),
)

REPLY_OPS = frozenset({int(Op.GET_REPLY), int(Op.PUT_REPLY), int(Op.DELETE_REPLY), int(Op.EXEC_REPLY)})
OP_GET = int(Op.GET)
ROLE_SPINE, ROLE_STORAGE_LEAF, ROLE_CLIENT_LEAF = int(Role.SPINE), int(Role.STORAGE_LEAF), int(Role.CLIENT_LEAF)
PORT_FABRIC, PORT_CLIENT = int(PortKind.FABRIC), int(PortKind.CLIENT)
REPLY_STAMPED, LOAD_RECORDED = int(Stat.REPLY_STAMPED), int(Stat.LOAD_RECORDED)  # plain ints (see cache.py)


def apply(state: SwitchState, h: Headers, m: Meta) -> None:
    dc = h.dc
    reply = dc[DC_OP] in REPLY_OPS
    regs = state.registers
    if m.role == ROLE_SPINE or m.role == ROLE_STORAGE_LEAF:
        targeted_read = m.op == OP_GET and (dc[DC_TARGET] == m.switch_id or m.served)
        if targeted_read or reply:
            epoch_reg, count_reg = regs[p4names.LOAD_EPOCH], regs[p4names.LOAD_COUNT]
            count = count_reg.read(0)
            if epoch_reg.read(0) != m.epoch:
                count = 0  # a new window starts at 0
                epoch_reg.write(0, m.epoch)
            if targeted_read:
                count = (count + 1) & 0xFFFFFFFF
            count_reg.write(0, count)
            m.load = count
        if reply:
            if m.role == ROLE_SPINE:
                dc[DC_SPINE_ID], dc[DC_SPINE_LOAD] = m.switch_id, m.load
                if m.served:
                    dc[DC_LEAF_ID] = dc[DC_LEAF_LOAD] = 0
            else:
                dc[DC_LEAF_ID], dc[DC_LEAF_LOAD] = m.switch_id, m.load
                if m.served:
                    dc[DC_SPINE_ID] = dc[DC_SPINE_LOAD] = 0
            if not m.served:
                state.counters[p4names.DC_STATS].count(REPLY_STAMPED, m.packet_length)
    elif m.role == ROLE_CLIENT_LEAF:
        if m.port_kind == PORT_CLIENT:
            # requests from clients carry no telemetry
            dc[DC_SERVED_BY] = dc[DC_SPINE_ID] = dc[DC_LEAF_ID] = dc[DC_SPINE_LOAD] = dc[DC_LEAF_LOAD] = 0
        elif reply and m.port_kind == PORT_FABRIC:
            loads, epochs = regs[p4names.PEER_LOAD], regs[p4names.PEER_LOAD_EPOCH]
            if dc[DC_SPINE_ID] != 0:
                loads.write(dc[DC_SPINE_ID], dc[DC_SPINE_LOAD])
                epochs.write(dc[DC_SPINE_ID], m.epoch)
            if dc[DC_LEAF_ID] != 0:
                loads.write(dc[DC_LEAF_ID], dc[DC_LEAF_LOAD])
                epochs.write(dc[DC_LEAF_ID], m.epoch)
            state.counters[p4names.DC_STATS].count(LOAD_RECORDED, m.packet_length)
