"""Cache replacement policy the agents apply and the controller plans with (one definition for both)."""

from __future__ import annotations

#: a key replaces a cached key only at this many times its hits: both figures are estimates (a report's
#: rate comes from a handful of reads), and swapping keys of about the same rate gains nothing but costs an
#: insertion, a populate and an eviction (a 60 s make run cached 3 700 keys into 400 slots without a margin)
REPLACE_MARGIN = 1.5

#: an agent's CachedKey.hits (agent API) covers its last this many hit windows
HIT_WINDOWS = 2
