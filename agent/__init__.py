"""The local agent of one cache switch (paper §4.3), run as its own process (an application: ``agent.agent``
has the logic, ``agent.service`` its gRPC API, ``agent.slots`` and ``agent.state`` the version tags and their
file, ``agent.status`` what it reports).

``python -m agent --cluster runs/<run>/cluster.json --switch sp0 ...`` (console script ``dc-agent``)

The agent is its switch's P4Runtime primary.  It installs what the controller
gives it over the agent API (distcache/proto/agent.proto: the cluster and the
spine partition, from which :func:`p4rt.plan.plan` derives every
entry), consumes the hot-key digests the switch's detector sends, and caches
the reported keys:

* **insert**: the key goes into ``cache_lookup`` pointing at a free slot with a
  version the slot has not had in this cache epoch, which leaves it invalid;
  then the key's storage shim fills the value (``populate``, with the entry's
  tag, so only this entry's own populate can arm it), serialized with the
  key's writes.  No register is written by the control plane.
* **tags**: an entry's tag is (the switch's ``cache_epoch``, its version).  The
  registers keep the tags of entries long gone, so a tag must never repeat:
  versions count up per slot, saved to the state file *before* the entry is
  written; an agent that cannot vouch for the versions handed out before (no
  state file, or one from another epoch) raises ``cache_epoch`` on the switch,
  which makes every tag the registers hold unmatchable at once, and fills the
  entries it finds again.  So does a slot whose versions run out, and so does
  a switch that came up empty (a delayed packet of its earlier life could carry
  a tag of an epoch it had then): a new epoch is above the switch's, our
  state's and the wall clock's seconds, so no epoch ever comes back.
* **evict**: when the cache is full, the entry with the fewest hits over the
  last two hit windows (deltas of the per-slot ``cache_hits`` counter) makes
  room, if the reported key is hotter; the shim is told, so later writes skip
  this switch.
* **budget**: insertions from reports are bounded by a token bucket
  (``insert_rate`` per second, ``insert_burst``), so a flood of reports cannot
  overwhelm the switch or the shims.
* **resync**: after its own restart the agent reads the cache entries back
  from the switch and rebuilds its view (per-slot version tags come back from
  its state file, or a raised epoch); after the switch restarts (the P4Runtime stream breaks and
  the pipeline is gone) it pushes the pipeline and the entries again and
  starts with an empty cache, re-adding nothing.
"""
