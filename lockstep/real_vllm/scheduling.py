"""The computed-tokens check's workloads and engine: a few short prompts through one real vLLM engine on the CPU.

A ``SchedulingScenario`` is ``requests`` prompts of ``prompt_tokens`` tokens each (every prompt different,
prefix caching off: nothing is computed at admission), all added before the engine's first step, each
generating ``max_tokens`` tokens, under a token budget (``max_num_batched_tokens``) of ``budget``: a prompt
longer than what is left of the budget is a **chunked prefill**, and a request admitted beside another is
given what the other left. ``asynchronous`` keeps async scheduling on (``AsyncScheduler`` with the engine's
batch queue of 2), which ``CpuPlatform.check_and_update_config`` turns off (``settings`` restores what the
engine arguments asked for); off, the engine runs ``EngineCore.step``. In the model's terms
(``lockstep.models.computed_tokens``) that is ``requests`` requests of ``prefill_len`` = ``prompt_tokens``,
``budget``, ``max_tokens``, ``max_model_len`` and ``async_scheduling``, with one stage and no drafts.

- ``chunked-prefill`` (the default): 2 requests of 5 prompt tokens, 3 tokens each, budget 3, synchronous
  (the CPU's own setting): request 0's prompt in chunks of 3 and 2, request 1 admitted with the 1 token left.
- ``async-chunked-prefill``: the same with async scheduling kept on.
- ``random``: ``seed`` draws 1-3 requests, 1-8 prompt tokens, 1-8 tokens, a budget from the requests to 8 and
  either scheduling.

``engine_arguments`` are the engine's settings: the tiny dense model (``config.json`` only,
``load_format="dummy"``, no tokenizer: prompts are token ids), float32, eager, a 32 MiB KV cache (no
preemption at these sizes), the ``uni`` executor and the engine core in the driver's own process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set by ``drive``): one process records the scheduler. ``drive`` starts
an ``LLM``, generates, and shuts it down; it returns the ``Timeline`` of what the client saw. Nothing here
prints; vLLM is imported only inside ``generate`` (which ``drive`` and the async-placeholders workloads,
``placeholders``, call).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lockstep.real_vllm.workload import KV_CACHE_BYTES, Timeline

SCENARIOS = ("chunked-prefill", "async-chunked-prefill", "random")
DEFAULT_SCENARIO = "chunked-prefill"
MODEL_NAME = "dense"  # lockstep/real_vllm/models/dense/config.json
MULTIPROCESSING_ENVIRONMENT = "VLLM_ENABLE_V1_MULTIPROCESSING"


class UnknownScenario(ValueError):
    """A computed-tokens scenario name ``scenario`` does not know (the message names the known ones)."""


@dataclass(frozen=True)
class SchedulingScenario:
    """One computed-tokens workload (see the module doc)."""

    name: str
    seed: int
    requests: int
    prompt_tokens: int
    max_tokens: int
    budget: int
    asynchronous: bool

    @property
    def max_model_length(self) -> int:
        """``max_model_len``: the prompt, the tokens and one more (the model's default, without drafts)."""
        return self.prompt_tokens + self.max_tokens + 1

    def model_parameters(self) -> dict[str, int]:
        """The model bounds of a recording of this scenario (the header's ``LOCKSTEP_TRACE_PARAMETERS``)."""
        return {
            "requests": self.requests,
            "prefill_len": self.prompt_tokens,
            "budget": self.budget,
            "max_tokens": self.max_tokens,
            "max_model_len": self.max_model_length,
            "async_scheduling": int(self.asynchronous),
        }

    def describe(self) -> str:
        scheduling = "async scheduling" if self.asynchronous else "synchronous scheduling"
        return (
            f"{self.requests} requests of {self.prompt_tokens} prompt tokens and {self.max_tokens} tokens, "
            f"token budget {self.budget}, {scheduling}"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> SchedulingScenario:
        return cls(**payload)


def scenario(name: str, seed: int = 0) -> SchedulingScenario:
    """The scenario ``name`` with ``seed`` (see the module doc); ``UnknownScenario`` for another name."""
    if name in ("chunked-prefill", "async-chunked-prefill"):
        return SchedulingScenario(name, seed, 2, 5, 3, 3, name.startswith("async"))
    if name == "random":
        chooser = random.Random(seed)
        requests = chooser.randint(1, 3)
        return SchedulingScenario(
            name,
            seed,
            requests=requests,
            prompt_tokens=chooser.randint(1, 8),
            max_tokens=chooser.randint(1, 8),
            budget=chooser.randint(requests, 8),
            asynchronous=chooser.random() < 0.5,
        )
    raise UnknownScenario(f"no computed-tokens scenario {name!r}; scenarios: {', '.join(SCENARIOS)}")


def engine_arguments(model_directory: Path, chosen: SchedulingScenario) -> dict[str, Any]:
    """``EngineArgs`` keywords of the scenario's engine (see the module doc)."""
    return {
        "model": str(model_directory),
        "skip_tokenizer_init": True,
        "load_format": "dummy",
        "dtype": "float32",
        "max_model_len": chosen.max_model_length,
        "max_num_seqs": chosen.requests,
        "max_num_batched_tokens": chosen.budget,
        "enable_prefix_caching": False,
        "async_scheduling": chosen.asynchronous,
        "enforce_eager": True,
        "distributed_executor_backend": "uni",
        "kv_cache_memory_bytes": KV_CACHE_BYTES,
        "seed": chosen.seed,
        "disable_log_stats": True,
    }


def prompt(request: int, length: int) -> list[int]:
    """Request ``request``'s prompt: token ids within the tiny model's vocabulary, none shared between requests."""
    return [(request * 101 + position * 7) % 1000 + 3 for position in range(length)]


def drive(model_directory: Path, chosen: SchedulingScenario, noted: Callable[[str], None]) -> Timeline:
    """Start the engine in this process, generate ``chosen``'s requests, shut it down; ``noted`` hears each phase."""
    prompts = [prompt(request, chosen.prompt_tokens) for request in range(chosen.requests)]
    sampling = [{"max_tokens": chosen.max_tokens}] * chosen.requests
    return generate(engine_arguments(model_directory, chosen), prompts, sampling, noted)


def generate(
    arguments: dict[str, Any], prompts: list[list[int]], sampling: list[dict[str, Any]], noted: Callable[[str], None]
) -> Timeline:
    """Start an ``LLM`` with ``arguments`` in this process (the engine core in it too), generate each prompt with
    its ``SamplingParams`` keywords (no detokenizing, EOS ignored), shut it down; ``noted`` hears each phase."""
    os.environ[MULTIPROCESSING_ENVIRONMENT] = "0"
    from vllm import LLM, SamplingParams  # type: ignore[import-not-found]
    from vllm.inputs import TokensPrompt  # type: ignore[import-not-found]

    timeline = Timeline()
    noted("starting the engine")
    engine = LLM(**arguments)
    timeline.note("engine ready")
    try:
        noted("running the scenario")
        parameters = [SamplingParams(detokenize=False, ignore_eos=True, **keywords) for keywords in sampling]
        timeline.note("generate called")
        for output in engine.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompts], parameters):
            completion = output.outputs[0]
            timeline.finished[str(output.request_id)] = str(completion.finish_reason)
            timeline.note(
                f"request {output.request_id} finished ({completion.finish_reason}, {len(completion.token_ids)} tokens)"
            )
    finally:
        noted("shutting the engine down")
        shutdown = getattr(engine.llm_engine, "shutdown", None)
        if callable(shutdown):
            shutdown()
    timeline.note("engine shut down")
    return timeline


__all__ = [
    "DEFAULT_SCENARIO",
    "SCENARIOS",
    "SchedulingScenario",
    "UnknownScenario",
    "drive",
    "engine_arguments",
    "generate",
    "prompt",
    "scenario",
]
