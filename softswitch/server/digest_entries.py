"""DigestEntry writes and reads (how the switch delivers each digest on the stream)."""

from __future__ import annotations

from finsy.proto import p4r

from softswitch.program import Digest
from softswitch.server.codec import (
    _UPD,
    SC,
    _err,
)
from softswitch.server.digests import DigestConfig, DigestConfigError, DigestEngine
from softswitch.server.ids import IdMap, PipelineConfig
from softswitch.target import PipelineTarget


class DigestEntries:
    """The DigestEntry handler of :class:`~softswitch.server.service.P4RuntimeService`."""

    # set up by P4RuntimeService.__init__
    digests: DigestEngine
    _saved: PipelineConfig | None

    def _digest(self, ids: IdMap, digest_id: int) -> Digest:
        d = ids.digests.get(digest_id)
        if d is None:  # NOT_FOUND, as BMv2 ("... is not a valid digest id"), also for id 0
            _err(SC.NOT_FOUND, f"{digest_id} is not a valid digest id")
        return d

    def _write_digest_entry(self, ids: IdMap, _state: PipelineTarget, utype: int, de: p4r.DigestEntry) -> None:
        d = self._digest(ids, de.digest_id)
        if self._saved is not None:
            _err(SC.UNAVAILABLE, "DigestEntry writes wait for the saved pipeline config to be committed")
        cfg = DigestConfig(de.config.max_timeout_ns, de.config.max_list_size, de.config.ack_timeout_ns)
        if min(cfg.max_timeout_ns, cfg.max_list_size, cfg.ack_timeout_ns) < 0:
            _err(SC.INVALID_ARGUMENT, f"digest {d.name!r}: negative value in config")
        try:
            self.digests.write(d.name, _UPD.Type.Name(utype), cfg)
        except DigestConfigError as e:
            _err(SC[e.code], e.message)

    def _read_digest(self, ids: IdMap, _state: PipelineTarget, q: p4r.DigestEntry) -> list[p4r.Entity]:
        # digest_id 0 reads every configured digest (the spec); BMv2 differs: UNIMPLEMENTED
        wanted = [(q.digest_id, self._digest(ids, q.digest_id))] if q.digest_id else list(ids.digests.items())
        out = []
        for did, d in wanted:
            cfg = self.digests.config(d.name)
            if cfg is None:
                if q.digest_id:  # as BMv2
                    _err(SC.NOT_FOUND, f"digest {d.name!r} ({did}) not configured")
                continue
            de = p4r.DigestEntry(digest_id=did)
            de.config.max_timeout_ns = cfg.max_timeout_ns
            de.config.max_list_size = cfg.max_list_size
            de.config.ack_timeout_ns = cfg.ack_timeout_ns
            out.append(p4r.Entity(digest_entry=de))
        return out
