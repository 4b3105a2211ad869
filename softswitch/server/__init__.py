"""P4Runtime v1 gRPC server of the softswitch (the role of BMv2's simple_switch_grpc).

Everything a controller does to a softswitch goes through here: client
arbitration on ``StreamChannel``, pipeline config, table writes, counter
and meter reads and writes.  Semantics follow the P4Runtime 1.4 specification; deliberate
differences are listed in :class:`P4RuntimeService`.

The softswitch runs one built-in :class:`~softswitch.program.Program`; a
pushed P4Info is accepted when it describes that same program (same names,
match kinds, bit widths, action sets) and its numeric ids are adopted, so a
controller can use softswitch's own P4Info or p4c's for ``p4src/``.  The
device config must be empty or softswitch's identity of that program
(:meth:`Program.device_config`); anything else (a BMv2 JSON, another
program's identity, garbage) is refused, since softswitch cannot run it.
What was accepted is kept and handed back by GetForwardingPipelineConfig.

The server reaches the data plane only through softswitch/target.py (the typed
:class:`~softswitch.target.PipelineTarget`: tables and default entries, counters,
meters, pipeline install); packet-ins, digests and packet-outs go through the
service's own hooks (see :class:`P4RuntimeService`).

Threading: gRPC handlers run on a thread pool.  ``_arb_lock`` guards
arbitration (held briefly); ``_cfg_lock`` serializes Write, Read and
SetForwardingPipelineConfig; ``state.lock`` is taken inside ``_cfg_lock``
for the actual data-plane access, so packets see each batch whole.
"""

from softswitch.server.codec import DEFAULT_GRPC_ADDR, P4RUNTIME_API_VERSION, P4RuntimeError
from softswitch.server.ids import IdMap, PipelineConfig, packet_out_frame
from softswitch.server.service import P4RuntimeServer, P4RuntimeService
from softswitch.server.verify import device_config_mismatch, p4info_mismatch

__all__ = [
    "DEFAULT_GRPC_ADDR",
    "P4RUNTIME_API_VERSION",
    "IdMap",
    "P4RuntimeError",
    "P4RuntimeServer",
    "P4RuntimeService",
    "PipelineConfig",
    "device_config_mismatch",
    "p4info_mismatch",
    "packet_out_frame",
]
