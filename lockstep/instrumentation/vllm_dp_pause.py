"""Record dp-pause traces from vLLM by monkeypatching it (no vLLM source edited), for the installed release.

``install_vllm()`` patches vLLM's own classes and functions, recording the events of the model variant
the installed release stands for (``vllm.__version__`` → ``vllm_releases.recording_for``: which events,
the real ``dp_sync_interval``, the header's variant and unrecorded names); every patch target is checked
first and a missing one refused with ``MissingPatchTarget`` naming it. ``install(targets)`` patches the
ones ``targets`` names, which is how the test applies this same code to lockstep's runtime
(``install_runtime``, with ``LOCKSTEP_INSTRUMENT=lockstep.instrumentation.vllm_dp_pause:install_runtime``).
Each returns a function that undoes the patch. Recording happens only while ``LOCKSTEP_TRACE_DIR``
is set; ``LOCKSTEP_TRACE_PARAMETERS`` (JSON) gives the model bounds vLLM cannot know (``requests``,
``max_wave``, ...), and ``LOCKSTEP_TRACE_VARIANT`` may override the variant (an engine core without
``pending_pause``, v0.20.0 or the runtime's pre-fix, records ``pre-fix``). Imports only the standard
library and ``lockstep.record``.

**A recorder failure never reaches vLLM.** Every write (an event, a collective's ``enter`` /
``complete``, opening the trace) is guarded: the first error (an observed value beyond the model's
bounds, an attribute a release renamed, a full disk) writes ``<actor>.error.json`` beside the trace
(``record.write_failure``: the error and its traceback), stops this process's recording, hands every held
output on, gives the engine its own queues back, and lets the engine run on unrecorded. The
recording up to the failure stays a valid trace prefix; ``lockstep vllm check`` reports the file.

Where each event is written (actor ``rank:<dp_rank>`` in the engine-core process; run vLLM with
``--distributed-executor-backend uni`` so the worker's DP all-reduce is in that process):

- ``arrive_from_client`` / ``arrive_from_coordinator``: where the core thread *takes* an item from
  ``input_queue`` (``get`` / ``get_nowait``), not where the input thread puts it. The model's
  ``step`` and ``notify_idle`` need an empty queue, and vLLM checks emptiness in several places of
  ``_process_input_queue`` with no lock a patch could hold across the check and the step; only the
  core thread reads the queue, so an item's time in the queue is invisible to everyone, and taking
  it is an exact linearisation point. Items the model does not have (WAKEUP, utilities
  other than pause_scheduler / collective_rpc / resume_scheduler) are not recorded.
- ``handle_abort``: after ``_handle_client_request(ABORT)`` (``abort_requests``) returns. vLLM also aborts
  eagerly: the input thread puts each ABORT on ``aborts_queue`` too, which a step drains before
  ``update_from_output``; the request then ends within that step (a forward of the model's may end any of
  its requests), and the later ``handle_abort`` finds it finished (the free client's ``finishes`` false).
- ``handle_*``, ``finish_collective_rpc``, ``finish_resume``: after ``_handle_client_request``
  returns (``handle_collective_rpc`` as ``collective_rpc`` starts, ``handle_resume`` of a resume
  that reaches its barrier as ``ParallelConfig.has_unfinished_dp`` starts).
- ``notify_idle``: around ``_notify_idle_state_callbacks`` when a callback is pending; from v0.29.0
  (``Recording.device_sync``) ``fire_idle_callbacks`` before it (the callback's ``_finish_pause`` runs
  ``collective_rpc("synchronize_device")``) and ``synchronize_device`` after it (the reply goes out).
- ``step``: at the worker's DP all-reduce of a real forward (``dp_utils._run_ar``, after
  ``schedule``), else after ``_process_engine_step`` when the loop goes on to a dummy forward or
  to nothing; the all-reduce itself is ``enter``/``complete`` on ``worker_dp``.
- ``finish_forward``: after ``_has_global_unfinished_reqs`` off the sync boundary, or before
  ``ParallelConfig.sync_dp_state`` (pre-fix ``has_unfinished_dp``) on it; ``finish_sync`` when the
  loop comes back to ``_handle_shutdown``, because ``run_busy_loop`` sets ``engines_running``,
  queues ``wave_complete`` and bumps ``current_wave`` (from v0.30.0 also resets ``step_counter``)
  inline after the call.
- client (actor ``client``, patched by ``vllm_dp_pause_client``): ``client_add_request`` before
  ``_send_input(ADD)`` (FIRST_REQ follows it when ``engines_running`` is false), ``client_<call>``
  before ``_call_utility_async`` sends, ``client_<call>_returned`` after ``call_utility_async`` has
  every engine's reply.

**Sends are on file before the message leaves.** While the core thread is inside a patched
function, ``output_queue.put_nowait`` items are held and handed on only after the event that sends
them is written with its ``send:`` clock (replies: ``rank:N>client``; ``start_wave`` and
``wave_complete``: ``rank:N>coordinator``); the output thread then sends them as usual.

**What vLLM does not let a patch see**, named in the header's ``unrecorded`` (``Recording.unrecorded``):
- the coordinator (``DPCoordinatorProc.process_input_socket`` is one function whose wave state is
  local variables and whose receives are inline socket reads; only ``_send_start_wave`` is a
  function). Its actions are left to replay, and START_DP_WAVE arrivals carry no receive clock;
- the client's stats task applying a publication (``client_read_publication``; ``client_read_view`` in
  the later-release variants), inline in a closure (``run_engine_stats_update_task``);
- later releases: ``device_idle``, the device finishing a forward's kernels.
Assumptions: one DP all-reduce per forward (no micro-batching, no speculative decoding), the
worker in the engine-core process, ``step_counter`` read as the release's model keeps it
(``Recording.step_counter``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from lockstep import record
from lockstep.instrumentation.vllm_queues import HeldOutputs, TakenInputs
from lockstep.instrumentation.vllm_releases import (
    EARLY_UNRECORDED,
    ENGINE_METHODS,
    LATER_UNRECORDED,
    RUNTIME_RECORDING,
    MissingPatchTarget,
    Recording,
    check_targets,
    find_target,
    installed_recording,
)
from lockstep.spec.profile import RecorderProfile

PARAMETERS_ENVIRONMENT = "LOCKSTEP_TRACE_PARAMETERS"
VARIANT_ENVIRONMENT = "LOCKSTEP_TRACE_VARIANT"  # overrides the variant the release stands for
UNRECORDED = list(EARLY_UNRECORDED)  # the v0.21.0 recording's (the runtime's); later releases: Recording.unrecorded


def _profile_values(sizing: Mapping[str, int]) -> dict[str, int]:
    """Waves bounded by the requests, pause cycles and resumes (as ``$LOCKSTEP_TRACE_PARAMETERS`` is set:
    the requests added before and after the first pause, and per cycle 2 more and one per resume), the
    response bound as ``record.parameters`` writes it (the declared default)."""
    from lockstep.models import get_protocol

    return {
        "max_wave": max_wave(
            sizing["requests"],
            sizing.get("late_requests", 0),
            sizing.get("pause_cycles", 1),
            sizing.get("resumes", 1),
        ),
        "response_bound": get_protocol("dp-pause").parameter("response_bound").default,
    }


def max_wave(requests: int, late_requests: int = 0, cycles: int = 1, resumes: int = 1) -> int:
    """The largest wave a recorded run is judged with: one per request, and per pause/resume cycle a pause's
    kick-start wave, one per resume call and one more (the model's ``max_wave`` with ``free_client``)."""
    return requests + late_requests + cycles * (resumes + 2)


# What replay may assume of this recorder (``lockstep replay --profile vllm-dp-pause``), every release's:
# the actions above are left out (a name the judged variant lacks exempts nothing), the client
# resumes without waiting for control messages to settle, and it follows no script: the recorder
# writes whatever calls the real client makes (the model's free client, within the header's budgets).
PROFILE = RecorderProfile(
    "vllm-dp-pause",
    "dp-pause",
    tuple(dict.fromkeys((*EARLY_UNRECORDED, *LATER_UNRECORDED))),
    {"settle_before_resume": 0, "free_client": 1},
    _profile_values,
)
CALLS = {
    "pause_scheduler": "client_pause",
    "collective_rpc": "client_collective_rpc",
    "resume_scheduler": "client_resume",
}  # the utilities the model has, by the client's event


@dataclass
class Targets:
    """What to patch: the engine-core class (``DPEngineCoreProc``), the class with the engine-level
    all-reduces (``ParallelConfig``), the module holding the worker's DP all-reduce ``_run_ar``, and
    the client class (``DPLBAsyncMPClient``). Any may be None (not patched). ``recording``: what the
    release records (lockstep's runtime: v0.21.0's)."""

    engine: type | None = None
    parallel_config: type | None = None
    worker_dp: Any = None
    client: type | None = None
    recording: Recording = field(default=RUNTIME_RECORDING)


def header_parameters(ranks: int, sync_interval: int, unrecorded: tuple[str, ...] = EARLY_UNRECORDED) -> dict[str, Any]:
    """The model's parameters for the trace header: the run's ranks and sync interval, the
    client's no-settling resume and free script, the unrecorded actions, then ``$LOCKSTEP_TRACE_PARAMETERS``."""
    values: dict[str, Any] = {
        "ranks": ranks,
        "sync_interval": sync_interval,
        "settle_before_resume": 0,
        "free_client": 1,
        "unrecorded": list(unrecorded),
    }
    values.update(json.loads(os.environ.get(PARAMETERS_ENVIRONMENT) or "{}"))
    return record.parameters("dp-pause", **values)


def _field(outputs: Any, name: str) -> Any:
    """A field of an output item (vLLM's ``EngineCoreOutputs`` attribute, or a mapping's key)."""
    return outputs.get(name) if isinstance(outputs, dict) else getattr(outputs, name, None)


def modelled(request_type: Any, request: Any) -> str | None:
    """The model's name for an input item: ADD, ABORT, START_DP_WAVE or the utility's method; else None."""
    name = getattr(request_type, "name", str(request_type))
    if name in ("ADD", "ABORT", "START_DP_WAVE"):
        return name
    if name == "UTILITY" and request[2] in CALLS:
        return str(request[2])
    return None


class EngineTrace:
    """The recording of one engine core: its recorder, the model's position of its core thread
    (``mode``), and what the patched functions tell each other. Every write is guarded (``guarded``):
    the first failure stops the recording (``fail``) and never reaches the engine."""

    def __init__(
        self, engine: Any, recorder: record.TraceRecorder, post_fix: bool, sync_interval: int, recording: Recording
    ) -> None:
        self.engine, self.recorder, self.post_fix, self.sync_interval = engine, recorder, post_fix, sync_interval
        self.recording = recording
        self.rank = int(engine.dp_rank)
        self.actor = f"rank:{self.rank}"
        self.mode = "TOP"
        self.failed = False
        self.outputs = HeldOutputs(engine.output_queue)
        self.inputs = TakenInputs(engine.input_queue, self)
        engine.output_queue, engine.input_queue = self.outputs, self.inputs
        self.utility: str | None = None  # the modelled utility being handled
        self.stepping = self.forwarded = self.checking = self.synced = self.resume_barrier = False
        self.dummy = self.finish_sync_pending = False

    def observed(self, **overrides: Any) -> dict[str, Any]:
        """The rank's entries of the model's variables, read from vLLM's attributes."""
        engine, scheduler, r = self.engine, self.engine.scheduler, self.rank
        values = {
            "mode": self.mode,
            "engines_running": bool(engine.engines_running),
            "current_wave": int(engine.current_wave),
            "step_counter": self.recording.step_counter(int(engine.step_counter), self.sync_interval),
            "pause_state": scheduler.pause_state.name,
            "requests": len(scheduler.waiting) + len(scheduler.running),
            "finished_pending": bool(scheduler.finished_req_ids),
            "pause_future": bool(engine._idle_state_callbacks),
        }
        if self.post_fix:
            values.update(
                pending_pause=bool(engine.pending_pause), ignore_start_dp_wave=bool(engine.ignore_start_dp_wave)
            )
        values.update(overrides)
        return {f"{name}[{r}]": value for name, value in values.items()}

    def event(self, action: str, **overrides: Any) -> None:
        """Write ``action`` with the send clocks of the held outputs, then hand those on (also when the write fails)."""
        items = self.outputs.take_held()
        try:
            if self.failed:
                return
            clock: dict[str, int] = {}
            for client_index, outputs in items:
                if client_index == -1 and (
                    _field(outputs, "start_wave") is not None or _field(outputs, "wave_complete") is not None
                ):
                    clock.update(self.recorder.send(f"{self.actor}>coordinator"))
                elif client_index != -1 and _field(outputs, "utility_output") is not None:
                    clock.update(self.recorder.send(f"{self.actor}>client"))
            self.recorder.event(action, {"rank": self.rank}, self.observed(**overrides), clock or None)
        except Exception as error:
            self.fail(error)
        finally:
            self.outputs.release_held(items)

    def arrived(self, item: Any) -> None:
        if self.failed:
            return
        try:
            kind = modelled(*item)
            if kind == "START_DP_WAVE":  # the coordinator is unrecorded: no receive clock
                self.recorder.event("arrive_from_coordinator", {"rank": self.rank})
            elif kind is not None:
                self.recorder.event(
                    "arrive_from_client", {"rank": self.rank}, clock=self.recorder.receive(f"client>{self.actor}")
                )
        except Exception as error:
            self.fail(error)

    @contextlib.contextmanager
    def collective(self, communicator: str, op: str) -> Iterator[None]:
        """This rank's ``enter`` before the block and ``complete`` after it (not if it raises), each guarded."""
        number = None
        if not self.failed:
            try:
                number = self.recorder.enter(communicator, op)
            except Exception as error:
                self.fail(error)
        yield
        if number is not None and not self.failed:
            try:
                self.recorder.complete(communicator, op, number)
            except Exception as error:
                self.fail(error)

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        self.outputs.hold()
        try:
            yield
        finally:
            self.outputs.unhold()

    def fail(self, error: BaseException) -> None:
        """Stop recording after ``error``: the error file, every held output handed on, the engine's own
        queues back; the engine runs on unrecorded."""
        global _active
        if self.failed:
            return
        self.failed = True
        if _active is self:
            _active = None
        record.write_failure(self.actor, error, release=self.recording.release, events_written=self.recorder.events)
        with contextlib.suppress(Exception):
            self.recorder.close()
        self.engine.output_queue, self.engine.input_queue = self.outputs.queue, self.inputs.queue
        self.outputs.release_held(self.outputs.take_held())


_active: EngineTrace | None = None  # one engine core per process


def _patch(owner: Any, name: str, make: Callable[[Any], Any], undo: list[Callable[[], None]]) -> None:
    """Replace ``owner.name`` (a method, possibly inherited, a static method or a module function)
    by ``make(original)``; ``undo`` gets the function that puts the original back."""
    static = isinstance(inspect.getattr_static(owner, name), staticmethod)
    own = name in vars(owner)
    saved = vars(owner)[name] if own else None
    function = getattr(owner, name)
    wrapped = functools.wraps(function)(make(function))
    setattr(owner, name, staticmethod(wrapped) if static else wrapped)
    undo.append(lambda: setattr(owner, name, saved) if own else delattr(owner, name))


def _trace(engine: Any) -> EngineTrace | None:
    return _active if _active is not None and _active.engine is engine else None


def _open_engine_trace(engine: Any, recording: Recording) -> EngineTrace | None:
    """The engine core's recording (None: recording off, or it could not start: then the error file)."""
    actor = f"rank:{getattr(engine, 'dp_rank', '?')}"
    if not record.recording_enabled():
        return None
    try:
        sync_interval = recording.sync_interval(getattr(engine, "vllm_config", None))
        parameters = header_parameters(int(engine.dp_size), sync_interval, recording.unrecorded)
        post_fix = hasattr(engine, "pending_pause")  # v0.21.0's two-phase pause state; v0.20.0 has none
        variant = os.environ.get(VARIANT_ENVIRONMENT) or (recording.variant if post_fix else "pre-fix")
        recorder = record.from_environment(actor, "dp-pause", variant, parameters, timestamps=True)
        if recorder is None:
            return None
        return EngineTrace(engine, recorder, post_fix, sync_interval, recording)
    except Exception as error:
        record.write_failure(actor, error, release=recording.release)
        return None


def _patch_engine(engine_class: type, recording: Recording, undo: list[Callable[[], None]]) -> None:
    def run_busy_loop(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any) -> Any:
            global _active
            trace = _open_engine_trace(self, recording)
            if trace is None:
                return original(self)
            _active = trace
            try:
                return original(self)
            finally:
                with contextlib.suppress(Exception):
                    trace.recorder.close()

        return wrapper

    def handle_client_request(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, request_type: Any, request: Any) -> Any:
            trace = _trace(self)
            kind = None if trace is None else modelled(request_type, request)
            if trace is None or kind is None:
                return original(self, request_type, request)
            trace.utility, trace.resume_barrier = kind, False
            with trace.holding():
                result = original(self, request_type, request)
                trace.utility, trace.mode = None, "TOP"
                trace.event(
                    {
                        "ADD": "handle_add",
                        "ABORT": "handle_abort",
                        "START_DP_WAVE": "handle_start_wave",
                        "pause_scheduler": "handle_pause",
                        "collective_rpc": "finish_collective_rpc",
                    }.get(kind)
                    or ("finish_resume" if trace.resume_barrier else "handle_resume")
                )
            return result

        return wrapper

    def collective_rpc(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            trace = _trace(self)
            if trace is None or trace.utility != "collective_rpc":
                return original(self, *args, **kwargs)
            trace.mode = "RPC"
            trace.event("handle_collective_rpc")
            with trace.collective("worker_world", "rpc"):  # the body's collective spans every rank
                return original(self, *args, **kwargs)

        return wrapper

    def notify_idle_state_callbacks(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any) -> Any:
            trace = _trace(self)
            if trace is None or not self._idle_state_callbacks:
                return original(self)
            with trace.holding():
                if trace.recording.device_sync:  # _finish_pause → collective_rpc("synchronize_device")
                    trace.mode = "DEVICE_SYNC"
                    trace.event("fire_idle_callbacks", pause_future=False)
                result = original(self)
                trace.mode = "TOP"
                trace.event("synchronize_device" if trace.recording.device_sync else "notify_idle")
            return result

        return wrapper

    def process_engine_step(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any) -> Any:
            trace = _trace(self)
            if trace is None:
                return original(self)
            had_work, trace.stepping, trace.forwarded = self.has_work(), True, False
            try:
                executed = original(self)
            finally:
                trace.stepping = False
            if had_work and executed is not None and not trace.forwarded:  # None: lockstep's runtime did not step
                trace.dummy = bool(self.scheduler.has_unfinished_requests() or self.engines_running)
                trace.mode = "FORWARD_DUMMY" if trace.dummy else "TOP"
                trace.event("step")
            return executed

        return wrapper

    def has_global_unfinished_reqs(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, local_unfinished: bool) -> Any:
            trace = _trace(self)
            if trace is None:
                return original(self, local_unfinished)
            trace.checking, trace.synced = True, False
            try:
                result = original(self, local_unfinished)
            finally:
                trace.checking = False
            if not trace.synced:  # off the boundary: returns True, which run_busy_loop assigns
                trace.mode = "TOP"
                trace.event("finish_forward", engines_running=bool(result))
            return result

        return wrapper

    def handle_shutdown(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any) -> Any:
            trace = _trace(self)
            if trace is not None and trace.finish_sync_pending:  # run_busy_loop's tail after the sync ran
                trace.finish_sync_pending, trace.mode = False, "TOP"
                trace.event("finish_sync")
                trace.outputs.unhold()
            return original(self)

        return wrapper

    def resume_scheduler(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            trace = _trace(self)
            if trace is not None:
                trace.utility = "resume_scheduler"
            return original(self, *args, **kwargs)

        return wrapper

    wrappers = (
        run_busy_loop,
        handle_client_request,
        collective_rpc,
        notify_idle_state_callbacks,
        process_engine_step,
        has_global_unfinished_reqs,
        handle_shutdown,
        resume_scheduler,
    )
    for name, make in zip(ENGINE_METHODS, wrappers, strict=True):
        _patch(engine_class, name, make, undo)


def _engine_sync(trace: EngineTrace, op: str, call: Callable[[], Any]) -> Any:
    """The sync all-reduce of ``_has_global_unfinished_reqs``: finish_forward before it, and the
    outputs held until finish_sync (``_handle_shutdown``)."""
    trace.mode = "SYNC"
    trace.event("finish_forward")
    trace.outputs.hold()
    trace.finish_sync_pending = trace.synced = True
    with trace.collective("engine_dp", op):
        return call()


def _patch_parallel_config(parallel_config: type, undo: list[Callable[[], None]]) -> None:
    def sync_dp_state(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            trace = _active
            if trace is None or not trace.checking:
                return original(*args, **kwargs)
            return _engine_sync(trace, "sync_sum", lambda: original(*args, **kwargs))

        return wrapper

    def has_unfinished_dp(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            trace = _active
            if trace is not None and trace.checking:  # pre-fix: the sync is a MAX all-reduce
                return _engine_sync(trace, "sync_max", lambda: original(*args, **kwargs))
            if trace is None or trace.utility != "resume_scheduler":
                return original(*args, **kwargs)
            trace.mode, trace.resume_barrier = "RESUME_BARRIER", True  # post-fix resume's barrier
            trace.event("handle_resume")
            with trace.collective("engine_dp", "resume_max"):
                result = original(*args, **kwargs)
            trace.mode = "TOP"
            return result

        return wrapper

    if hasattr(parallel_config, "sync_dp_state"):  # post-fix; v0.20.0 syncs with has_unfinished_dp alone
        _patch(parallel_config, "sync_dp_state", sync_dp_state, undo)
    _patch(parallel_config, "has_unfinished_dp", has_unfinished_dp, undo)


def _patch_worker_dp(module: Any, undo: list[Callable[[], None]]) -> None:
    def run_ar(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            trace = _active
            if trace is None or not (trace.stepping or trace.dummy):  # warm-up and profiling runs
                return original(*args, **kwargs)
            if trace.stepping and not trace.forwarded:  # the real forward: schedule() has run
                trace.forwarded, trace.mode = True, "FORWARD_REAL"
                trace.event("step")
            trace.dummy = False
            with trace.collective("worker_dp", "forward"):
                return original(*args, **kwargs)

        return wrapper

    _patch(module, "_run_ar", run_ar, undo)


def install(targets: Targets) -> Callable[[], None]:
    """Patch what ``targets`` names; returns the function that undoes every patch."""
    undo: list[Callable[[], None]] = []
    if targets.engine is not None:
        _patch_engine(targets.engine, targets.recording, undo)
    if targets.parallel_config is not None:
        _patch_parallel_config(targets.parallel_config, undo)
    if targets.worker_dp is not None:
        _patch_worker_dp(targets.worker_dp, undo)
    if targets.client is not None:
        from lockstep.instrumentation.vllm_dp_pause_client import patch_client

        patch_client(targets.client, targets.recording, undo)

    def uninstall() -> None:
        while undo:
            undo.pop()()

    return uninstall


def install_vllm(recording: Recording | None = None) -> Callable[[], None]:
    """Patch the installed vLLM (``DPEngineCoreProc``, ``ParallelConfig``, ``dp_utils._run_ar``,
    ``DPLBAsyncMPClient``) to record its release's events (``recording``, default: from
    ``vllm.__version__``); call it in every process before the engine core or client starts.
    ``UnsupportedRelease`` for a release no recording covers, ``MissingPatchTarget`` for a target the
    installed vLLM lacks (nothing is patched then)."""
    recording = recording or installed_recording()
    check_targets(recording)
    return install(
        Targets(
            find_target("vllm.v1.engine.core", "DPEngineCoreProc"),
            find_target("vllm.config", "ParallelConfig"),
            find_target("vllm.v1.worker.dp_utils", ""),
            find_target("vllm.v1.engine.core_client", "DPLBAsyncMPClient"),
            recording,
        )
    )


def install_runtime(role: str) -> Callable[[], None]:
    """Patch lockstep's dp-pause runtime, which has vLLM's shape at these points (the test's
    ``LOCKSTEP_INSTRUMENT`` hook); ``role`` is the process's: engine, client or coordinator."""
    if role == "engine":
        from lockstep.impl.dp_pause import engine, surface

        return install(Targets(engine.DPEngineCoreProc, surface.ParallelConfig, surface))
    if role == "client":
        from lockstep.impl.dp_pause import client

        return install(Targets(client=client.Client))
    return install(Targets())  # the coordinator: unrecorded (see the module's doc)


__all__ = [
    "PARAMETERS_ENVIRONMENT",
    "PROFILE",
    "UNRECORDED",
    "VARIANT_ENVIRONMENT",
    "MissingPatchTarget",
    "Targets",
    "check_targets",
    "header_parameters",
    "install",
    "install_runtime",
    "install_vllm",
    "installed_recording",
    "max_wave",
]
