"""The demo's summary of spine deaths: a death no failure event explains (a healthy spine taken for dead) is
shown with its wall-clock time, detection and silence, so it can be laid beside the host's own stalls; the
deaths of an event's spine after the event are the event's."""

from __future__ import annotations

import time

from dcnet.demo import Event, unexplained

from p4rt.probes import SpineDeath

T0 = 1_800_000_000.0


def event(spine: str, wall: float, done: bool = True) -> Event:
    return Event(at=10, label=f"crash {spine}", action=lambda: "", spine=spine, done=done, wall=wall)


def test_deaths_of_an_events_spine_after_it_are_the_events() -> None:
    deaths = [SpineDeath("cl0", "sp1", 0.033, 1.2, T0 + 2)]
    assert unexplained([event("sp1", T0)], deaths) == ""


def test_a_death_before_the_event_or_of_another_spine_is_shown_with_its_figures() -> None:
    deaths = [
        SpineDeath("cl0", "sp1", 0.036, 0.069, T0 - 5.25),  # before sp1's crash
        SpineDeath("cl0", "sp0", 0.048, 0.083, T0 + 3),  # a spine no event stopped
        SpineDeath("cl0", "sp1", 0.033, 1.2, T0 + 2),
    ]
    shown = unexplained([event("sp1", T0)], deaths)
    clock = time.strftime("%H:%M:%S", time.localtime(T0 - 5.25))
    assert shown.startswith("; not a failure event's: ")
    assert f"cl0: sp1 at {clock}.750 found dead 36 ms after its last packet, silent 69 ms" in shown
    assert "cl0: sp0 at" in shown and "found dead 48 ms after its last packet, silent 83 ms" in shown
    assert shown.index("sp1 at") < shown.index("sp0 at")  # in the order they happened
    assert "1200 ms" not in shown


def test_an_event_not_yet_done_explains_nothing() -> None:
    deaths = [SpineDeath("cl0", "sp1", 0.033, 1.2, T0 + 2)]
    assert "cl0: sp1" in unexplained([event("sp1", T0, done=False)], deaths)
    assert unexplained([], []) == ""
