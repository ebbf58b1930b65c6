"""The workloads ``lockstep vllm check dp-pause`` drives a real vLLM through, and the model bounds each implies.

A ``Scenario`` is a run of the dp-pause model's client on ``AsyncLLM``: ``requests`` requests added first
(each to the DP rank ``ranks`` names, with ``max_tokens`` tokens), then ``cycles`` pause/resume cycles:
optionally waiting for a first token so the pause comes mid-request (the first request's in the first
cycle, the newest late request's after), one ``pause_generation`` in ``pause_mode``, one
``collective_rpc`` (whose body all-reduces over every DP rank's worker), ``resume_generation``; the
``late_requests`` are shared out over the cycles (request i to cycle i mod cycles) and added while paused
or after the resume (``late_phase``); then every request is awaited to its end. The model bounds it
implies (``model_parameters``) go into the trace header: ``requests``, ``late_requests``,
``request_steps`` (``max_tokens`` up to 2, a request needing one forward per token; 0, any length, for
longer ones), ``pause_modes`` (1 keep, 2 abort), ``pause_cycles`` and the wave bound.

Scenarios (``scenario(name, seed)``):

- ``cycles`` (the default): 2 requests of 16 tokens, then two cycles, each pausing in ``keep`` mode after a
  request's first token, running the collective_rpc and resuming, with one late request of 16 tokens after
  each resume; ``seed`` picks the DP rank of each request.
- ``script``: the model's original client script: 2 requests of 2 tokens, the pause in ``keep`` mode after
  the first token of the first request, the collective_rpc, the resume, 1 late request while paused.
- ``random``: ``seed`` draws every choice within the original script's bounds (1-3 requests, 0-2 late
  ones, 1 or 2 tokens, keep or abort, the pause at once or after a first token, the late requests' phase
  and ranks; one cycle).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

from lockstep.instrumentation.vllm_dp_pause import max_wave

SCENARIOS = ("cycles", "script", "random")
DEFAULT_SCENARIO = "cycles"
PAUSE_MODES = {"keep": 1, "abort": 2}  # the model's pause_modes bit of each mode
LATE_PHASES = ("paused", "resumed")  # after pause_generation returned / after resume_generation returned
RANKS = 2  # data_parallel_size of every scenario
LONGEST_COUNTED, ANY_LENGTH = 2, 0  # the model counts a request's forwards up to 2; request_steps 0: any length


class UnknownScenario(ValueError):
    """A scenario name ``scenario`` does not know (the message names the known ones)."""


@dataclass(frozen=True)
class Scenario:
    """One dp-pause workload (see the module doc)."""

    name: str
    seed: int
    requests: int
    late_requests: int
    max_tokens: int
    pause_mode: str
    pause_after_first_token: bool
    late_phase: str
    ranks: tuple[int, ...]  # the DP rank of each request, the late ones last
    cycles: int = 1  # pause, collective_rpc, resume: how many times

    def late_in_cycle(self, cycle: int) -> list[int]:
        """The late requests (their indices) the client adds in ``cycle`` (from 0): index i in cycle i mod cycles."""
        return list(range(self.requests, self.requests + self.late_requests))[cycle :: self.cycles]

    def model_parameters(self) -> dict[str, int]:
        """The model bounds of a recording of this scenario (the header's ``LOCKSTEP_TRACE_PARAMETERS``)."""
        return {
            "requests": self.requests,
            "late_requests": self.late_requests,
            "request_steps": self.max_tokens if self.max_tokens <= LONGEST_COUNTED else ANY_LENGTH,
            "pause_modes": PAUSE_MODES[self.pause_mode],
            "pause_cycles": self.cycles,
            "max_wave": max_wave(self.requests, self.late_requests, self.cycles),
        }

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ranks": list(self.ranks)}

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Scenario:
        return cls(**{**payload, "ranks": tuple(payload["ranks"])})


def scenario(name: str, seed: int = 0) -> Scenario:
    """The scenario ``name`` with ``seed`` (see the module doc); ``UnknownScenario`` for another name."""
    chooser = random.Random(seed)
    if name == "cycles":
        return Scenario(
            name,
            seed,
            requests=2,
            late_requests=2,
            max_tokens=16,
            pause_mode="keep",
            pause_after_first_token=True,
            late_phase="resumed",
            ranks=tuple(chooser.randrange(RANKS) for _ in range(4)),
            cycles=2,
        )
    if name == "script":
        return Scenario(
            name,
            seed,
            requests=2,
            late_requests=1,
            max_tokens=2,
            pause_mode="keep",
            pause_after_first_token=True,
            late_phase="paused",
            ranks=tuple(chooser.randrange(RANKS) for _ in range(3)),
        )
    if name == "random":
        requests = chooser.randint(1, 3)
        late = chooser.randint(0, 2)
        return Scenario(
            name,
            seed,
            requests=requests,
            late_requests=late,
            max_tokens=chooser.randint(1, 2),
            pause_mode=chooser.choice(sorted(PAUSE_MODES)),
            pause_after_first_token=chooser.random() < 0.5,
            late_phase=chooser.choice(LATE_PHASES),
            ranks=tuple(chooser.randrange(RANKS) for _ in range(requests + late)),
        )
    raise UnknownScenario(f"no dp-pause scenario {name!r}; scenarios: {', '.join(SCENARIOS)}")


__all__ = [
    "ANY_LENGTH",
    "DEFAULT_SCENARIO",
    "LATE_PHASES",
    "PAUSE_MODES",
    "RANKS",
    "SCENARIOS",
    "Scenario",
    "UnknownScenario",
    "scenario",
]
