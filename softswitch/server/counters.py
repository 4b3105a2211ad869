"""CounterEntry writes and reads."""

from __future__ import annotations

from collections.abc import Sequence

from finsy.proto import p4r

from softswitch.program import Counter
from softswitch.server.codec import (
    _UPD,
    SC,
    _err,
)
from softswitch.server.ids import IdMap
from softswitch.target import PipelineTarget


class CounterEntries:
    """The CounterEntry handler of :class:`~softswitch.server.service.P4RuntimeService`."""

    def _counter(self, ids: IdMap, counter_id: int) -> Counter:
        c = ids.counters.get(counter_id)
        if c is None:  # INVALID_ARGUMENT, as BMv2 (see _table_ids)
            _err(SC.INVALID_ARGUMENT, f"unknown counter id {counter_id:#x}")
        return c

    def _write_counter_entry(self, ids: IdMap, state: PipelineTarget, utype: int, ce: p4r.CounterEntry) -> None:
        if utype != _UPD.MODIFY:
            _err(SC.INVALID_ARGUMENT, "counter entries can only be modified")
        if ce.counter_id == 0:
            _err(SC.INVALID_ARGUMENT, "counter_id 0 is not a counter")
        c = self._counter(ids, ce.counter_id)
        if not ce.HasField("data"):
            return
        arr = state.counters[c.name]
        if ce.HasField("index"):
            idx = ce.index.index
            if idx < 0:
                _err(SC.INVALID_ARGUMENT, f"negative counter index {idx}")
            if idx >= c.size:  # BMv2 differs: UNKNOWN ("Error when writing to counter"); the spec says this
                _err(SC.OUT_OF_RANGE, f"counter {c.name} index {idx} >= size {c.size}")
            arr.write(idx, ce.data.packet_count, ce.data.byte_count)
        else:
            for idx in range(c.size):
                arr.write(idx, ce.data.packet_count, ce.data.byte_count)

    def _read_counter(self, ids: IdMap, state: PipelineTarget, q: p4r.CounterEntry) -> list[p4r.Entity]:
        if q.counter_id == 0:
            if q.HasField("index"):
                _err(SC.INVALID_ARGUMENT, "an index needs a counter_id")
            counters = list(ids.counters.items())
        else:
            counters = [(q.counter_id, self._counter(ids, q.counter_id))]
        out = []
        for cid, c in counters:
            arr = state.counters[c.name]
            if q.HasField("index"):
                idx = q.index.index
                if idx < 0:
                    _err(SC.INVALID_ARGUMENT, f"negative counter index {idx}")
                if idx >= c.size:  # BMv2 differs: UNKNOWN ("Error when reading counter"); the spec says this
                    _err(SC.OUT_OF_RANGE, f"counter {c.name} index {idx} >= size {c.size}")
                indexes: Sequence[int] = (idx,)
            else:
                indexes = range(c.size)
            for idx in indexes:
                packets, nbytes = arr.read(idx)
                ce = p4r.CounterEntry(counter_id=cid)
                ce.index.index = idx
                ce.data.SetInParent()  # present even when zero, as BMv2
                if c.unit != "bytes":  # a packets counter has no byte count (BMv2 leaves it 0), and vice versa
                    ce.data.packet_count = packets
                if c.unit != "packets":
                    ce.data.byte_count = nbytes
                out.append(p4r.Entity(counter_entry=ce))
        return out
