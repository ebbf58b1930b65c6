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
- ``random-script``: ``seed`` draws every choice within the original script's bounds (1-3 requests, 0-2
  late ones, 1 or 2 tokens, keep or abort, the pause at once or after a first token, the late requests'
  phase and ranks; one cycle).

Free scenarios (``steps``: the client's calls in order, replayed against the model's free client):

- ``random``: ``seed`` draws 1-3 pause cycles; before each, 0-3 requests of 1-24 tokens on either rank and
  a wait for some tokens of one of them; a pause in ``keep``, ``abort`` or ``wait`` mode; 0-2 requests
  while paused; 0-2 collective_rpcs; the resume; at the end 0-2 more requests.
- ``pause-at-progress``: one request of 24 tokens; the pause after its k-th token (k from ``seed``, 1-23),
  the collective_rpc, the resume, one more request.
- ``pause-at-sync``: the pause aimed at a DP sync step (``_has_global_unfinished_reqs`` syncs at step 1 of a
  wave and every ``dp_sync_interval`` steps, 16 by default, from 0.30.0; before, every 32nd step): one request
  of ``dp_sync_interval`` + 24 tokens, the pause after token ``dp_sync_interval`` − 2 + (``seed`` mod 3), so
  that it reaches the engines as the wave's step ``dp_sync_interval`` syncs.
- ``pause-at-wave-boundary``: one request of ``dp_sync_interval`` tokens (its last forward is a sync step,
  where the wave ends), then the pause as soon as it finished (while rank 0's ``wave_complete`` is on its
  way to the coordinator), the collective_rpc, the resume and a request after it (``seed`` picks the ranks).
- ``aborts``: requests aborted (``AsyncLLM.abort``) mid-run: two requests of 24 tokens, the first aborted
  after some of its tokens, a pause (mode from ``seed``), a request added while paused, the collective_rpc,
  the resume, that request aborted after some tokens, the second aborted after some tokens (or already
  finished), one more request (``seed`` picks the ranks, the mode and the progress).
- ``abort-while-paused``: as ``aborts``, but the request added while paused is aborted before the resume
  (the one-client form of the model's request-while-paused hang: vLLM 0.30.0-0.32.0 hang at the last
  request, which wakes no other rank).

A step is ``("add", index, rank, max_tokens)``, ``("tokens", index, count)`` (wait until request ``index``
has ``count`` tokens or finished), ``("finished", index)``, ``("abort", index)`` (``AsyncLLM.abort``; the
client sends nothing for a request already finished), ``("pause", mode)``, ``("rpc",)`` or ``("resume",)``;
every request is awaited to its end (or its abort) after the last step.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

from lockstep.instrumentation.vllm_dp_pause import max_wave

SCENARIOS = (
    "cycles",
    "script",
    "random",
    "random-script",
    "pause-at-progress",
    "pause-at-sync",
    "pause-at-wave-boundary",
    "aborts",
    "abort-while-paused",
)
DEFAULT_SCENARIO = "cycles"
PAUSE_MODES = {"keep": 1, "abort": 2, "wait": 4}  # the model's pause_modes bit of each mode
SYNC_INTERVAL = 16  # 0.30.0 on: the default dp_sync_interval (engine_arguments leaves it); 0.21.0: 32
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
    steps: tuple[tuple[Any, ...], ...] = ()  # a free scenario's calls in order (see the module doc); () scripted

    def late_in_cycle(self, cycle: int) -> list[int]:
        """The late requests (their indices) the client adds in ``cycle`` (from 0): index i in cycle i mod cycles."""
        return list(range(self.requests, self.requests + self.late_requests))[cycle :: self.cycles]

    def model_parameters(self) -> dict[str, int]:
        """The model bounds of a recording of this scenario (the header's ``LOCKSTEP_TRACE_PARAMETERS``)."""
        if self.steps:
            return free_parameters(self.steps)
        return {
            "requests": self.requests,
            "late_requests": self.late_requests,
            "request_steps": self.max_tokens if self.max_tokens <= LONGEST_COUNTED else ANY_LENGTH,
            "pause_modes": PAUSE_MODES[self.pause_mode],
            "pause_cycles": self.cycles,
            "max_wave": max_wave(self.requests, self.late_requests, self.cycles),
        }

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ranks": list(self.ranks), "steps": [list(step) for step in self.steps]}

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Scenario:
        steps = tuple(tuple(step) for step in payload.get("steps", ()))
        return cls(**{**payload, "ranks": tuple(payload["ranks"]), "steps": steps})

    def describe(self) -> str:
        """What the client does, in a line."""
        if self.steps:
            return ", ".join(_describe_step(step) for step in self.steps)
        late = f", {self.late_requests} more while {self.late_phase}" if self.late_requests else ""
        timing = " after a first token" if self.pause_after_first_token else ""
        cycles = f" ({self.cycles} cycles)" if self.cycles > 1 else ""
        return (
            f"{self.requests} requests of {self.max_tokens} tokens (DP ranks {list(self.ranks)}), "
            f"pause ({self.pause_mode}){timing}, collective_rpc, resume{cycles}{late}"
        )


def _describe_step(step: tuple[Any, ...]) -> str:
    kind = step[0]
    if kind == "add":
        return f"add request-{step[1]} ({step[3]} tokens) to rank {step[2]}"
    if kind == "tokens":
        return f"wait for {step[2]} tokens of request-{step[1]}"
    if kind == "finished":
        return f"wait for request-{step[1]} to finish"
    if kind == "abort":
        return f"abort request-{step[1]}"
    if kind == "pause":
        return f"pause ({step[1]})"
    return {"rpc": "collective_rpc", "resume": "resume"}[kind]


def free_parameters(steps: tuple[tuple[Any, ...], ...]) -> dict[str, int]:
    """The model bounds of a free scenario: every add a request (none late), requests of one or two forwards
    where every request has that many tokens (else any length), the pause modes used, the pauses as
    ``pause_cycles`` and the resume calls per pause cycle (rounded up), the wave bound from them; with aborts, the
    ABORTs the client may send (``abort_request``, one per abort step)."""
    tokens = {step[3] for step in steps if step[0] == "add"}
    requests = sum(1 for step in steps if step[0] == "add")
    modes = [step[1] for step in steps if step[0] == "pause"]
    pauses = max(1, len(modes))
    resumes = max(1, -(-sum(1 for step in steps if step[0] == "resume") // pauses))
    counted = len(tokens) == 1 and max(tokens) <= LONGEST_COUNTED
    aborts = sum(1 for step in steps if step[0] == "abort")
    return {
        **({"abort_request": aborts} if aborts else {}),
        "requests": requests,
        "late_requests": 0,
        "request_steps": max(tokens) if counted else ANY_LENGTH,
        "pause_modes": sum({PAUSE_MODES[mode] for mode in modes}) or PAUSE_MODES["keep"],
        "pause_cycles": pauses,
        "resumes": resumes,
        "max_wave": max_wave(requests, 0, pauses, resumes),
    }


def free_scenario(name: str, seed: int, steps: list[tuple[Any, ...]]) -> Scenario:
    """A free scenario of ``steps`` (the scripted fields summarise it: requests, their ranks, the first mode)."""
    adds = [step for step in steps if step[0] == "add"]
    modes = [step[1] for step in steps if step[0] == "pause"]
    return Scenario(
        name,
        seed,
        requests=len(adds),
        late_requests=0,
        max_tokens=max((step[3] for step in adds), default=0),
        pause_mode=modes[0] if modes else "keep",
        pause_after_first_token=any(step[0] == "tokens" for step in steps),
        late_phase="resumed",
        ranks=tuple(step[2] for step in adds),
        cycles=max(1, len(modes)),
        steps=tuple(steps),
    )


def random_steps(chooser: random.Random) -> list[tuple[Any, ...]]:
    """The ``random`` scenario's calls (see the module doc)."""
    steps: list[tuple[Any, ...]] = []
    added: list[int] = []

    def add(count: int) -> None:
        for _ in range(count):
            steps.append(("add", len(added), chooser.randrange(RANKS), chooser.randint(1, 24)))
            added.append(steps[-1][3])

    for _ in range(chooser.randint(1, 3)):
        add(chooser.randint(0, 3))
        if added and chooser.random() < 0.7:
            index = chooser.randrange(len(added))
            steps.append(("tokens", index, chooser.randint(1, added[index])))
        steps.append(("pause", chooser.choice(sorted(PAUSE_MODES))))
        add(chooser.randint(0, 2))
        steps.extend(("rpc",) for _ in range(chooser.randint(0, 2)))
        steps.append(("resume",))
    add(chooser.randint(0, 2))
    return steps


def guided_steps(name: str, seed: int, sync_interval: int = SYNC_INTERVAL) -> list[tuple[Any, ...]]:
    """The model-guided scenarios' calls (see the module doc), aimed at the engines' ``sync_interval``."""
    chooser = random.Random(seed)
    first, late = chooser.randrange(RANKS), chooser.randrange(RANKS)
    if name == "pause-at-progress":
        opening = [("add", 0, first, 24), ("tokens", 0, 1 + seed % 23)]
    elif name == "pause-at-sync":
        opening = [("add", 0, first, sync_interval + 24), ("tokens", 0, sync_interval - 2 + seed % 3)]
    else:  # pause-at-wave-boundary
        opening = [("add", 0, first, sync_interval), ("finished", 0)]
    return [*opening, ("pause", "keep"), ("rpc",), ("resume",), ("add", 1, late, 4)]


def abort_steps(name: str, seed: int) -> list[tuple[Any, ...]]:
    """The ``aborts`` and ``abort-while-paused`` scenarios' calls (see the module doc)."""
    chooser = random.Random(seed)
    ranks = [chooser.randrange(RANKS) for _ in range(4)]
    opening = [
        ("add", 0, ranks[0], 24),
        ("add", 1, ranks[1], 24),
        ("tokens", 0, chooser.randint(1, 12)),
        ("abort", 0),
        ("pause", chooser.choice(sorted(PAUSE_MODES))),
        ("add", 2, ranks[2], 8),
    ]
    if name == "abort-while-paused":
        middle = [("abort", 2), ("rpc",), ("resume",)]
    else:
        middle = [("rpc",), ("resume",), ("tokens", 2, chooser.randint(1, 4)), ("abort", 2)]
    return [*opening, *middle, ("tokens", 1, chooser.randint(12, 24)), ("abort", 1), ("add", 3, ranks[3], 4)]


def scenario(name: str, seed: int = 0, sync_interval: int = SYNC_INTERVAL) -> Scenario:
    """The scenario ``name`` with ``seed`` (see the module doc; the model-guided ones aimed at the installed
    release's ``sync_interval``, ``Recording.default_sync_interval``); ``UnknownScenario`` for another name."""
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
        return free_scenario(name, seed, random_steps(chooser))
    if name in ("pause-at-progress", "pause-at-sync", "pause-at-wave-boundary"):
        return free_scenario(name, seed, guided_steps(name, seed, sync_interval))
    if name in ("aborts", "abort-while-paused"):
        return free_scenario(name, seed, abort_steps(name, seed))
    if name == "random-script":
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
    "SYNC_INTERVAL",
    "free_parameters",
    "DEFAULT_SCENARIO",
    "LATE_PHASES",
    "PAUSE_MODES",
    "RANKS",
    "SCENARIOS",
    "Scenario",
    "UnknownScenario",
    "scenario",
]
