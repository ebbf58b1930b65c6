"""Record async-placeholders traces from a real vLLM with async scheduling (no vLLM source edited).

The async-placeholders model (``lockstep.models.async_placeholders``) follows one request through the
scheduler (``Scheduler.schedule`` with ``AsyncScheduler._update_after_schedule``, ``update_from_output``) and
the last rank's V1 runner (``GPUModelRunner._update_states``, ``_sample`` →
``InputBatch.update_async_output_token_ids``, ``sample_tokens`` → ``_bookkeeping_sync`` →
``set_async_sampled_token_ids``). All of it runs on a CPU machine once async scheduling is kept on
(``lockstep.real_vllm.settings.keep_async_scheduling``: vLLM's CPU worker already turns CUDA streams and events
into no-ops). ``install_vllm()`` patches those functions in the process that calls it; the check runs the
engine core and its worker in one process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the ``uni`` executor), so the
scheduler (actor ``scheduler``) and the runner (actor ``runner``) are recorded by one process into two files,
ordered by message clocks: a scheduled step is sent to the runner (``step>runner``), its output back
(``output>scheduler``).

The tracked request is the first one the scheduler schedules (the workload adds it first). Every step the
engine schedules while that request is unfinished is a model step: ``schedule(kind, chunk, drafts, history)``
with ``kind`` RUN (the request is in ``num_scheduled_tokens``), PREEMPT (in ``preempted_req_ids``) or SKIP (an
empty output too: with async scheduling the scheduler leaves a request out while the step in flight surely
reaches ``max_tokens``, and the engine queues and executes the empty output); ``chunk`` is the request's
``is_prefill_chunk``; ``drafts`` 0 (no drafter on the CPU model); ``history`` is whether a scheduled request
needs output ids (a penalty: ``_make_sampling_metadata``), which the runner's ``sampled_token_ids_cpu``
(observed at ``bookkeeping``) confirms. Steps scheduled after the request finished are not model steps and
are not recorded, nor is their runner work or output. Per recorded step the runner writes ``update_states``
after ``_update_states``, ``sample`` after ``_sample`` and ``bookkeeping`` after ``sample_tokens``; an empty
step has no ``sample_tokens`` (``execute_model`` returns after ``_update_states``), so its ``sample`` and
``bookkeeping`` (which change nothing of the request but hand the step back) are written as
``execute_model`` returns.

Tokens are written as the model numbers them: the output token at position ``p`` is ``p`` when it is the id
the runner sampled for the request's ``p``-th output (the recorder keeps the ids ``sample_tokens`` returned),
-1 for a placeholder, the model's prompt token (``max_tokens``) for an id of the prompt; any other id stops
the recording with an error file (``Guarded``), never vLLM. Imports only the standard library,
``lockstep.record`` and the model's release table (vLLM lazily).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lockstep import record
from lockstep.instrumentation.vllm_guard import Guarded, wrap
from lockstep.instrumentation.vllm_releases import (
    check_patch_targets,
    find_target,
    variant_for_release,
)
from lockstep.spec.profile import RecorderProfile
from lockstep.traces import JSONValue

PROTOCOL = "async-placeholders"
RECORDER = "async-placeholders"  # the recorder's name in MissingPatchTarget messages and error files
PARAMETERS_ENVIRONMENT = "LOCKSTEP_TRACE_PARAMETERS"
SCHEDULER, RUNNER = "scheduler", "runner"
PLACEHOLDER = -1
TO_RUNNER, TO_SCHEDULER = f"step>{RUNNER}", f"output>{SCHEDULER}"

# What replay may assume of this recorder (``lockstep replay --profile vllm-async-placeholders``): every
# action is recorded; no drafts (no drafter on the CPU model), no KV connector (no KV-load failure), one
# stage (a batch queue of 2).
PROFILE = RecorderProfile(
    "vllm-async-placeholders", PROTOCOL, (), {"num_spec_tokens": 0, "kv_load_failures": 0, "batch_queue": 2}
)

# Every vLLM name the patch replaces or calls through: module, attribute path; checked before patching.
VLLM_TARGETS = (
    ("vllm.v1.core.sched.scheduler", "Scheduler.schedule"),
    ("vllm.v1.core.sched.scheduler", "Scheduler.update_from_output"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner.execute_model"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner._update_states"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner._sample"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner.sample_tokens"),
    ("vllm.v1.worker.gpu_input_batch", "InputBatch.set_async_sampled_token_ids"),
)


def check_targets() -> None:
    """Every patch target exists in the installed vLLM, else ``MissingPatchTarget`` naming the first missing."""
    check_patch_targets(VLLM_TARGETS, RECORDER)


def release_variant(version: str) -> str:
    """The async-placeholders variant vLLM ``version`` stands for; ``UnsupportedRelease`` for one the table lacks."""
    from lockstep.models.async_placeholders.model import PROTOCOL as MODEL

    return variant_for_release(MODEL, version)


def header_parameters(sizing: Mapping[str, int]) -> dict[str, Any]:
    """The header's parameters: the model's defaults, the run's sizes, and the profile's values."""
    values: dict[str, Any] = dict(sizing)
    values.update(PROFILE.values(values))
    return record.parameters(PROTOCOL, **values)


def _sizing() -> dict[str, int]:
    found = json.loads(os.environ.get(PARAMETERS_ENVIRONMENT) or "{}")
    if not isinstance(found, dict):
        raise ValueError(f"${PARAMETERS_ENVIRONMENT} must be a JSON object, got {found!r}")
    return {str(name): int(value) for name, value in found.items()}


def needs_output_ids(request: Any) -> bool:
    """Whether a scheduled request makes ``_make_sampling_metadata`` gather output ids (a penalty)."""
    parameters = request.sampling_params
    return parameters is not None and (
        parameters.repetition_penalty != 1.0
        or parameters.presence_penalty != 0.0
        or parameters.frequency_penalty != 0.0
        or bool(parameters.bad_words_token_ids)
    )


@dataclass
class Tracked:
    """The tracked request as both actors see it, and the steps recorded for it (in the engine's order)."""

    request_id: str | None = None
    request: Any = None  # the scheduler's Request
    finished: bool = False
    capacity: int = 0  # the header's max_tokens
    sampled: list[int] = field(default_factory=list)  # the ids sample_tokens returned, output by output
    prompt: frozenset[int] = frozenset()
    recorded: list[Any] = field(default_factory=list)  # SchedulerOutputs recorded and not yet processed
    running: Any = None  # the SchedulerOutput the runner handles (recorded), else None
    history_kept: bool = False  # the runner's sampled ids are registered (what a step without rows leaves)

    def is_recorded(self, scheduler_output: Any) -> bool:
        return any(entry is scheduler_output for entry in self.recorded)

    def tokens(self, ids: list[int]) -> list[JSONValue]:
        """``ids`` in the model's numbering (see the module doc), padded with -1 to ``capacity``."""
        if len(ids) > self.capacity:
            raise ValueError(
                f"request {self.request_id} holds {len(ids)} output ids; the header allows {self.capacity}"
            )
        numbered: list[JSONValue] = []
        for position, token in enumerate(ids):
            if token == PLACEHOLDER:
                numbered.append(PLACEHOLDER)
            elif position < len(self.sampled) and self.sampled[position] == token:
                numbered.append(position)
            elif token in self.sampled:
                numbered.append(self.sampled.index(token))
            elif token in self.prompt:
                numbered.append(self.capacity)
            else:
                raise ValueError(f"output id {token} at position {position} was neither sampled nor in the prompt")
        return numbered + [PLACEHOLDER] * (self.capacity - len(ids))


class SchedulerRecording(Guarded):
    """The scheduler's events: ``schedule`` and ``update_from_output``."""

    def __init__(self, tracked: Tracked) -> None:
        super().__init__(SCHEDULER, RECORDER)
        self.tracked = tracked

    def opened(self) -> record.TraceRecorder:
        if self.recorder is None:
            self.recorder = _open(self.actor, self.tracked)
        return self.recorder

    def observed(self) -> dict[str, JSONValue]:
        request = self.tracked.request
        return {
            "scheduler.outputs": int(request.num_output_tokens),
            "scheduler.placeholders": int(request.num_output_placeholders),
        }

    def scheduled(self, scheduler: Any, scheduler_output: Any) -> None:
        """``Scheduler.schedule`` returned ``scheduler_output``: a model step while the request is unfinished."""
        tracked = self.tracked
        if tracked.request_id is None:
            if not scheduler_output.scheduled_new_reqs:
                return
            tracked.request_id = scheduler_output.scheduled_new_reqs[0].req_id
            tracked.request = scheduler.requests[tracked.request_id]
            tracked.prompt = frozenset(int(token) for token in tracked.request.prompt_token_ids or ())
        if tracked.finished:
            return
        recorder = self.opened()
        request_id = tracked.request_id
        if request_id in scheduler_output.num_scheduled_tokens:
            kind, chunk = "RUN", bool(tracked.request.is_prefill_chunk)
        elif request_id in (getattr(scheduler_output, "preempted_req_ids", None) or ()):
            kind, chunk = "PREEMPT", False
        else:
            kind, chunk = "SKIP", False
        scheduled = [scheduler.requests.get(name) for name in scheduler_output.num_scheduled_tokens]
        history = any(needs_output_ids(request) for request in scheduled if request is not None)
        if kind != "RUN":  # no row: the runner's sampled ids stay as the last step set them
            history = tracked.history_kept
        tracked.recorded.append(scheduler_output)
        arguments: dict[str, JSONValue] = {"kind": kind, "chunk": chunk, "drafts": 0, "history": history}
        recorder.record("schedule", arguments, self.observed(), recorder.send(TO_RUNNER))

    def updated(self, scheduler_output: Any) -> None:
        """``Scheduler.update_from_output`` returned for ``scheduler_output``."""
        tracked = self.tracked
        if not tracked.is_recorded(scheduler_output):
            return
        tracked.recorded = [entry for entry in tracked.recorded if entry is not scheduler_output]
        recorder = self.opened()
        recorder.record("update_from_output", {}, self.observed(), recorder.receive(TO_SCHEDULER))
        tracked.finished = tracked.finished or bool(tracked.request.is_finished())


class RunnerRecording(Guarded):
    """The last rank's runner's events: ``update_states``, ``sample``, ``bookkeeping``."""

    def __init__(self, tracked: Tracked) -> None:
        super().__init__(RUNNER, RECORDER)
        self.tracked = tracked

    def opened(self) -> record.TraceRecorder:
        if self.recorder is None:
            self.recorder = _open(self.actor, self.tracked)
        return self.recorder

    def listed(self, runner: Any) -> dict[str, JSONValue]:
        state = runner.requests.get(self.tracked.request_id)
        ids = [] if state is None else [int(token) for token in state.output_token_ids]
        return {"runner.output_token_ids": self.tracked.tokens(ids), "runner.length": len(ids)}

    def updated(self, runner: Any, scheduler_output: Any) -> None:
        """``_update_states(scheduler_output)`` returned."""
        tracked = self.tracked
        tracked.running = scheduler_output if tracked.is_recorded(scheduler_output) else None
        if tracked.running is None:
            return
        recorder = self.opened()
        observed = self.listed(runner)
        observed["runner.in_batch"] = tracked.request_id in runner.input_batch.req_id_to_index
        recorder.record("update_states", {}, observed, recorder.receive(TO_RUNNER))

    def sampled(self, runner: Any) -> None:
        """``_sample`` returned (the repair of the trailing placeholders has run)."""
        if self.tracked.running is None:
            return
        self.opened().record("sample", {}, self.listed(runner), {})

    def booked(self, runner: Any, output: Any) -> None:
        """``sample_tokens`` returned ``output`` (A1, ``prev_req_id_to_index``, the sampled ids registered)."""
        tracked = self.tracked
        if tracked.running is None:
            return
        tracked.running = None
        previous = runner.input_batch.prev_req_id_to_index or {}
        row = previous.get(tracked.request_id)
        if row is not None:  # a sampled row (a non-final prefill chunk's row is discarded: not in the map)
            tracked.sampled.append(int(_sampled_ids(output)[row][0]))
        recorder = self.opened()
        observed = self.listed(runner)
        observed["runner.sampled_token_ids_cpu"] = runner.input_batch.sampled_token_ids_cpu is not None
        observed["runner.has_prev_row"] = row is not None
        tracked.history_kept = bool(observed["runner.sampled_token_ids_cpu"])
        recorder.record("bookkeeping", {"accepted": 0}, observed, recorder.send(TO_SCHEDULER))

    def empty_step(self, runner: Any) -> None:
        """``execute_model`` returned for a recorded step with nothing scheduled: no ``sample_tokens`` follows."""
        tracked = self.tracked
        if tracked.running is None:
            return
        tracked.running = None
        recorder = self.opened()
        recorder.record("sample", {}, self.listed(runner), {})
        observed = self.listed(runner)
        observed["runner.sampled_token_ids_cpu"] = runner.input_batch.sampled_token_ids_cpu is not None
        recorder.record("bookkeeping", {"accepted": 0}, observed, recorder.send(TO_SCHEDULER))


def _sampled_ids(output: Any) -> list[list[int]]:
    """The sampled ids of a ``sample_tokens`` result, one row per batch row (async: the CPU copy)."""
    tensor = getattr(output, "sampled_token_ids_cpu", None)
    if tensor is not None:
        return [[int(token) for token in row] for row in tensor.tolist()]
    return [[int(token) for token in row] for row in output.sampled_token_ids]


def _open(actor: str, tracked: Tracked) -> record.TraceRecorder:
    """This process's trace of ``actor`` (the installed release's variant, the run's sizes)."""
    import vllm  # type: ignore[import-not-found]

    parameters = header_parameters(_sizing())
    recorder = record.from_environment(
        actor, PROTOCOL, release_variant(str(vllm.__version__)), parameters, timestamps=True
    )
    if recorder is None:
        raise RuntimeError(f"${record.TRACE_DIRECTORY_ENVIRONMENT} is not set")
    tracked.capacity = int(parameters["max_tokens"])
    return recorder


_tracked = Tracked()
_scheduler: SchedulerRecording | None = None
_runner: RunnerRecording | None = None


def _scheduler_recording() -> SchedulerRecording | None:
    global _scheduler
    if _scheduler is None:
        if not record.recording_enabled():
            return None
        _scheduler = SchedulerRecording(_tracked)
    return _scheduler if _scheduler.active else None


def _runner_recording() -> RunnerRecording | None:
    global _runner
    if _runner is None:
        if not record.recording_enabled():
            return None
        _runner = RunnerRecording(_tracked)
    return _runner if _runner.active else None


def install_vllm() -> Callable[[], None]:
    """Patch the installed vLLM (targets checked first: ``MissingPatchTarget``); returns the undo."""
    check_targets()
    scheduler_class = find_target("vllm.v1.core.sched.scheduler", "Scheduler", recorder=RECORDER)
    runner_class = find_target("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", recorder=RECORDER)

    def schedule(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            scheduler_output = original(self, *args, **kwargs)
            recording = _scheduler_recording()
            if recording is not None:
                with recording.guard():
                    recording.scheduled(self, scheduler_output)
            return scheduler_output

        return wrapper

    def update_from_output(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, scheduler_output, *args, **kwargs)
            recording = _scheduler_recording()
            if recording is not None:
                with recording.guard():
                    recording.updated(scheduler_output)
            return result

        return wrapper

    def update_states(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, scheduler_output, *args, **kwargs)
            recording = _runner_recording()
            if recording is not None:
                with recording.guard():
                    recording.updated(self, scheduler_output)
            return result

        return wrapper

    def execute_model(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, scheduler_output, *args, **kwargs)
            recording = _runner_recording()
            if recording is not None and scheduler_output.total_num_scheduled_tokens == 0:
                with recording.guard():
                    recording.empty_step(self)
            return result

        return wrapper

    def sample(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, *args, **kwargs)
            recording = _runner_recording()
            if recording is not None:
                with recording.guard():
                    recording.sampled(self)
            return result

        return wrapper

    def sample_tokens(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, *args, **kwargs)
            recording = _runner_recording()
            if recording is not None:
                with recording.guard():
                    recording.booked(self, result)
            return result

        return wrapper

    undo = [
        wrap(scheduler_class, "schedule", schedule),
        wrap(scheduler_class, "update_from_output", update_from_output),
        wrap(runner_class, "_update_states", update_states),
        wrap(runner_class, "execute_model", execute_model),
        wrap(runner_class, "_sample", sample),
        wrap(runner_class, "sample_tokens", sample_tokens),
    ]

    def undo_all() -> None:
        for step in reversed(undo):
            step()

    return undo_all


__all__ = [
    "PROFILE",
    "VLLM_TARGETS",
    "Tracked",
    "check_targets",
    "header_parameters",
    "install_vllm",
    "needs_output_ids",
    "release_variant",
]
