"""State shared by two controls, declared once (p4src/include/pipeline.p4: DcIngress hands it to them)."""

from __future__ import annotations

from distcache import p4names as n
from softswitch.program import Counter, Register

REGISTERS = (
    Register(n.CACHE_VALID, 48, n.CACHE_SLOTS),  # tag (epoch ++ version): read by DcCache, written by DcCoherence
    Register(n.CACHE_VLEN, 16, n.CACHE_SLOTS),
    Register(n.CACHE_VALUE, 128, n.CACHE_SLOTS * n.MAX_CHUNKS),
    Register(n.CACHE_INVAL_SEQ, 32, n.CACHE_SLOTS),  # DcCoherence's record, DcCache's write version
    Register(n.PEER_LOAD, 32, n.MAX_SWITCHES),  # written by DcTelemetry, read by DcRouting
    Register(n.PEER_LOAD_EPOCH, 32, n.MAX_SWITCHES),
)

COUNTERS = (
    Counter(n.DC_DROPS, n.N_DROP_REASONS, "packets"),
    Counter(n.DC_STATS, n.N_STATS, "packets"),
)
