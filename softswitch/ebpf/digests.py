"""Digests of the PSA build: p4c-ebpf's ``Digest.pack`` pushes the struct into a BPF queue map of 128 entries
(``BPF_MAP_TYPE_QUEUE``) named after the digest; user space pops them.  :class:`DigestQueues` empties every
queue of a program into the P4Runtime server's digest engine (softswitch/server/digests.py: batching,
acknowledgements and timeouts as on BMv2), field values in the P4Info's order.

The kernel does not wake a reader of a queue map, so it is polled: every ``FAST_S`` while digests come, backing
off to ``IDLE_S`` when none has come for a while (a busy detector reports within a millisecond; an idle
switch costs a hundred wake-ups a second).  A queue full when the program packs drops the newest message in
the kernel (the program cannot tell), as BMv2 drops digests its queue has no room for.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from softswitch.ebpf import libbpf
from softswitch.ebpf.layout import LayoutError, MapLayout, Struct, c_name
from softswitch.program import Digest

BPF_MAP_TYPE_QUEUE = 22
FAST_S, IDLE_S = 0.001, 0.01
IDLE_AFTER = 50  # empty polls in a row before backing off

Values = tuple[int, ...]


@dataclass
class DigestQueue:
    """One digest's queue map: pop its messages as the P4Info's field values."""

    digest: Digest
    layout: MapLayout
    fd: int

    def __post_init__(self) -> None:
        if self.layout.map_type != BPF_MAP_TYPE_QUEUE or not isinstance(self.layout.value, Struct):
            raise LayoutError(f"{self.layout.name} is not a digest's queue")
        value = self.layout.value
        self._fields = [value.field(name) for name, _ in self.digest.fields]
        self._size = value.size

    def pop(self) -> Values | None:
        """The oldest message, or None if the queue is empty."""
        raw = libbpf.pop(self.fd, self._size)
        if raw is None:
            return None
        return tuple(
            f.unpack(raw) & ((1 << width) - 1) for f, (_, width) in zip(self._fields, self.digest.fields, strict=True)
        )


class DigestQueues:
    """Every digest queue of a program pinned under ``root``, emptied into ``submit`` by a thread."""

    def __init__(
        self,
        digests: Iterable[Digest],
        layouts: Mapping[str, MapLayout],
        root: Path,
        submit: Callable[[list[tuple[str, Values]]], None],
    ) -> None:
        self.queues: list[DigestQueue] = []
        for d in digests:
            layout = layouts.get(c_name(d.name))
            if layout is None:
                raise LayoutError(f"the program has no queue map for digest {d.name}")
            self.queues.append(DigestQueue(d, layout, libbpf.map_get(root / layout.name)))
        self._submit = submit
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.popped = 0

    def drain(self) -> int:
        """Pop every message waiting now and submit them, oldest first per digest; how many there were."""
        out: list[tuple[str, Values]] = []
        for q in self.queues:
            while (values := q.pop()) is not None:
                out.append((q.digest.name, values))
        if out:
            self._submit(out)
            self.popped += len(out)
        return len(out)

    def discard(self) -> int:
        """Pop every message waiting now and drop it (a new pipeline config: what the old one packed is not
        reported); how many there were."""
        return sum(1 for q in self.queues for _ in iter(q.pop, None))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="digest-queues", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        empty = 0
        while not self._stop.wait(FAST_S if empty < IDLE_AFTER else IDLE_S):
            empty = 0 if self.drain() else empty + 1

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)
        for q in self.queues:
            os.close(q.fd)
        self.queues.clear()
