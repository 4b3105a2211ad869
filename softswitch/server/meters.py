"""MeterEntry writes and reads (rates read back exactly as written)."""

from __future__ import annotations

from collections.abc import Sequence

from finsy.proto import p4r

from softswitch.program import Meter
from softswitch.server.codec import (
    _UPD,
    MAX_METER_BURST,
    SC,
    _err,
)
from softswitch.server.ids import IdMap
from softswitch.target import MeterConfig, PipelineTarget


class MeterEntries:
    """The MeterEntry handler of :class:`~softswitch.server.service.P4RuntimeService`."""

    def _meter(self, ids: IdMap, meter_id: int) -> Meter:
        m = ids.meters.get(meter_id)
        if m is None:  # INVALID_ARGUMENT, as BMv2 ("Invalid P4 id"), also for id 0
            _err(SC.INVALID_ARGUMENT, f"unknown meter id {meter_id:#x}")
        return m

    def _meter_index(self, m: Meter, index: int) -> int:
        if index < 0:  # as BMv2
            _err(SC.INVALID_ARGUMENT, f"negative meter index {index}")
        if index >= m.size:  # BMv2 differs: UNKNOWN ("Error when writing meter spec"); the spec says this
            _err(SC.OUT_OF_RANGE, f"meter {m.name} index {index} >= size {m.size}")
        return index

    def _write_meter_entry(self, ids: IdMap, state: PipelineTarget, utype: int, me: p4r.MeterEntry) -> None:
        m = self._meter(ids, me.meter_id)
        if utype != _UPD.MODIFY:  # as BMv2 (but BMv2 first answers UNIMPLEMENTED for a missing index)
            _err(SC.INVALID_ARGUMENT, "meter entries can only be modified")
        if me.HasField("index"):
            indexes: Sequence[int] = (self._meter_index(m, me.index.index),)
        else:  # BMv2 differs: UNIMPLEMENTED ("Wildcard write ..."); the spec defines it: every cell
            indexes = range(m.size)
        config = self._meter_config(m, me.config) if me.HasField("config") else None
        arr = state.meters[m.name]
        for i in indexes:
            arr.configure(i, config)

    @staticmethod
    def _meter_config(m: Meter, c: p4r.MeterConfig) -> MeterConfig | None:
        """A MeterEntry's config, validated; None (unconfigured, every packet GREEN) for the reset forms.

        No config resets the cell (the spec; BMv2 too).  All four values -1 resets it as well, as
        BMv2 accepts for backward compatibility; another negative value is INVALID_ARGUMENT (BMv2
        differs for a lone -1: it takes it as the largest unsigned value).  ``eburst`` (single-rate
        meters only) is ignored, as BMv2 does.
        """
        values = (c.cir, c.cburst, c.pir, c.pburst)
        if values == (-1, -1, -1, -1):
            return None
        for name, v in zip(("cir", "cburst", "pir", "pburst"), values, strict=True):
            if v < 0:
                _err(SC.INVALID_ARGUMENT, f"meter {m.name}: negative {name} {v}")
        if c.cburst > MAX_METER_BURST or c.pburst > MAX_METER_BURST:  # as BMv2
            _err(SC.UNIMPLEMENTED, f"meter {m.name}: burst larger than {MAX_METER_BURST}")
        if c.cir > c.pir:  # BMv2 differs: UNKNOWN ("Error when writing meter spec") and a half-written meter
            _err(SC.INVALID_ARGUMENT, f"meter {m.name}: cir {c.cir} > pir {c.pir}")
        return MeterConfig(c.cir, c.cburst, c.pir, c.pburst)

    def _read_meter(self, ids: IdMap, state: PipelineTarget, q: p4r.MeterEntry) -> list[p4r.Entity]:
        # meter_id 0: every meter, and an index applies to each of them (as BMv2)
        meters = list(ids.meters.items()) if q.meter_id == 0 else [(q.meter_id, self._meter(ids, q.meter_id))]
        out = []
        for mid, m in meters:
            arr = state.meters[m.name]
            if q.HasField("index"):
                indexes: Sequence[int] = (self._meter_index(m, q.index.index),)
            else:
                indexes = range(m.size)
            for i in indexes:
                # BMv2 differs: with an index it echoes the query (its meter_id 0, its config when the
                # cell is unconfigured); we answer the cell's own id, and its config only when configured
                me = p4r.MeterEntry(meter_id=mid)
                me.index.index = i
                cfg = arr.config(i)
                if cfg is not None:
                    me.config.cir, me.config.cburst = cfg.cir, cfg.cburst
                    me.config.pir, me.config.pburst = cfg.pir, cfg.pburst
                out.append(p4r.Entity(meter_entry=me))
        return out
