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

SCENARIOS = ("penalties", "chunked-prefill", "random")
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

    @property
    def chunked(self) -> bool:
        return self.prompt_tokens > self.budget

    def model_parameters(self) -> dict[str, int]:
        """The model bounds of a recording of this scenario (the header's ``LOCKSTEP_TRACE_PARAMETERS``)."""
        return {
            "max_tokens": self.max_tokens,
            "history_toggles": 0,
            "preemptions": 1,
            "chunked_prefill": int(self.chunked),
        }

    def describe(self) -> str:
        chunks = -(-self.prompt_tokens // self.budget)
        return (
            f"one request of {self.prompt_tokens} prompt tokens ({chunks} chunk{'s' if chunks > 1 else ''} at a "
            f"budget of {self.budget}) and {self.max_tokens} tokens with a repetition penalty, async scheduling"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> PlaceholderScenario:
        return cls(**payload)


def scenario(name: str, seed: int = 0) -> PlaceholderScenario:
    """The scenario ``name`` with ``seed`` (see the module doc); ``UnknownScenario`` for another name."""
    if name == "penalties":
        return PlaceholderScenario(name, seed, prompt_tokens=6, max_tokens=4, budget=16)
    if name == "chunked-prefill":
        return PlaceholderScenario(name, seed, prompt_tokens=20, max_tokens=4, budget=8)
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
    shape = scheduling.SchedulingScenario(
        chosen.name, chosen.seed, 1, chosen.prompt_tokens, chosen.max_tokens, chosen.budget, asynchronous=True
    )
    return scheduling.engine_arguments(model_directory, shape)


def drive(model_directory: Path, chosen: PlaceholderScenario, noted: Callable[[str], None]) -> Timeline:
    """Start the engine in this process, generate the request, shut it down; ``noted`` hears each phase."""
    sampling = {"max_tokens": chosen.max_tokens, "repetition_penalty": REPETITION_PENALTY}
    prompts = [scheduling.prompt(0, chosen.prompt_tokens)]
    return scheduling.generate(engine_arguments(model_directory, chosen), prompts, [sampling], noted)


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
