"""Drive a real ``AsyncLLM`` through a dp-pause ``Scenario`` (runs in the driver process, vLLM imported).

``engine_arguments(model_directory)`` are the engine's settings: the tiny model (``config.json`` only,
``load_format="dummy"``, no tokenizer: prompts are token ids), ``data_parallel_size`` 2 with the ``uni``
executor (the worker in the engine-core process: ``settings.keep_uniprocess_executor``), eager mode,
float32 and a 32 MiB KV cache; async scheduling as the release runs it on the CPU (``ASYNC_ON_CPU``).
``run_scenario(engine, scenario)`` adds the requests, then in each of the
scenario's cycles pauses (``pause_generation(mode=..., clear_cache=False)``: the caches are not part of the
protocol), runs ``collective_rpc(all_reduce_over_data_parallel)``, resumes and adds that cycle's late
requests; a free scenario's ``steps`` are run in order instead (``run_steps``: adds, waits, aborts through
``AsyncLLM.abort``, pauses, collective_rpcs, resumes). It waits for every request
to finish and returns the ``Timeline`` of what the client saw, in order. Nothing here prints.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockstep.real_vllm.scenarios import RANKS, Scenario

KV_CACHE_BYTES = 32 << 20
# Releases whose CPU runner runs the async output path, kept on with async scheduling (settings.keep_async_scheduling);
# elsewhere the engine is asked for synchronous scheduling, as the release's CpuPlatform sets it (0.21.0's async
# output calls torch.cuda.current_stream(): the engine core dies at the first sample_tokens without a CUDA driver)
ASYNC_ON_CPU = ("0.32.0",)
PROMPT_LENGTH = 8
REQUEST_TIMEOUT = 300.0  # seconds a request may take to finish once everything is sent (a hang: the check's deadline)


def engine_arguments(model_directory: Path, seed: int = 0, synchronous: bool = False) -> dict[str, Any]:
    """``AsyncEngineArgs`` keywords of a check's engine (see the module doc); ``synchronous``: async scheduling off."""
    return {
        **({"async_scheduling": False} if synchronous else {}),
        "model": str(model_directory),
        "skip_tokenizer_init": True,
        "load_format": "dummy",
        "dtype": "float32",
        "max_model_len": 128,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 128,
        "enforce_eager": True,
        "data_parallel_size": RANKS,
        "distributed_executor_backend": "uni",
        "kv_cache_memory_bytes": KV_CACHE_BYTES,
        "seed": seed,
        "disable_log_stats": True,
    }


def all_reduce_over_data_parallel(worker: Any) -> int:
    """The RPC body: a SUM all-reduce of 1 over the workers of every DP rank (``get_dp_group``), the
    collective the model's ``collective_rpc`` spans; returns the sum (the number of ranks that joined)."""
    import torch
    from vllm.distributed.parallel_state import get_dp_group  # type: ignore[import-not-found]

    group = get_dp_group()
    total = torch.ones(1, dtype=torch.int64)
    torch.distributed.all_reduce(total, group=group.cpu_group)
    return int(total.item())


@dataclass
class Timeline:
    """What the client did and saw, in order: ``(seconds since the start, what)``, and each request's end."""

    started: float = field(default_factory=time.monotonic)
    entries: list[tuple[float, str]] = field(default_factory=list)
    finished: dict[str, str] = field(default_factory=dict)  # request id -> finish reason
    rpc_results: list[int] = field(default_factory=list)

    def note(self, what: str) -> None:
        self.entries.append((round(time.monotonic() - self.started, 3), what))

    def to_json(self) -> dict[str, Any]:
        return {
            "entries": [list(entry) for entry in self.entries],
            "finished": self.finished,
            "rpc_results": self.rpc_results,
        }


def prompt(index: int) -> list[int]:
    """The token ids of request ``index`` (distinct per request, no prefix shared)."""
    return [(index * PROMPT_LENGTH + position) % 1000 + 3 for position in range(PROMPT_LENGTH)]


async def run_scenario(engine: Any, scenario: Scenario, timeline: Timeline | None = None) -> Timeline:
    """Drive ``engine`` (an ``AsyncLLM`` with DP 2) through ``scenario``; the client's ``Timeline``."""
    from vllm import SamplingParams  # type: ignore[import-not-found]
    from vllm.inputs import TokensPrompt  # type: ignore[import-not-found]

    timeline = timeline or Timeline()
    if scenario.steps:
        return await run_steps(engine, scenario, timeline)
    parameters = SamplingParams(max_tokens=scenario.max_tokens, detokenize=False, ignore_eos=True)
    outputs: dict[str, Any] = {}

    async def add(index: int) -> None:
        request_id = f"request-{index}"
        outputs[request_id] = await engine.add_request(
            request_id,
            TokensPrompt(prompt_token_ids=prompt(index)),
            parameters,
            data_parallel_rank=scenario.ranks[index],
        )
        timeline.note(f"added {request_id} to rank {scenario.ranks[index]}")

    async def until_finished(request_id: str, first_only: bool = False) -> None:
        while True:
            output = await outputs[request_id].get()
            if output.finished:
                reason = output.outputs[0].finish_reason if output.outputs else None
                timeline.finished[request_id] = str(reason)
                timeline.note(f"{request_id} finished ({reason})")
                return
            if first_only:
                timeline.note(f"{request_id} has its first token")
                return

    for index in range(scenario.requests):
        await add(index)
    newest = "request-0" if scenario.requests else None  # the request whose first token a pause waits for
    for cycle in range(scenario.cycles):
        late = scenario.late_in_cycle(cycle)
        if scenario.pause_after_first_token and newest is not None and newest not in timeline.finished:
            await until_finished(newest, first_only=True)
        await step(timeline, "pause_generation", engine.pause_generation(mode=scenario.pause_mode, clear_cache=False))
        if scenario.late_phase == "paused":
            for index in late:
                await add(index)
        results = await step(timeline, "collective_rpc", engine.collective_rpc(all_reduce_over_data_parallel))
        timeline.rpc_results += [int(result) for result in results] if isinstance(results, list) else [int(results)]
        await step(timeline, "resume_generation", engine.resume_generation())
        if scenario.late_phase == "resumed":
            for index in late:
                await add(index)
        newest = f"request-{late[0]}" if late else newest
    waiting = [request_id for request_id in outputs if request_id not in timeline.finished]
    await asyncio.wait_for(asyncio.gather(*(until_finished(request_id) for request_id in waiting)), REQUEST_TIMEOUT)
    return timeline


async def run_steps(engine: Any, scenario: Scenario, timeline: Timeline) -> Timeline:
    """Run a free scenario's steps in order (``scenarios``' module doc): each request's outputs are drained
    by a task of its own, which counts its tokens, so a step may wait for a request's progress."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    tokens: dict[int, int] = {}
    finished: dict[int, asyncio.Event] = {}
    progressed = asyncio.Condition()
    drains: dict[int, asyncio.Task[None]] = {}  # each request's, until aborted

    async def drain(index: int, collector: Any) -> None:
        request_id = f"request-{index}"
        while True:
            output = await collector.get()
            count = len(output.outputs[0].token_ids) if output.outputs else 0
            async with progressed:
                tokens[index] = max(tokens.get(index, 0), count)
                if output.finished:
                    reason = output.outputs[0].finish_reason if output.outputs else None
                    timeline.finished[request_id] = str(reason)
                    timeline.note(f"{request_id} finished ({reason}, {count} tokens)")
                    finished[index].set()
                progressed.notify_all()
            if output.finished:
                return

    async def until(condition: Callable[[], bool]) -> None:
        async with progressed:
            await asyncio.wait_for(progressed.wait_for(condition), REQUEST_TIMEOUT)

    for kind, *values in scenario.steps:
        if kind == "add":
            index, rank, max_tokens = values
            parameters = SamplingParams(max_tokens=max_tokens, detokenize=False, ignore_eos=True)
            finished[index] = asyncio.Event()
            collector = await engine.add_request(
                f"request-{index}", TokensPrompt(prompt_token_ids=prompt(index)), parameters, data_parallel_rank=rank
            )
            timeline.note(f"added request-{index} ({max_tokens} tokens) to rank {rank}")
            drains[index] = asyncio.create_task(drain(index, collector))
        elif kind == "tokens":
            index, count = values

            def reached(index: int = index, count: int = count) -> bool:
                return tokens.get(index, 0) >= count or finished[index].is_set()

            await until(reached)
            timeline.note(f"request-{index} has {tokens.get(index, 0)} tokens")
        elif kind == "finished":
            await until(finished[values[0]].is_set)
        elif kind == "abort":  # AsyncLLM.abort; the request's drain ends when its final output comes, or now
            index = values[0]
            await step(timeline, f"abort(request-{index})", engine.abort(f"request-{index}"))
            if not finished[index].is_set():
                drains.pop(index).cancel()
                timeline.finished.setdefault(f"request-{index}", "abort")
        elif kind == "pause":
            await step(
                timeline, f"pause_generation({values[0]})", engine.pause_generation(mode=values[0], clear_cache=False)
            )
        elif kind == "rpc":
            results = await step(timeline, "collective_rpc", engine.collective_rpc(all_reduce_over_data_parallel))
            timeline.rpc_results += [int(result) for result in results] if isinstance(results, list) else [int(results)]
        elif kind == "resume":
            await step(timeline, "resume_generation", engine.resume_generation())
    await asyncio.wait_for(asyncio.gather(*drains.values()), REQUEST_TIMEOUT)
    return timeline


async def step(timeline: Timeline, name: str, call: Any) -> Any:
    """Await one client call, noting when it began and returned."""
    timeline.note(f"{name} called")
    result = await call
    timeline.note(f"{name} returned")
    return result


def start_engine(model_directory: Path, seed: int) -> Any:
    """An ``AsyncLLM`` on the tiny model with DP 2 (``engine_arguments``)."""
    import vllm
    from vllm.engine.arg_utils import AsyncEngineArgs  # type: ignore[import-not-found]
    from vllm.v1.engine.async_llm import AsyncLLM  # type: ignore[import-not-found]

    from lockstep.instrumentation.vllm_releases import release_number

    synchronous = release_number(str(vllm.__version__)) not in ASYNC_ON_CPU
    return AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_arguments(model_directory, seed, synchronous)))


async def drive(model_directory: Path, scenario: Scenario, noted: Callable[[str], None]) -> Timeline:
    """Start the engine, run ``scenario`` on it, shut it down; ``noted`` hears each phase as it begins."""
    timeline = Timeline()
    noted("starting the engines")
    engine = start_engine(model_directory, scenario.seed)
    timeline.note("engines ready")
    try:
        noted("running the scenario")
        await run_scenario(engine, scenario, timeline)
    finally:
        noted("shutting the engines down")
        engine.shutdown()
    timeline.note("engines shut down")
    return timeline


__all__ = [
    "KV_CACHE_BYTES",
    "Timeline",
    "all_reduce_over_data_parallel",
    "drive",
    "engine_arguments",
    "prompt",
    "run_scenario",
    "run_steps",
    "start_engine",
]
