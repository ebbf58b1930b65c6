"""The pp-broadcast check's workloads and engine: one long prompt through a real vLLM with PP=2 on the CPU.

A ``PipelineScenario`` is one request whose prompt is longer than the token budget
(``max_num_batched_tokens``, ``BUDGET``), so the scheduler splits it into chunks and the first steps hold
nothing but non-final prefill chunks (the all-chunked steps whose sampled-token broadcast v0.20.0 skips),
then ``max_tokens`` tokens: the final chunk samples the first, each decode one more. In the model's terms
(``lockstep.models.pp_broadcast``) that is request 0 with ``chunks`` chunks and ``decodes`` =
``max_tokens - 1``.

- ``long-prompt`` (the default): 300 prompt tokens (3 chunks: two all-chunked steps) and 3 tokens.
- ``random``: ``seed`` draws the prompt length (129-512 tokens: 2-4 chunks) and 1-4 tokens.

With ``asynchronous`` (the releases in ``ASYNC_WITH_STUBBED_STREAMS``: 0.21.0, whose only switch-off of async
scheduling on the CPU is the platform hook that ``settings.keep_async_scheduling`` undoes) the engine is asked
for async scheduling and every vLLM process stubs CUDA streams and events (``settings.stub_cuda_streams``,
through ``settings.STUB_STREAMS_ENVIRONMENT``): the V1 runner's ``sample_tokens`` then broadcasts the
sampled token ids from the last stage and receives them on the first (``_pp_broadcast_prev_sampled_token_ids``
/ ``_pp_receive_prev_sampled_token_ids_to_input_batch``), skipping both on all-chunked steps. Without it
(0.32.0, whose config refuses async scheduling with PP on the V1 runner) the run is synchronous.

``engine_arguments`` are the engine's settings: the tiny dense model (``config.json`` only,
``load_format="dummy"``, no tokenizer: the prompt is token ids), ``pipeline_parallel_size`` 2 with the
``mp`` executor (a worker process per stage), compilation mode 2 with the ``eager`` backend (with
``enforce_eager`` the CPU worker skips the warm-up that allocates the non-first stage's intermediate
tensors), float32 and a 32 MiB KV cache. ``drive`` starts an ``LLM`` (the engine core in a process of its
own), generates, and shuts it down; it returns the ``Timeline`` of what the client saw. Nothing here prints;
vLLM is imported only inside ``drive``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lockstep.real_vllm.workload import KV_CACHE_BYTES, Timeline

SCENARIOS = ("long-prompt", "random")
DEFAULT_SCENARIO = "long-prompt"
STAGES = 2  # pipeline_parallel_size of every scenario
BUDGET = 128  # max_num_batched_tokens: a prompt longer than this is chunked
MAX_MODEL_LENGTH = 512  # the tiny model's max_position_embeddings
MODEL_NAME = "dense"  # lockstep/real_vllm/models/dense/config.json
ASYNC_WITH_STUBBED_STREAMS = ("0.21.0",)  # releases run with async scheduling and stubbed CUDA streams


class UnknownScenario(ValueError):
    """A pp-broadcast scenario name ``scenario`` does not know (the message names the known ones)."""


@dataclass(frozen=True)
class PipelineScenario:
    """One pp-broadcast workload (see the module doc)."""

    name: str
    seed: int
    prompt_tokens: int
    max_tokens: int
    asynchronous: bool = False  # async scheduling kept on, CUDA streams stubbed (see the module doc)

    @property
    def chunks(self) -> int:
        """The prefill chunks of the prompt at the token budget."""
        return -(-self.prompt_tokens // BUDGET)

    def model_parameters(self) -> dict[str, int]:
        """The model bounds of a recording of this scenario (the header's ``LOCKSTEP_TRACE_PARAMETERS``)."""
        sizing = {"requests": 1, "chunks": self.chunks, "decodes": self.max_tokens - 1}
        return {**sizing, "async_scheduling": 1} if self.asynchronous else sizing

    def describe(self) -> str:
        scheduling = ", async scheduling (CUDA streams stubbed)" if self.asynchronous else ""
        return (
            f"one request of {self.prompt_tokens} prompt tokens ({self.chunks} chunks of at most {BUDGET}: "
            f"{self.chunks - 1} all-chunked steps) and {self.max_tokens} tokens, PP={STAGES}{scheduling}"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> PipelineScenario:
        return cls(**payload)


def scenario(name: str, seed: int = 0, asynchronous: bool = False) -> PipelineScenario:
    """The scenario ``name`` with ``seed`` (see the module doc); ``UnknownScenario`` for another name."""
    if name == "long-prompt":
        return PipelineScenario(name, seed, prompt_tokens=300, max_tokens=3, asynchronous=asynchronous)
    if name == "random":
        chooser = random.Random(seed)
        return PipelineScenario(
            name,
            seed,
            prompt_tokens=chooser.randint(BUDGET + 1, 4 * BUDGET - 4),
            max_tokens=chooser.randint(1, 4),
            asynchronous=asynchronous,
        )
    raise UnknownScenario(f"no pp-broadcast scenario {name!r}; scenarios: {', '.join(SCENARIOS)}")


def engine_arguments(model_directory: Path, seed: int = 0, asynchronous: bool = False) -> dict[str, Any]:
    """``EngineArgs`` keywords of a pp-broadcast check's engine (see the module doc)."""
    return {
        **({"async_scheduling": True} if asynchronous else {}),
        "model": str(model_directory),
        "skip_tokenizer_init": True,
        "load_format": "dummy",
        "dtype": "float32",
        "max_model_len": MAX_MODEL_LENGTH,
        "max_num_seqs": 8,
        "max_num_batched_tokens": BUDGET,
        "enforce_eager": False,
        "compilation_config": {"mode": 2, "backend": "eager"},
        "pipeline_parallel_size": STAGES,
        "distributed_executor_backend": "mp",
        "kv_cache_memory_bytes": KV_CACHE_BYTES,
        "seed": seed,
        "disable_log_stats": True,
    }


def prompt(length: int) -> list[int]:
    """The prompt's token ids (within the tiny model's vocabulary, none special)."""
    return [position % 1000 + 3 for position in range(length)]


def drive(model_directory: Path, chosen: PipelineScenario, noted: Callable[[str], None]) -> Timeline:
    """Start the engine, generate ``chosen``'s request, shut the engine down; ``noted`` hears each phase."""
    from vllm import LLM, SamplingParams  # type: ignore[import-not-found]
    from vllm.inputs import TokensPrompt  # type: ignore[import-not-found]

    from lockstep.real_vllm.settings import STUB_STREAMS_ENVIRONMENT

    timeline = Timeline()
    if chosen.asynchronous:  # every process vLLM spawns from here on stubs the streams (settings.apply_in_process)
        os.environ[STUB_STREAMS_ENVIRONMENT] = "1"
    noted("starting the engine")
    engine = LLM(**engine_arguments(model_directory, chosen.seed, chosen.asynchronous))
    timeline.note("engine ready")
    try:
        noted("running the scenario")
        parameters = SamplingParams(max_tokens=chosen.max_tokens, detokenize=False, ignore_eos=True)
        timeline.note("generate called")
        outputs = engine.generate([TokensPrompt(prompt_token_ids=prompt(chosen.prompt_tokens))], parameters)
        for output in outputs:
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
    "ASYNC_WITH_STUBBED_STREAMS",
    "BUDGET",
    "DEFAULT_SCENARIO",
    "SCENARIOS",
    "STAGES",
    "PipelineScenario",
    "UnknownScenario",
    "drive",
    "engine_arguments",
    "prompt",
    "scenario",
]
