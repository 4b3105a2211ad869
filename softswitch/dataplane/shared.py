"""State shared by two controls, declared once (p4src/include/pipeline.p4: DcIngress hands it to them)."""

from __future__ import annotations

from distcache import p4names
from softswitch.program import Counter, Register

REGISTERS = (
    Register(
        p4names.CACHE_VALID, 48, p4names.CACHE_SLOTS
    ),  # tag (epoch ++ version): read by DcCache, written by DcCoherence
    Register(p4names.CACHE_VLEN, 16, p4names.CACHE_SLOTS),
    Register(p4names.CACHE_VALUE, 128, p4names.CACHE_SLOTS * p4names.MAX_CHUNKS),
    Register(p4names.CACHE_INVAL_SEQ, 64, p4names.CACHE_SLOTS),  # DcCoherence's record, DcCache's write version
    Register(p4names.PEER_LOAD, 32, p4names.MAX_SWITCHES),  # written by DcTelemetry, read by DcRouting
    Register(p4names.PEER_LOAD_EPOCH, 32, p4names.MAX_SWITCHES),
)

COUNTERS = (
    Counter(p4names.DC_DROPS, p4names.N_DROP_REASONS, "packets"),
    Counter(p4names.DC_STATS, p4names.N_STATS, "packets"),
)
