"""Which keys a spine that took over a failed spine's buckets caches at once, before their reads miss.

Why: after a failover the new owner's cache holds none of the moved buckets' hot keys; left to its
hot-key reports, its agent inserts them at its insertion budget (50/s), and for the seconds that takes
their reads go to the storage servers.  The failed spine's agent still knows what it held and how hot
each key was, so the controller asks the new owner to cache those keys straight away, through the same
insert-and-populate path every insertion takes (coherent at any time: the populate makes the shim count
the switch as a holder before the copy is valid).  A moved key replaces one the new owner holds only if
it is REPLACE_MARGIN times hotter, as a hot-key report's would.  A key the new owner holds because it was
moved -- warmed before an operator's fail moved the routes, then offered again after -- is as hot as it was
where it came from: its few hits since its insert do not make it the coldest key to replace.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from distcache.replacement import REPLACE_MARGIN

#: A drain's warm-up (an operator's ``fail``, before the routes move) idles this many times as long as each
#: insert took: it has no deadline but the operator's, and each insert costs the agent, the switch and the
#: key's shim CPU.  Where the fabric shares its cores with them (an emulation), a drain warming 48 keys
#: back to back took reads to 58-66 % of the seconds before in two of five `make run`s.
DRAIN_WARM_IDLE = 1.0


def warm_keys(moved: Mapping[bytes, int], held: Mapping[bytes, int], free: int) -> list[bytes]:
    """The ``moved`` keys (key -> recent hits where they were) worth caching at a spine that holds ``held``
    (key -> recent hits there) with ``free`` slots, hottest first: one per free slot, then one for each
    held key it is REPLACE_MARGIN times hotter than (the agent evicts its coldest for each)."""
    hot = sorted((k for k, h in moved.items() if h > 0 and k not in held), key=lambda k: -moved[k])
    cold = sorted(max(h, moved.get(k, 0)) for k, h in held.items())
    out: list[bytes] = []
    for k in hot:
        if free > 0:
            free -= 1
        elif cold and moved[k] > REPLACE_MARGIN * cold[0]:
            cold.pop(0)
        else:
            break
        out.append(k)
    return out


def paced(insert: Callable[[bytes], bool], key: bytes, idle: float = DRAIN_WARM_IDLE) -> bool:
    """``insert(key)``, then ``idle`` times as long again doing nothing; what ``insert`` returned."""
    t = time.monotonic()
    ok = insert(key)
    time.sleep(idle * (time.monotonic() - t))
    return ok
