"""Record pp-broadcast traces from a real vLLM's V1 model runner with pipeline parallelism (no vLLM source edited).

``install_vllm()`` patches vLLM's own classes in the process that calls it (the driver calls it in every
process vLLM spawns: the engine core and each PP worker) so that they write the pp-broadcast model's
events: the engine (actor ``engine``, the engine-core process) and each pipeline stage (actor ``rank:<pp
rank>``, its worker process). Every patch target is checked first (``check_targets``: a missing one is
refused with ``MissingPatchTarget`` naming it). Recording happens only while ``LOCKSTEP_TRACE_DIR`` is set;
``LOCKSTEP_TRACE_PARAMETERS`` (JSON) gives the model bounds vLLM cannot know (``chunks``, ``decodes``,
``requests``, ``empty_steps``); the header's variant is the installed release's
(``PROTOCOL.release_variant``). Imports only the standard library, ``lockstep.record`` and the model's
release table (vLLM lazily).

**A recorder failure never reaches vLLM.** Every recording step runs guarded: the first error (an observed
value beyond the model's bounds, an attribute a release renamed, a full disk) writes ``<actor>.error.json``
beside the trace (``record.write_failure``), stops this process's recording and lets vLLM run on; the
patched function always runs vLLM's own code with its own result or exception. ``lockstep vllm check``
reports the file.

Where each event is written:

- ``schedule`` / ``schedule_empty`` (engine): as ``MultiprocExecutor.execute_model`` is called
  (``EngineCore.step_with_batch_queue`` calls it right after ``Scheduler.schedule``), before the RPC leaves:
  the step's row of ``scheduler.steps`` (a request's pieces so far: the number of steps it was scheduled
  in, so a prefill chunk or a decode is one piece, as in the model), ``scheduler.num_computed_tokens`` in
  pieces, ``engine.scheduled``; clocks ``send:exec>rank:r`` and, for a step with scheduled tokens, the
  ``sample_tokens`` RPC that ``step_with_batch_queue`` sends next (``send:sample>rank:r``). A step with no
  scheduled tokens gets no ``sample_tokens`` (``model_executed`` is False). ``leave_out`` is -1: with
  synchronous scheduling a request missing from a step waits for its last token, which the model's
  ``schedule`` allows itself (``may_schedule``); a request the token budget left out would diverge.
- ``process_output`` (engine): as ``Scheduler.update_from_output`` starts (the output rank's reply is in).
- ``execute_model`` / ``execute_model_empty`` (each rank): after ``Worker.execute_model`` returns
  (``_update_states`` has run: a non-last rank's ``output_token_ids`` hold the scheduler's
  ``new_token_ids``); clocks ``recv:exec>rank:r``, the intermediate tensors ``send:intermediate:r>r+1`` /
  ``recv:intermediate:r-1>r`` of a step with scheduled tokens, and on the last rank the reply of an empty
  step (``send:rank:last>engine``).
- ``sample_tokens`` (each rank): after ``Worker.sample_tokens`` returns: the path it took
  (``rank.sample_path``: SAMPLE with ``execute_model_state``, RECEIVE when
  ``_pp_receive_prev_sampled_token_ids_to_input_batch`` ran, else RETURN), the steps whose sampled-token
  broadcast this rank issued (``rank.broadcast_issued``: the broadcast or the receive ran and
  ``_is_all_reqs_chunked_prefill()``, the skip decision, was false), ``output_token_ids`` lengths and
  ``prev_req_id_to_index``; clocks ``recv:sample>rank:r`` and, on the last rank, the reply.

**What vLLM does not let a patch see** (the profile's unrecorded actions): the stream of each rank
(``gpu_compute``, ``gpu_post``, ``gpu_complete``, ``gpu_pass``). On the CPU there is no device stream: the
forward runs on the worker's thread inside ``execute_model``, the intermediate tensors go over gloo
(``isend_tensor_dict`` / ``irecv_tensor_dict``), and a sampled-token broadcast, where one happens, inside
``sample_tokens``; replay fills the stream in. Requests are numbered in the order the scheduler first
schedules them (the engine and every worker see the same ``scheduled_new_reqs``); a request the runner no
longer holds keeps its last ``output_token_ids`` length.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lockstep import record
from lockstep.instrumentation.vllm_guard import Guarded, wrap
from lockstep.instrumentation.vllm_releases import (
    MissingPatchTarget,
    check_patch_targets,
    find_target,
    variant_for_release,
)
from lockstep.spec.profile import RecorderProfile
from lockstep.traces import JSONValue

PROTOCOL = "pp-broadcast"
RECORDER = "pp-broadcast"  # the recorder's name in MissingPatchTarget messages
PARAMETERS_ENVIRONMENT = "LOCKSTEP_TRACE_PARAMETERS"
ENGINE = "engine"
HANG_BOUND = 64  # as the reference runtime records (``replay_model.RUNTIME_PROFILES``)
UNRECORDED = ("gpu_compute", "gpu_post", "gpu_complete", "gpu_pass")  # the stream: no device stream on the CPU


def empty_step_bound(decodes: int) -> int:
    """The empty steps a recorded run of one request is judged with: with synchronous scheduling
    ``Scheduler.schedule`` has nothing to schedule while the token of the request's last sampled step is in
    flight, so ``step_with_batch_queue`` queues an empty step after the final chunk and after each decode
    (one per sampled step: the queue of pp_size is then full and it waits), and one more that carries
    ``finished_req_ids`` once the request has finished (``Scheduler.has_requests``)."""
    return decodes + 2


def _profile_values(sizing: Mapping[str, int]) -> dict[str, int]:
    return {"empty_steps": empty_step_bound(sizing["decodes"])}


# What replay may assume of this recorder (``lockstep replay --profile vllm-pp-broadcast``): the stream's
# actions are left out, the run is synchronous (vLLM turns async scheduling off on CPU, and from 0.31.0 for
# the V1 runner with PP), hang_bound as the runtime's, the empty steps bounded by the decodes.
PROFILE = RecorderProfile(
    "vllm-pp-broadcast", PROTOCOL, UNRECORDED, {"hang_bound": HANG_BOUND, "async_scheduling": 0}, _profile_values
)
# ``vllm-pp-broadcast-async``: the same with async scheduling kept on (0.21.0, CUDA streams stubbed:
# ``lockstep.real_vllm.settings.stub_cuda_streams``), where the V1 runner broadcasts the sampled token ids.
ASYNC_PROFILE = RecorderProfile(
    "vllm-pp-broadcast-async",
    PROTOCOL,
    UNRECORDED,
    {"hang_bound": HANG_BOUND, "async_scheduling": 1},
    _profile_values,
)


def profile_of(asynchronous: bool) -> RecorderProfile:
    """The profile of a run with async scheduling on or off."""
    return ASYNC_PROFILE if asynchronous else PROFILE


# Every vLLM name the patch replaces or calls through: module, attribute path; checked before patching.
VLLM_TARGETS = (
    ("vllm.v1.executor.multiproc_executor", "MultiprocExecutor.execute_model"),
    ("vllm.v1.core.sched.scheduler", "Scheduler.update_from_output"),
    ("vllm.v1.worker.gpu_worker", "Worker.execute_model"),
    ("vllm.v1.worker.gpu_worker", "Worker.sample_tokens"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner._pp_broadcast_prev_sampled_token_ids"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner._pp_receive_prev_sampled_token_ids_to_input_batch"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner._is_all_reqs_chunked_prefill"),
    ("vllm.distributed.parallel_state", "get_pp_group"),
)


def check_targets() -> None:
    """Every patch target exists in the installed vLLM, else ``MissingPatchTarget`` naming the first missing."""
    check_patch_targets(VLLM_TARGETS, RECORDER)


def release_variant(version: str) -> str:
    """The pp-broadcast variant vLLM ``version`` stands for (``PROTOCOL.release_variant``); ``UnsupportedRelease``
    naming the covered releases for one the table lacks."""
    from lockstep.models.pp_broadcast.model import PROTOCOL as MODEL

    return variant_for_release(MODEL, version)


def header_parameters(sizing: Mapping[str, int], ranks: int) -> dict[str, Any]:
    """The header's parameters: the model's defaults, the run's sizes, and the profile's values."""
    values: dict[str, Any] = {"ranks": ranks, "requests": 1, "gaps": 0, **sizing}
    values.update(profile_of(bool(sizing.get("async_scheduling", 0))).values(values))
    return record.parameters(PROTOCOL, **values)


def _sizing() -> dict[str, int]:
    found = json.loads(os.environ.get(PARAMETERS_ENVIRONMENT) or "{}")
    if not isinstance(found, dict):
        raise ValueError(f"${PARAMETERS_ENVIRONMENT} must be a JSON object, got {found!r}")
    return {str(name): int(value) for name, value in found.items()}


def _open(actor: str, ranks: int) -> tuple[record.TraceRecorder, Any]:
    """This process's trace (the installed release's variant, the run's sizes) and the model's sizes."""
    import vllm  # type: ignore[import-not-found]

    from lockstep.models.pp_broadcast.state import sizes_of
    from lockstep.models.pp_broadcast.variants import release_of

    variant = release_variant(str(vllm.__version__))
    parameters = header_parameters(_sizing(), ranks)
    recorder = record.from_environment(actor, PROTOCOL, variant, parameters, timestamps=True)
    if recorder is None:
        raise RuntimeError(f"${record.TRACE_DIRECTORY_ENVIRONMENT} is not set")
    return recorder, sizes_of(parameters, release_of(variant))


@dataclass
class Requests:
    """The model's request numbers: vLLM's request ids in the order the scheduler first scheduled them."""

    index: dict[str, int] = field(default_factory=dict)

    def learn(self, scheduler_output: Any) -> None:
        for new in scheduler_output.scheduled_new_reqs:
            self.index.setdefault(new.req_id, len(self.index))

    def of(self, request_id: str) -> int:
        return self.index[request_id]


class EngineRecording(Guarded):
    """The engine core's events: ``schedule``, ``schedule_empty``, ``process_output``."""

    def __init__(self, ranks: int) -> None:
        super().__init__(ENGINE, RECORDER)
        self.ranks = ranks
        self.requests = Requests()
        self.pieces: list[int] = []
        self.scheduled = self.processed = 0

    def scheduling(self, scheduler_output: Any) -> None:
        """``MultiprocExecutor.execute_model(scheduler_output)`` is about to send the step's RPC."""
        if self.recorder is None:
            self.recorder, sizes = _open(self.actor, self.ranks)
            self.pieces = [0] * sizes.requests
        recorder = self.recorder
        self.requests.learn(scheduler_output)
        clock: dict[str, int] = {}
        step = self.scheduled
        self.scheduled += 1
        if scheduler_output.total_num_scheduled_tokens == 0:
            for rank in range(self.ranks):
                clock.update(recorder.send(f"exec>rank:{rank}"))
            recorder.record("schedule_empty", {}, {"engine.scheduled": self.scheduled}, clock)
            return
        row = [0] * len(self.pieces)
        for request_id in scheduler_output.num_scheduled_tokens:
            request = self.requests.of(request_id)
            row[request] = self.pieces[request] + 1
            self.pieces[request] += 1
        for rank in range(self.ranks):
            clock.update(recorder.send(f"exec>rank:{rank}"))
            clock.update(recorder.send(f"sample>rank:{rank}"))
        observed: dict[str, JSONValue] = {
            recorder.vocabulary.entry("scheduler.steps", step): row,
            "scheduler.num_computed_tokens": list(self.pieces),
            "scheduler.gaps_left": 0,
            "engine.scheduled": self.scheduled,
        }
        recorder.record("schedule", {"leave_out": -1}, observed, clock)

    def processing(self) -> None:
        """``Scheduler.update_from_output`` starts: the oldest step's reply from the output rank is in."""
        if self.recorder is None:
            return
        self.processed += 1
        clock = self.recorder.receive(f"rank:{self.ranks - 1}>{ENGINE}")
        self.recorder.record("process_output", {}, {"engine.processed": self.processed}, clock)


class RankRecording(Guarded):
    """A pipeline stage's events: ``execute_model``, ``execute_model_empty``, ``sample_tokens``."""

    def __init__(self, rank: int, ranks: int) -> None:
        super().__init__(f"rank:{rank}", RECORDER)
        self.rank, self.ranks, self.last = rank, ranks, ranks - 1
        self.requests = Requests()
        self.lengths: list[int] = []
        self.rpcs = self.steps = 0
        self.issued: list[bool] = []
        self.path = "RETURN"
        self.received = False  # the receive function ran in this sample_tokens

    def opened(self) -> record.TraceRecorder:
        if self.recorder is None:
            self.recorder, sizes = _open(self.actor, self.ranks)
            self.lengths = [0] * sizes.requests
            self.issued = [False] * sizes.steps
        return self.recorder

    def executed(self, runner: Any, scheduler_output: Any) -> None:
        """``Worker.execute_model(scheduler_output)`` returned."""
        recorder = self.opened()
        self.requests.learn(scheduler_output)
        self.steps += 1
        clock = dict(recorder.receive(f"exec>rank:{self.rank}"))
        if scheduler_output.total_num_scheduled_tokens == 0:
            self.rpcs += 2  # no sample_tokens follows an empty step
            if self.rank == self.last:
                clock.update(recorder.send(f"rank:{self.rank}>{ENGINE}"))
            rpcs: dict[str, JSONValue] = {recorder.vocabulary.entry("rank.rpcs", self.rank): self.rpcs}
            recorder.record("execute_model_empty", {"rank": self.rank}, rpcs, clock)
            return
        if self.rank > 0:
            clock.update(recorder.receive(f"intermediate:{self.rank - 1}>{self.rank}"))
        if self.rank < self.last:
            clock.update(recorder.send(f"intermediate:{self.rank}>{self.rank + 1}"))
        self.rpcs += 1
        observed: dict[str, JSONValue] = {
            recorder.vocabulary.entry("rank.rpcs", self.rank): self.rpcs,
            recorder.vocabulary.entry("rank.output_token_ids", self.rank): self.output_lengths(runner),
        }
        recorder.record("execute_model", {"rank": self.rank}, observed, clock)

    def output_lengths(self, runner: Any) -> list[int]:
        """``len(requests[q].output_token_ids)`` per model request (a request the runner dropped keeps its last)."""
        for request_id, request in self.requests.index.items():
            state = runner.requests.get(request_id)
            if state is not None and request < len(self.lengths):
                self.lengths[request] = len(state.output_token_ids)
        return list(self.lengths)

    def mapped(self, runner: Any) -> list[bool]:
        """The requests ``input_batch.prev_req_id_to_index`` holds."""
        mapping = getattr(runner.input_batch, "prev_req_id_to_index", None) or {}
        held = [False] * len(self.lengths)
        for request_id in mapping:
            request = self.requests.index.get(request_id)
            if request is not None and request < len(held):
                held[request] = True
        return held

    def sampling(self, runner: Any) -> None:
        """``Worker.sample_tokens`` is about to run: the path starts as the runner's state says."""
        self.path = "SAMPLE" if runner.execute_model_state is not None else "RETURN"
        self.received = False

    def broadcasting(self, runner: Any) -> None:
        """The broadcast (last rank) or its receive (the others) runs for the step just executed: whether it
        reaches ``torch.distributed.broadcast`` is ``not _is_all_reqs_chunked_prefill()`` (the skip)."""
        skip = bool(runner._is_all_reqs_chunked_prefill())
        step = self.steps - 1
        if 0 <= step < len(self.issued):
            self.issued[step] = not skip

    def receiving(self) -> None:
        self.received = True

    def sampled(self, runner: Any) -> None:
        """``Worker.sample_tokens`` returned."""
        recorder = self.opened()
        clock = dict(recorder.receive(f"sample>rank:{self.rank}"))
        if self.rank == self.last:
            clock.update(recorder.send(f"rank:{self.rank}>{ENGINE}"))
        self.rpcs += 1
        path = "RECEIVE" if self.received else self.path
        entry = recorder.vocabulary.entry
        observed: dict[str, JSONValue] = {
            entry("rank.rpcs", self.rank): self.rpcs,
            entry("rank.output_token_ids", self.rank): self.output_lengths(runner),
            entry("rank.prev_req_id_to_index", self.rank): self.mapped(runner),
            entry("rank.sample_path", self.rank): path,
            entry("rank.broadcast_issued", self.rank): list(self.issued),
        }
        recorder.record("sample_tokens", {"rank": self.rank}, observed, clock)


_engine: EngineRecording | None = None
_rank: RankRecording | None = None


def _engine_recording(executor: Any) -> EngineRecording:
    global _engine
    if _engine is None:
        _engine = EngineRecording(int(executor.parallel_config.pipeline_parallel_size))
    return _engine


def _rank_recording() -> RankRecording:
    global _rank
    if _rank is None:
        from vllm.distributed.parallel_state import get_pp_group  # type: ignore[import-not-found]

        group = get_pp_group()
        _rank = RankRecording(int(group.rank_in_group), int(group.world_size))
    return _rank


def install_vllm() -> Callable[[], None]:
    """Patch the installed vLLM (targets checked first: ``MissingPatchTarget``); returns the undo."""
    check_targets()
    executor_class = find_target("vllm.v1.executor.multiproc_executor", "MultiprocExecutor", recorder=RECORDER)
    scheduler_class = find_target("vllm.v1.core.sched.scheduler", "Scheduler", recorder=RECORDER)
    worker_class = find_target("vllm.v1.worker.gpu_worker", "Worker", recorder=RECORDER)
    runner_class = find_target("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", recorder=RECORDER)
    undo: list[Callable[[], None]] = []

    def execute_model_of_executor(original: Callable[..., Any]) -> Callable[..., Any]:
        def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            recording = None
            with contextlib.suppress(Exception):
                recording = _engine_recording(self)
            if recording is not None and recording.active:
                with recording.guard():
                    recording.scheduling(scheduler_output)
            return original(self, scheduler_output, *args, **kwargs)

        return execute_model

    def update_from_output(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            recording = _engine
            if recording is not None and recording.active:
                with recording.guard():
                    recording.processing()
            return original(self, *args, **kwargs)

        return wrapper

    def execute_model_of_worker(original: Callable[..., Any]) -> Callable[..., Any]:
        def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, scheduler_output, *args, **kwargs)
            recording = _guarded_rank()
            if recording is not None:
                with recording.guard():
                    recording.executed(self.model_runner, scheduler_output)
            return result

        return execute_model

    def sample_tokens_of_worker(original: Callable[..., Any]) -> Callable[..., Any]:
        def sample_tokens(self: Any, *args: Any, **kwargs: Any) -> Any:
            recording = _guarded_rank()
            if recording is not None:
                with recording.guard():
                    recording.sampling(self.model_runner)
            result = original(self, *args, **kwargs)
            recording = _guarded_rank()
            if recording is not None:
                with recording.guard():
                    recording.sampled(self.model_runner)
            return result

        return sample_tokens

    def broadcast_of_runner(receives: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
                recording = _guarded_rank()
                if recording is not None:
                    with recording.guard():
                        recording.broadcasting(self)
                        if receives:
                            recording.receiving()
                return original(self, *args, **kwargs)

            return wrapper

        return make

    undo.append(wrap(executor_class, "execute_model", execute_model_of_executor))
    undo.append(wrap(scheduler_class, "update_from_output", update_from_output))
    undo.append(wrap(worker_class, "execute_model", execute_model_of_worker))
    undo.append(wrap(worker_class, "sample_tokens", sample_tokens_of_worker))
    undo.append(wrap(runner_class, "_pp_broadcast_prev_sampled_token_ids", broadcast_of_runner(False)))
    undo.append(wrap(runner_class, "_pp_receive_prev_sampled_token_ids_to_input_batch", broadcast_of_runner(True)))

    def undo_all() -> None:
        for step in reversed(undo):
            step()

    return undo_all


def _guarded_rank() -> RankRecording | None:
    """This worker's recording, or None when recording is off or stopped (a failure to find the PP group is
    itself a recorder failure)."""
    global _rank
    if _rank is None:
        try:
            return _rank_recording() if record.recording_enabled() else None
        except Exception as error:
            _rank = RankRecording(-1, 0)
            _rank.stop(error)
            return None
    return _rank if _rank.active else None


__all__ = [
    "ASYNC_PROFILE",
    "PROFILE",
    "UNRECORDED",
    "VLLM_TARGETS",
    "MissingPatchTarget",
    "check_targets",
    "empty_step_bound",
    "header_parameters",
    "install_vllm",
    "profile_of",
    "release_variant",
]
