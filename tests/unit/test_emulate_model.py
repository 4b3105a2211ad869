"""``make emulate``'s pure parts: the simulator places named keys as the running system does, and the
Figure 11 dips are computed per failure event (the Mininet run itself is in tests/e2e/test_emulate.py).
"""

from __future__ import annotations

from distcache.cluster import Cluster
from simulator.model import Model, SimConfig


def test_simulator_places_named_keys_by_the_real_hashes() -> None:
    """key_prefix: the model's owner server and spine of key<rank> are the cluster's own h1 and h0."""
    from distcache.hashing import h0
    from distcache.partition import spine_buckets
    from tests.common.keys import digest

    c = Cluster(spines=4, storage_racks=4, servers_per_rack=4)
    m = Model(SimConfig(cluster=c, n_keys=500, head=500, key_prefix="key"))
    owners = spine_buckets([c.spine(i).switch_id for i in range(4)])
    for rank in (0, 1, 7, 499):
        k = digest(f"key{rank}")
        server = c.server_for_key(k)
        assert m.server[rank] == server.rack * c.servers_per_rack + server.index
        assert m.spine[rank] == owners[h0(k)] - 1
    assert not (Model(SimConfig(cluster=c, n_keys=500, head=500)).server == m.server).all()  # uniform draws differ


def test_fig11_reports_the_dip_of_each_failure_event() -> None:
    """Each crash or fail: the median goodput of the 5 s before against the lowest of its second and the 3
    after; restarts and recoveries are not failure events."""
    from dcnet.emulate import EVENTS, event_dips

    crash = next(w for w, what, _ in EVENTS if what == "crash")
    trace = [(float(t), 100.0) for t in range(1, 37)]
    trace = [(t, 40.0 if t == crash + 2 else g) for t, g in trace]  # one bad second in the crash's window
    dips = dict((label, (before, low)) for label, before, low in event_dips(trace))
    assert set(dips) == {f"{what} {name}" for _, what, name in EVENTS if what in ("crash", "fail")}
    assert dips["crash sp0"] == (100.0, 40.0)
    assert dips["fail sp1"] == (100.0, 100.0)
