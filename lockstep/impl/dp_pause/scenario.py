"""dp-pause scenarios: which arrivals a scenario holds back, and how the client is paced.

A scenario never makes a choice itself: it only says which messages *may* arrive now (a hold
is a guard on the choice), and the run's choice source picks among what may arrive, and how
late. ``issue-36594`` forces the interleaving of vLLM issue #36594 on every seed; ``random``
holds nothing, so the seed decides everything.

``issue-36594`` (at a rank R that receives requests, and a rank Q that receives none):
- the client's ADDs reach an engine's queue together with the PAUSE that follows them (vLLM:
  ADD and pause both sit in the input queue when the core thread wakes, PR #38009's race);
- START_DP_WAVE reaches Q after Q returned from pause, and before any later client message
  (the collective_rpc); it reaches R only once R has started the collective_rpc;
- the client pauses only once the coordinator has published that the wave it asked for runs.
Pre-fix, Q wakes into a dummy forward (all-reduce on ``worker_dp``) while R runs the
collective_rpc body (all-reduce on ``worker_world``): a hang on every run. Post-fix, Q's pause
returns only after the consensus, and the late START_DP_WAVE is dropped.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Any

SCENARIOS = ("issue-36594", "random", "counterexample")


@dataclass
class Progress:
    """What an engine has done, as the arrival thread needs it (plain flags; set by the core thread)."""

    got_request: bool = False
    pause_delivered: bool = False
    pause_replied: bool = False
    rpc_started: bool = False
    start_wave_delivered: bool = False
    arrived: int = 0  # messages moved into the input queue
    handled: int = 0  # events of the core thread (handle_*, step, finish_*, notify_idle) on file


class Arrivals:
    """``ready(channel, buffer, progress)``: how many messages at the buffer's head may arrive now
    as one batch (0: held back)."""

    def ready(self, channel: str, buffer: collections.deque[Any], progress: Progress) -> int:
        return 1 if buffer else 0

    def wait_before_core_event(self, progress: Progress) -> None:
        """Called by the core thread before it decides its next event (a hold on the core thread)."""


class Issue36594Arrivals(Arrivals):
    def ready(self, channel: str, buffer: collections.deque[Any], progress: Progress) -> int:
        if not buffer:
            return 0
        kind = buffer[0]["kind"]
        if channel == "coordinator":
            if kind != "START_WAVE":
                return 1
            return int(progress.rpc_started if progress.got_request else progress.pause_replied)
        if kind == "ADD":  # ADDs arrive together with the PAUSE after them
            for position, message in enumerate(buffer):
                if message["kind"] == "PAUSE":
                    return position + 1
                if message["kind"] != "ADD":
                    return 1
            return 0
        if progress.pause_delivered and not progress.got_request and not progress.start_wave_delivered:
            return 0  # Q: START_DP_WAVE first
        return 1


class ScheduledArrivals(Arrivals):
    """``counterexample``: one rank's arrivals and core events in a model counterexample's order.

    ``before_arrival[k]`` is how many core events of the rank precede its k-th arrival in the
    counterexample; ``before_event[j]`` how many arrivals precede its j-th core event. Arrival k
    waits until the core thread has done ``before_arrival[k]`` events, and the core thread waits,
    before deciding event j, until ``before_event[j]`` messages arrived. Beyond the schedule
    nothing is held (the choice source then decides). Which source arrives is the script's."""

    def __init__(self, before_arrival: list[int], before_event: list[int]) -> None:
        self.before_arrival, self.before_event = before_arrival, before_event

    def ready(self, channel: str, buffer: collections.deque[Any], progress: Progress) -> int:
        if not buffer:
            return 0
        if progress.arrived < len(self.before_arrival) and progress.handled < self.before_arrival[progress.arrived]:
            return 0
        return 1

    def wait_before_core_event(self, progress: Progress) -> None:
        while progress.handled < len(self.before_event) and progress.arrived < self.before_event[progress.handled]:
            time.sleep(0.001)


def arrivals_for(scenario: str, schedule: dict[str, Any] | None = None) -> Arrivals:
    """The arrivals of ``scenario``; ``counterexample`` takes this rank's ``schedule``
    (``before_arrival`` and ``before_event`` lists, see ``ScheduledArrivals``)."""
    if scenario == "counterexample":
        if schedule is None:
            raise ValueError("scenario counterexample needs a schedule (lockstep reproduce makes one)")
        return ScheduledArrivals(list(schedule["before_arrival"]), list(schedule["before_event"]))
    return Issue36594Arrivals() if scenario == "issue-36594" else Arrivals()


def placement_options(scenario: str, ranks: int, used: set[int]) -> list[int]:
    """The ranks the next request may be placed on (issue-36594 keeps one rank request-free)."""
    options = list(range(ranks))
    if scenario == "issue-36594":
        options = [rank for rank in options if len(used | {rank}) < ranks]
    return options


def paces_pause_after_wave(scenario: str) -> bool:
    return scenario == "issue-36594"
