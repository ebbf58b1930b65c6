"""Record computed-tokens traces from a real vLLM's scheduler (no vLLM source edited).

The computed-tokens model (``lockstep.models.computed_tokens``) has two halves: the scheduler's
``num_computed_tokens`` (``Scheduler.schedule`` → ``_update_after_schedule``, ``update_from_output``; the
engine core's ``step`` or ``step_with_batch_queue``) and the V2 model runner's CPU mirror of it
(``vllm/v1/worker/gpu/model_runner.py``). On a CPU machine only the first half runs: the V2 runner needs
Triton, whose PyPI build has no CPU backend (``VllmConfig.use_v2_model_runner`` then picks the V1 runner), so
the runner's actions (``execute_model``, ``sample_tokens``, ``pp_receive``: actor ``rank:*``) are the
profile's unrecorded actions, and replay fills them in.

``install_vllm()`` patches, in the process that calls it (the engine core), ``Scheduler.schedule`` and
``Scheduler.update_from_output`` (``AsyncScheduler`` inherits both), after every patch target was checked
(``MissingPatchTarget`` names a missing one). Recording happens only while ``LOCKSTEP_TRACE_DIR`` is set;
``LOCKSTEP_TRACE_PARAMETERS`` (JSON) gives the model bounds of the run (``requests``, ``prefill_len``,
``budget``, ``max_tokens``, ``max_model_len``, ``async_scheduling``); the header's variant is the installed
release's (``PROTOCOL.release_variant``). One actor, ``scheduler``, writes ``scheduler.jsonl``:

- ``schedule``: after ``Scheduler.schedule`` returns an output with scheduled tokens
  (``_update_after_schedule`` has advanced ``num_computed_tokens``); an empty output (nothing scheduled: a
  step that only carries ``finished_req_ids``, or every request's token in flight) is no model step and is
  not written, nor is the ``update_from_output`` of it.
- ``update_from_output``: after ``Scheduler.update_from_output`` returns.

Each event observes, per model request, ``scheduler.status`` (WAITING until first scheduled, RUNNING, then
FINISHED), ``scheduler.num_computed_tokens``, ``scheduler.num_output_tokens``,
``scheduler.num_output_placeholders``, ``scheduler.spec_token_ids`` (its length) and
``scheduler.is_prefill_chunk``. Requests are numbered in the order the scheduler first schedules them (the
model admits waiting requests in index order, and every prompt has ``prefill_len`` tokens); the recorder keeps
each ``Request`` object, so a finished request (freed by the scheduler) keeps its last values. A request that
is preempted (status PREEMPTED: the model has no preemption) or whose count exceeds the header's bounds stops
the recording with an error file (``Guarded``), never vLLM. Imports only the standard library,
``lockstep.record`` and the model's release table (vLLM lazily).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
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

PROTOCOL = "computed-tokens"
RECORDER = "computed-tokens"  # the recorder's name in MissingPatchTarget messages and error files
PARAMETERS_ENVIRONMENT = "LOCKSTEP_TRACE_PARAMETERS"
SCHEDULER = "scheduler"
UNRECORDED = ("rank:*",)  # the V2 runner's actions: the V2 runner does not run on the CPU

# What replay may assume of this recorder (``lockstep replay --profile vllm-computed-tokens``): the runner's
# actions are left out; one pipeline stage, no drafts (no MTP drafter on the CPU model), no CUDA-graph padding;
# synchronous scheduling (the CPU's setting) or, with ``vllm-computed-tokens-async``, async scheduling kept on.
_RECORDED = {"ranks": 1, "drafts": 0, "padded_rows": 0}
PROFILE = RecorderProfile("vllm-computed-tokens", PROTOCOL, UNRECORDED, {**_RECORDED, "async_scheduling": 0})
ASYNC_PROFILE = RecorderProfile(
    "vllm-computed-tokens-async", PROTOCOL, UNRECORDED, {**_RECORDED, "async_scheduling": 1}
)


def profile_of(asynchronous: bool) -> RecorderProfile:
    """The profile of a run with async scheduling on or off."""
    return ASYNC_PROFILE if asynchronous else PROFILE


# Every vLLM name the patch replaces or calls through: module, attribute path; checked before patching.
VLLM_TARGETS = (
    ("vllm.v1.core.sched.scheduler", "Scheduler.schedule"),
    ("vllm.v1.core.sched.scheduler", "Scheduler.update_from_output"),
    ("vllm.v1.request", "RequestStatus"),
)


def check_targets() -> None:
    """Every patch target exists in the installed vLLM, else ``MissingPatchTarget`` naming the first missing."""
    check_patch_targets(VLLM_TARGETS, RECORDER)


def release_variant(version: str) -> str:
    """The computed-tokens variant vLLM ``version`` stands for; ``UnsupportedRelease`` for one the table lacks."""
    from lockstep.models.computed_tokens.model import PROTOCOL as MODEL

    return variant_for_release(MODEL, version)


def header_parameters(sizing: Mapping[str, int]) -> dict[str, Any]:
    """The header's parameters: the model's defaults, the run's sizes, and the profile's values."""
    values: dict[str, Any] = dict(sizing)
    values.update(profile_of(bool(values.get("async_scheduling", 0))).values(values))
    return record.parameters(PROTOCOL, **values)


def _sizing() -> dict[str, int]:
    found = json.loads(os.environ.get(PARAMETERS_ENVIRONMENT) or "{}")
    if not isinstance(found, dict):
        raise ValueError(f"${PARAMETERS_ENVIRONMENT} must be a JSON object, got {found!r}")
    return {str(name): int(value) for name, value in found.items()}


class SchedulerRecording(Guarded):
    """The scheduler's events: ``schedule`` and ``update_from_output``."""

    def __init__(self) -> None:
        super().__init__(SCHEDULER, RECORDER)
        self.requests: list[Any] = []  # vLLM's Request objects, in the order first scheduled
        self.known: set[str] = set()
        self.count = 0  # the model's number of requests (the header's)

    def opened(self) -> record.TraceRecorder:
        if self.recorder is None:
            import vllm  # type: ignore[import-not-found]

            parameters = header_parameters(_sizing())
            recorder = record.from_environment(
                self.actor, PROTOCOL, release_variant(str(vllm.__version__)), parameters, timestamps=True
            )
            if recorder is None:
                raise RuntimeError(f"${record.TRACE_DIRECTORY_ENVIRONMENT} is not set")
            self.recorder, self.count = recorder, int(parameters["requests"])
        return self.recorder

    def learn(self, scheduler: Any, scheduler_output: Any) -> None:
        for new in scheduler_output.scheduled_new_reqs:
            if new.req_id not in self.known:
                self.known.add(new.req_id)
                self.requests.append(scheduler.requests[new.req_id])
        if len(self.requests) > self.count:
            raise ValueError(f"the run scheduled {len(self.requests)} requests; the header says {self.count}")

    def observed(self) -> dict[str, JSONValue]:
        """Per model request (a request not yet scheduled is WAITING with nothing computed)."""
        waiting = self.count - len(self.requests)
        status: list[JSONValue] = [_status(request) for request in self.requests]
        status += ["WAITING"] * waiting
        return {
            "scheduler.status": status,
            "scheduler.num_computed_tokens": [int(r.num_computed_tokens) for r in self.requests] + [0] * waiting,
            "scheduler.num_output_tokens": [int(r.num_output_tokens) for r in self.requests] + [0] * waiting,
            "scheduler.num_output_placeholders": [int(r.num_output_placeholders) for r in self.requests]
            + [0] * waiting,
            "scheduler.spec_token_ids": [len(r.spec_token_ids) for r in self.requests] + [0] * waiting,
            "scheduler.is_prefill_chunk": [bool(r.is_prefill_chunk) for r in self.requests] + [False] * waiting,
        }

    def scheduled(self, scheduler: Any, scheduler_output: Any) -> None:
        """``Scheduler.schedule`` returned ``scheduler_output`` (not empty)."""
        recorder = self.opened()
        self.learn(scheduler, scheduler_output)
        recorder.record("schedule", {}, self.observed(), {})

    def updated(self) -> None:
        """``Scheduler.update_from_output`` returned (for a step with scheduled tokens)."""
        self.opened().record("update_from_output", {}, self.observed(), {})


def _status(request: Any) -> str:
    """The model's ``Status`` of a vLLM request (PREEMPTED and the other waiting states: not modelled)."""
    name = str(getattr(request.status, "name", request.status))
    if name == "RUNNING":
        return "RUNNING"
    if name.startswith("FINISHED"):
        return "FINISHED"
    if name == "WAITING":
        return "WAITING"
    raise ValueError(f"request {request.request_id} is {name}: the computed-tokens model has no such state")


_scheduler: SchedulerRecording | None = None


def _recording() -> SchedulerRecording | None:
    """This process's scheduler recording while it is active (created at the first schedule)."""
    global _scheduler
    if _scheduler is None:
        if not record.recording_enabled():
            return None
        _scheduler = SchedulerRecording()
    return _scheduler if _scheduler.active else None


def install_vllm() -> Callable[[], None]:
    """Patch the installed vLLM (targets checked first: ``MissingPatchTarget``); returns the undo."""
    check_targets()
    scheduler_class = find_target("vllm.v1.core.sched.scheduler", "Scheduler", recorder=RECORDER)

    def schedule(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            scheduler_output = original(self, *args, **kwargs)
            recording = _recording()
            if recording is not None and scheduler_output.total_num_scheduled_tokens > 0:
                with recording.guard():
                    recording.scheduled(self, scheduler_output)
            return scheduler_output

        return wrapper

    def update_from_output(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, scheduler_output, *args, **kwargs)
            recording = _recording()
            if recording is not None and scheduler_output.total_num_scheduled_tokens > 0:
                with recording.guard():
                    recording.updated()
            return result

        return wrapper

    undo = [
        wrap(scheduler_class, "schedule", schedule),
        wrap(scheduler_class, "update_from_output", update_from_output),
    ]

    def undo_all() -> None:
        for step in reversed(undo):
            step()

    return undo_all


__all__ = [
    "ASYNC_PROFILE",
    "PROFILE",
    "UNRECORDED",
    "VLLM_TARGETS",
    "check_targets",
    "header_parameters",
    "install_vllm",
    "profile_of",
    "release_variant",
]
