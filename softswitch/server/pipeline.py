"""The forwarding pipeline config of the P4Runtime server."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import grpc
from finsy.proto import p4r

from softswitch.program import Program
from softswitch.server.arbitration import Arbitration
from softswitch.server.codec import (
    _CFG,
    _GET,
    P4RUNTIME_API_VERSION,
    SC,
    P4RuntimeError,
    _abort,
    _err,
)
from softswitch.server.ids import IdMap, PipelineConfig
from softswitch.server.verify import device_config_mismatch, p4info_mismatch
from softswitch.target import PipelineTarget

log = logging.getLogger("softswitch.server")


class PipelineConfigs(Arbitration):
    """Capabilities and the forwarding pipeline config (SetForwardingPipelineConfig's four actions and the
    shadow state between VERIFY_AND_SAVE and COMMIT).  A part of
    :class:`~softswitch.server.service.P4RuntimeService`, over its arbitration (only the primary sets a
    config)."""

    # set up by P4RuntimeService.__init__
    state: PipelineTarget
    program: Program
    on_commit: Callable[[PipelineConfig, bool], None] | None
    _cfg_lock: threading.RLock
    _saved: PipelineConfig | None
    _shadow: PipelineTarget | None

    # -- public view ----------------------------------------------------------------------------
    @property
    def committed(self) -> PipelineConfig | None:
        """The config packets are processed with (None: drop every packet)."""
        return self._committed

    def _rw_target(self) -> tuple[PipelineConfig, PipelineTarget]:
        """The config and state Read/Write act on (the saved one after VERIFY_AND_SAVE)."""
        if self._saved is not None and self._shadow is not None:
            return self._saved, self._shadow
        if self._committed is None:
            _err(SC.FAILED_PRECONDITION, "No forwarding pipeline config set for this device")
        return self._committed, self.state

    # -- Capabilities ------------------------------------------------------------------------------------
    def Capabilities(self, request: p4r.CapabilitiesRequest, context: grpc.ServicerContext) -> p4r.CapabilitiesResponse:
        if request.device_id and request.device_id != self.device_id:
            context.abort(SC.NOT_FOUND, f"device id {request.device_id} not found")
        return p4r.CapabilitiesResponse(p4runtime_api_version=P4RUNTIME_API_VERSION)

    # -- pipeline config ---------------------------------------------------------------------------------
    def SetForwardingPipelineConfig(
        self, request: p4r.SetForwardingPipelineConfigRequest, context: grpc.ServicerContext
    ) -> p4r.SetForwardingPipelineConfigResponse:
        try:
            self._check_device(request.device_id)
            self._check_primary(request.role, request.election_id if request.HasField("election_id") else None)
            with self._cfg_lock:
                self._set_config(request)
        except P4RuntimeError as e:
            log.warning("SetForwardingPipelineConfig refused: %s %s", e.code, e.message)
            _abort(context, e)
        return p4r.SetForwardingPipelineConfigResponse()

    def _verify(self, request: p4r.SetForwardingPipelineConfigRequest) -> PipelineConfig:
        if not request.HasField("config") or not request.config.HasField("p4info"):
            _err(SC.INVALID_ARGUMENT, "config with a P4Info is required")
        cfg = request.config
        diff = p4info_mismatch(self.program, cfg.p4info)
        if diff is not None:
            _err(SC.INVALID_ARGUMENT, f"P4Info does not match softswitch program {self.program.name!r}: {diff}")
        diff = device_config_mismatch(self.program, cfg.p4_device_config)
        if diff is not None:
            _err(SC.INVALID_ARGUMENT, diff)
        cookie = cfg.cookie.cookie if cfg.HasField("cookie") else None
        return PipelineConfig(cfg.p4info, cfg.p4_device_config, cookie, IdMap.build(self.program, cfg.p4info))

    def _set_config(self, request: p4r.SetForwardingPipelineConfigRequest) -> None:
        action = request.action
        if action == _CFG.VERIFY:
            self._verify(request)
        elif action == _CFG.VERIFY_AND_SAVE:
            self._saved = self._verify(request)
            self._shadow = self.state.empty()
            log.info("pipeline config saved (not committed), cookie=%s", self._saved.cookie)
        elif action == _CFG.VERIFY_AND_COMMIT:
            self._commit(self._verify(request), None, reconcile=False)
        elif action == _CFG.COMMIT:
            if request.HasField("config"):
                _err(SC.INVALID_ARGUMENT, "COMMIT takes no config")
            if self._saved is None:
                _err(SC.NOT_FOUND, "no saved config to commit (VERIFY_AND_SAVE first)")
            self._commit(self._saved, self._shadow, reconcile=False)
        elif action == _CFG.RECONCILE_AND_COMMIT:
            # Same program by construction, so every entry and register survives; only ids change.
            self._commit(self._verify(request), None, reconcile=self._committed is not None)
        else:
            _err(SC.INVALID_ARGUMENT, f"unsupported SetForwardingPipelineConfig action {action}")

    def _commit(self, cfg: PipelineConfig, shadow: PipelineTarget | None, *, reconcile: bool) -> None:
        with self.state.lock:
            if not reconcile:
                self.state.reset()
            if shadow is not None:
                _copy_control_state(shadow, self.state)
            self._committed = cfg
            self._saved = None
            self._shadow = None
            if reconcile:
                self.digests.set_ids(cfg.ids.digest_ids)
            else:  # as BMv2: a new config forgets DigestEntries, list ids start again at 1
                self.digests.reset(cfg.ids.digest_ids)
        log.info(
            "pipeline config committed: program %r, cookie=%s, device config %d bytes%s",
            self.program.name,
            cfg.cookie,
            len(cfg.device_config),
            " (state kept)" if reconcile else "",
        )
        if self.on_commit is not None:
            self.on_commit(cfg, reconcile)

    def GetForwardingPipelineConfig(
        self, request: p4r.GetForwardingPipelineConfigRequest, context: grpc.ServicerContext
    ) -> p4r.GetForwardingPipelineConfigResponse:
        try:
            self._check_device(request.device_id)
            with self._cfg_lock:
                cfg = self._committed or self._saved
            if cfg is None:
                _err(SC.FAILED_PRECONDITION, "No forwarding pipeline config set for this device")
        except P4RuntimeError as e:
            _abort(context, e)
        out = p4r.ForwardingPipelineConfig()
        rt = request.response_type
        if cfg.cookie is not None:
            out.cookie.cookie = cfg.cookie
        if rt in (_GET.ALL, _GET.P4INFO_AND_COOKIE):
            out.p4info.CopyFrom(cfg.p4info)
        if rt in (_GET.ALL, _GET.DEVICE_CONFIG_AND_COOKIE):
            out.p4_device_config = cfg.device_config
        return p4r.GetForwardingPipelineConfigResponse(config=out)


def _copy_control_state(src: PipelineTarget, dst: PipelineTarget) -> None:
    """Install what P4Runtime wrote into ``src`` (entries, defaults, counter values, meter configs) into ``dst``."""
    for name, st in src.tables.items():
        dt = dst.tables[name]
        for e in st.entries():
            dt.insert_canonical(
                e.match, e.action, e.params, e.priority, controller_metadata=e.controller_metadata, metadata=e.metadata
            )
        if st.default_modified:
            dt.set_default(st.default_action, st.default_params)
    for name, sc in src.counters.items():
        dc = dst.counters[name]
        for i in range(sc.size):
            p, b = sc.read(i)
            if p or b:
                dc.write(i, p, b)
    for name, sm in src.meters.items():
        dm = dst.meters[name]
        for i in range(sm.size):
            cfg = sm.config(i)
            if cfg is not None:
                dm.configure(i, cfg)
