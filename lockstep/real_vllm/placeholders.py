"""The async-placeholders check's workloads: one request with a penalty through a real vLLM with async scheduling.

A ``PlaceholderScenario`` is the request the recorder tracks (``lockstep.instrumentation.vllm_async_placeholders``):
a prompt of ``prompt_tokens`` tokens generating ``max_tokens`` tokens with a repetition penalty (so every step
needs the request's output ids: ``_make_sampling_metadata`` gathers them and the next ``_sample`` repairs the
trailing placeholders), under a token budget of ``budget`` (a longer prompt is a chunked prefill), with async
scheduling kept on (the engine's batch queue of 2). In the model's terms (``lockstep.models.async_placeholders``)
that is ``max_tokens``, ``chunked_prefill`` (1 when the prompt is chunked) and ``preemptions`` 1: no
preemption happens at these sizes, but with async scheduling the scheduler leaves the request out of a step
once the step in flight surely reaches ``max_tokens``, and the engine queues that empty step (a SKIP).

- ``penalties`` (the default): 6 prompt tokens, 4 tokens, budget 16.
- ``chunked-prefill``: 20 prompt tokens at a budget of 8 (chunks of 8, 8 and 4), 4 tokens.
- ``random``: ``seed`` draws 1-24 prompt tokens, a budget of 4-16 and 1-8 tokens.

The engine is ``scheduling``'s (one process, the tiny dense model, prefix caching off), with
``async_scheduling`` asked for; ``drive`` runs it. Nothing here prints; vLLM is imported only inside ``drive``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lockstep.real_vllm import scheduling
from lockstep.real_vllm.workload import Timeline

SCENARIOS = ("penalties", "chunked-prefill", "history-toggle", "random")
DEFAULT_SCENARIO = "penalties"
REPETITION_PENALTY = 1.5


class UnknownScenario(ValueError):
    """An async-placeholders scenario name ``scenario`` does not know (the message names the known ones)."""


@dataclass(frozen=True)
class PlaceholderScenario:
    """One async-placeholders workload (see the module doc)."""

    name: str
    seed: int
    prompt_tokens: int
    max_tokens: int
    budget: int
    penalty: bool = True  # the tracked request has a repetition penalty
    companions: tuple[int, ...] = ()  # requests added after it, with a penalty: their max_tokens
    concurrency: int = 0  # max_num_seqs (0: every request at once)

    @property
    def chunked(self) -> bool:
        return self.prompt_tokens > self.budget

    @property
    def toggles(self) -> bool:
        """Whether steps may come without a row that needs output ids (the tracked request has no penalty)."""
        return not self.penalty

    def model_parameters(self) -> dict[str, int]:
        """The model bounds of a recording of this scenario (the header's ``LOCKSTEP_TRACE_PARAMETERS``)."""
        return {
            "max_tokens": self.max_tokens,
            "history_toggles": int(self.toggles),
            "preemptions": 1,
            "chunked_prefill": int(self.chunked),
        }

    def describe(self) -> str:
        chunks = -(-self.prompt_tokens // self.budget)
        penalty = "with" if self.penalty else "without"
        others = (
            f"; then {len(self.companions)} requests with a penalty ({', '.join(map(str, self.companions))} tokens), "
            f"{self.concurrency or 1 + len(self.companions)} at a time"
            if self.companions
            else ""
        )
        return (
            f"one request of {self.prompt_tokens} prompt tokens ({chunks} chunk{'s' if chunks > 1 else ''} at a "
            f"budget of {self.budget}) and {self.max_tokens} tokens {penalty} a repetition penalty{others}, "
            "async scheduling"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> PlaceholderScenario:
        return cls(**{**payload, "companions": tuple(payload.get("companions", ()))})


def scenario(name: str, seed: int = 0) -> PlaceholderScenario:
    """The scenario ``name`` with ``seed`` (see the module doc); ``UnknownScenario`` for another name."""
    if name == "penalties":
        return PlaceholderScenario(name, seed, prompt_tokens=6, max_tokens=4, budget=16)
    if name == "chunked-prefill":
        return PlaceholderScenario(name, seed, prompt_tokens=20, max_tokens=4, budget=8)
    if name == "history-toggle":
        return PlaceholderScenario(
            name, seed, prompt_tokens=6, max_tokens=8, budget=16, penalty=False, companions=(2, 3), concurrency=2
        )
    if name == "random":
        chooser = random.Random(seed)
        return PlaceholderScenario(
            name,
            seed,
            prompt_tokens=chooser.randint(1, 24),
            max_tokens=chooser.randint(1, 8),
            budget=chooser.randint(4, 16),
        )
    raise UnknownScenario(f"no async-placeholders scenario {name!r}; scenarios: {', '.join(SCENARIOS)}")


def engine_arguments(model_directory: Path, chosen: PlaceholderScenario) -> dict[str, Any]:
    """``EngineArgs`` keywords of the scenario's engine: ``scheduling``'s, with async scheduling asked for."""
    requests = 1 + len(chosen.companions)
    longest = max((chosen.max_tokens, *chosen.companions))
    shape = scheduling.SchedulingScenario(
        chosen.name, chosen.seed, requests, chosen.prompt_tokens, longest, chosen.budget, asynchronous=True
    )
    arguments = scheduling.engine_arguments(model_directory, shape)
    arguments["max_num_seqs"] = chosen.concurrency or requests
    return arguments


def drive(model_directory: Path, chosen: PlaceholderScenario, noted: Callable[[str], None]) -> Timeline:
    """Start the engine in this process, generate the requests (the tracked one first), shut it down; ``noted``
    hears each phase."""
    tracked: dict[str, Any] = {"max_tokens": chosen.max_tokens}
    if chosen.penalty:
        tracked["repetition_penalty"] = REPETITION_PENALTY
    sampling = [
        tracked,
        *({"max_tokens": tokens, "repetition_penalty": REPETITION_PENALTY} for tokens in chosen.companions),
    ]
    prompts = [scheduling.prompt(request, chosen.prompt_tokens) for request in range(len(sampling))]
    return scheduling.generate(engine_arguments(model_directory, chosen), prompts, sampling, noted)


__all__ = [
    "DEFAULT_SCENARIO",
    "REPETITION_PENALTY",
    "SCENARIOS",
    "PlaceholderScenario",
    "UnknownScenario",
    "drive",
    "engine_arguments",
    "scenario",
]
