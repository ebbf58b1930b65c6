"""Record dp-pause traces from vLLM v0.21.0 by monkeypatching it (no vLLM source edited).

``install_vllm()`` patches vLLM's own classes and functions; ``install(targets)`` patches the ones
``targets`` names, which is how the test applies this same code to lockstep's runtime
(``install_runtime``, with ``LOCKSTEP_INSTRUMENT=lockstep.instrumentation.vllm_dp_pause:install_runtime``).
Each returns a function that undoes the patch. Recording happens only while ``LOCKSTEP_TRACE_DIR``
is set; ``LOCKSTEP_TRACE_PARAMETERS`` (JSON) gives the model bounds vLLM cannot know (``requests``,
``max_wave``), and ``LOCKSTEP_TRACE_VARIANT`` the variant (default: ``post-fix``, vLLM v0.21.0; an
engine core without ``pending_pause``, v0.20.0, records ``pre-fix``). Imports only the standard library and
``lockstep.record``.

Where each event is written (actor ``rank:<dp_rank>`` in the engine-core process; run vLLM with
``--distributed-executor-backend uni`` so the worker's DP all-reduce is in that process):

- ``arrive_from_client`` / ``arrive_from_coordinator``: where the core thread *takes* an item from
  ``input_queue`` (``get`` / ``get_nowait``), not where the input thread puts it. The model's
  ``step`` and ``notify_idle`` need an empty queue, and vLLM checks emptiness in several places of
  ``_process_input_queue`` with no lock a patch could hold across the check and the step; only the
  core thread reads the queue, so an item's time in the queue is invisible to everyone, and taking
  it is an exact linearisation point. Items the model does not have (WAKEUP, ABORT, utilities
  other than pause_scheduler / collective_rpc / resume_scheduler) are not recorded.
- ``handle_*``, ``finish_collective_rpc``, ``finish_resume``: after ``_handle_client_request``
  returns (``handle_collective_rpc`` as ``collective_rpc`` starts, ``handle_resume`` of a resume
  that reaches its barrier as ``ParallelConfig.has_unfinished_dp`` starts).
- ``notify_idle``: around ``_notify_idle_state_callbacks`` when a callback is pending.
- ``step``: at the worker's DP all-reduce of a real forward (``dp_utils._run_ar``, after
  ``schedule``), else after ``_process_engine_step`` when the loop goes on to a dummy forward or
  to nothing; the all-reduce itself is ``enter``/``complete`` on ``worker_dp``.
- ``finish_forward``: after ``_has_global_unfinished_reqs`` off the sync boundary, or before
  ``ParallelConfig.sync_dp_state`` (pre-fix ``has_unfinished_dp``) on it; ``finish_sync`` when the
  loop comes back to ``_handle_shutdown``, because ``run_busy_loop`` sets ``engines_running``,
  queues ``wave_complete`` and bumps ``current_wave`` inline after the call.
- client (actor ``client``, patched by ``vllm_dp_pause_client``): ``client_add_request`` before ``_send_input(ADD)``
(FIRST_REQ follows it
  when ``engines_running`` is false), ``client_<call>`` before ``_call_utility_async`` sends,
  ``client_<call>_returned`` after ``call_utility_async`` has every engine's reply.

**Sends are on file before the message leaves.** While the core thread is inside a patched
function, ``output_queue.put_nowait`` items are held and handed on only after the event that sends
them is written with its ``send:`` clock (replies: ``rank:N>client``; ``start_wave`` and
``wave_complete``: ``rank:N>coordinator``); the output thread then sends them as usual.

**What vLLM v0.21.0 does not let a patch see**, named in the header's ``unrecorded``:
- the coordinator (``DPCoordinatorProc.process_input_socket`` is one function whose wave state is
  local variables and whose receives are inline socket reads; only ``_send_start_wave`` is a
  function). Its actions are left to replay, and START_DP_WAVE arrivals carry no receive clock;
- ``client_read_publication``: the client's stats task applies a publication inline in a closure
  (``run_engine_stats_update_task``: ``self.current_wave = wave``).
Assumptions: one DP all-reduce per forward (no micro-batching, no speculative decoding), the
worker in the engine-core process, ``step_counter`` counted modulo 32 as the model's.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from lockstep import record
from lockstep.instrumentation.vllm_queues import HeldOutputs, TakenInputs
from lockstep.spec.profile import RecorderProfile

SYNC_INTERVAL = 32  # DPEngineCoreProc._has_global_unfinished_reqs: every 32nd step
PARAMETERS_ENVIRONMENT = "LOCKSTEP_TRACE_PARAMETERS"
VARIANT_ENVIRONMENT = "LOCKSTEP_TRACE_VARIANT"  # the model variant the release stands for (the client cannot tell)
UNRECORDED = ["coordinator", "client_read_publication"]


def _profile_values(sizing: Mapping[str, int]) -> dict[str, int]:
    """Waves bounded by the requests (as ``$LOCKSTEP_TRACE_PARAMETERS`` is set), the response bound
    as ``record.parameters`` writes it (the declared default)."""
    from lockstep.models import get_protocol

    return {
        "max_wave": sizing["requests"] + 3,
        "response_bound": get_protocol("dp-pause").parameter("response_bound").default,
    }


# What replay may assume of this recorder (``lockstep replay --profile vllm-dp-pause``): the actions
# above are left out, and the client resumes without waiting for control messages to settle.
PROFILE = RecorderProfile("vllm-dp-pause", "dp-pause", tuple(UNRECORDED), {"settle_before_resume": 0}, _profile_values)
CALLS = {
    "pause_scheduler": "client_pause",
    "collective_rpc": "client_collective_rpc",
    "resume_scheduler": "client_resume",
}  # the utilities the model has, by the client's event


@dataclass
class Targets:
    """What to patch: the engine-core class (``DPEngineCoreProc``), the class with the engine-level
    all-reduces (``ParallelConfig``), the module holding the worker's DP all-reduce ``_run_ar``, and
    the client class (``DPLBAsyncMPClient``). Any may be None (not patched)."""

    engine: type | None = None
    parallel_config: type | None = None
    worker_dp: Any = None
    client: type | None = None
    sync_interval: int = SYNC_INTERVAL


def header_parameters(ranks: int, sync_interval: int) -> dict[str, Any]:
    """The model's parameters for the trace header: the run's ranks and sync interval, the
    client's no-settling resume, the unrecorded actions, then ``$LOCKSTEP_TRACE_PARAMETERS``."""
    values: dict[str, Any] = {
        "ranks": ranks,
        "sync_interval": sync_interval,
        "settle_before_resume": 0,
        "unrecorded": list(UNRECORDED),
    }
    values.update(json.loads(os.environ.get(PARAMETERS_ENVIRONMENT) or "{}"))
    return record.parameters("dp-pause", **values)


def _field(outputs: Any, name: str) -> Any:
    """A field of an output item (vLLM's ``EngineCoreOutputs`` attribute, or a mapping's key)."""
    return outputs.get(name) if isinstance(outputs, dict) else getattr(outputs, name, None)


def modelled(request_type: Any, request: Any) -> str | None:
    """The model's name for an input item: ADD, START_DP_WAVE or the utility's method; else None."""
    name = getattr(request_type, "name", str(request_type))
    if name in ("ADD", "START_DP_WAVE"):
        return name
    if name == "UTILITY" and request[2] in CALLS:
        return str(request[2])
    return None


class EngineTrace:
    """The recording of one engine core: its recorder, the model's position of its core thread
    (``mode``), and what the patched functions tell each other."""

    def __init__(self, engine: Any, recorder: record.TraceRecorder, post_fix: bool, sync_interval: int) -> None:
        self.engine, self.recorder, self.post_fix, self.sync_interval = engine, recorder, post_fix, sync_interval
        self.rank = int(engine.dp_rank)
        self.actor = f"rank:{self.rank}"
        self.mode = "TOP"
        self.outputs = HeldOutputs(engine.output_queue)
        engine.output_queue = self.outputs
        engine.input_queue = TakenInputs(engine.input_queue, self)
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
            "step_counter": int(engine.step_counter) % self.sync_interval,
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
        """Write ``action`` with the send clocks of the held outputs, then hand those on."""
        items = self.outputs.take_held()
        clock: dict[str, int] = {}
        for client_index, outputs in items:
            if client_index == -1 and (
                _field(outputs, "start_wave") is not None or _field(outputs, "wave_complete") is not None
            ):
                clock.update(self.recorder.send(f"{self.actor}>coordinator"))
            elif client_index != -1 and _field(outputs, "utility_output") is not None:
                clock.update(self.recorder.send(f"{self.actor}>client"))
        self.recorder.event(action, {"rank": self.rank}, self.observed(**overrides), clock or None)
        self.outputs.release_held(items)

    def arrived(self, item: Any) -> None:
        kind = modelled(*item)
        if kind == "START_DP_WAVE":  # the coordinator is unrecorded: no receive clock
            self.recorder.event("arrive_from_coordinator", {"rank": self.rank})
        elif kind is not None:
            self.recorder.event(
                "arrive_from_client", {"rank": self.rank}, clock=self.recorder.receive(f"client>{self.actor}")
            )

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        self.outputs.hold()
        try:
            yield
        finally:
            self.outputs.unhold()


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


def _patch_engine(engine_class: type, sync_interval: int, undo: list[Callable[[], None]]) -> None:
    def run_busy_loop(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any) -> Any:
            global _active
            parameters = header_parameters(int(self.dp_size), sync_interval)
            post_fix = hasattr(self, "pending_pause")  # v0.21.0's two-phase pause state; v0.20.0 has none
            variant = os.environ.get(VARIANT_ENVIRONMENT) or ("post-fix" if post_fix else "pre-fix")
            recorder = record.from_environment(f"rank:{self.dp_rank}", "dp-pause", variant, parameters)
            if recorder is None:
                return original(self)
            _active = EngineTrace(self, recorder, post_fix, sync_interval)
            try:
                return original(self)
            finally:
                recorder.close()

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
            with trace.recorder.collective("worker_world", "rpc"):  # the body's collective spans every rank
                return original(self, *args, **kwargs)

        return wrapper

    def notify_idle_state_callbacks(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any) -> Any:
            trace = _trace(self)
            if trace is None or not self._idle_state_callbacks:
                return original(self)
            with trace.holding():
                result = original(self)
                trace.mode = "TOP"
                trace.event("notify_idle")
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

    for name, make in (
        ("run_busy_loop", run_busy_loop),
        ("_handle_client_request", handle_client_request),
        ("collective_rpc", collective_rpc),
        ("_notify_idle_state_callbacks", notify_idle_state_callbacks),
        ("_process_engine_step", process_engine_step),
        ("_has_global_unfinished_reqs", has_global_unfinished_reqs),
        ("_handle_shutdown", handle_shutdown),
        ("resume_scheduler", resume_scheduler),
    ):
        _patch(engine_class, name, make, undo)


def _engine_sync(trace: EngineTrace, op: str, call: Callable[[], Any]) -> Any:
    """The sync all-reduce of ``_has_global_unfinished_reqs``: finish_forward before it, and the
    outputs held until finish_sync (``_handle_shutdown``)."""
    trace.mode = "SYNC"
    trace.event("finish_forward")
    trace.outputs.hold()
    trace.finish_sync_pending = trace.synced = True
    with trace.recorder.collective("engine_dp", op):
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
            with trace.recorder.collective("engine_dp", "resume_max"):
                result = original(*args, **kwargs)
            trace.mode = "TOP"
            return result

        return wrapper

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
            with trace.recorder.collective("worker_dp", "forward"):
                return original(*args, **kwargs)

        return wrapper

    _patch(module, "_run_ar", run_ar, undo)


def install(targets: Targets) -> Callable[[], None]:
    """Patch what ``targets`` names; returns the function that undoes every patch."""
    undo: list[Callable[[], None]] = []
    if targets.engine is not None:
        _patch_engine(targets.engine, targets.sync_interval, undo)
    if targets.parallel_config is not None:
        _patch_parallel_config(targets.parallel_config, undo)
    if targets.worker_dp is not None:
        _patch_worker_dp(targets.worker_dp, undo)
    if targets.client is not None:
        from lockstep.instrumentation.vllm_dp_pause_client import patch_client

        patch_client(targets.client, targets.sync_interval, undo)

    def uninstall() -> None:
        while undo:
            undo.pop()()

    return uninstall


def install_vllm() -> Callable[[], None]:
    """Patch vLLM v0.21.0 (``DPEngineCoreProc``, ``ParallelConfig``, ``dp_utils._run_ar``,
    ``DPLBAsyncMPClient``); call it in every process before the engine core or client starts."""
    from vllm.config import ParallelConfig  # type: ignore[import-not-found]
    from vllm.v1.engine.core import DPEngineCoreProc  # type: ignore[import-not-found]
    from vllm.v1.engine.core_client import DPLBAsyncMPClient  # type: ignore[import-not-found]
    from vllm.v1.worker import dp_utils  # type: ignore[import-not-found]

    return install(Targets(DPEngineCoreProc, ParallelConfig, dp_utils, DPLBAsyncMPClient))


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
    "VARIANT_ENVIRONMENT",
    "SYNC_INTERVAL",
    "UNRECORDED",
    "Targets",
    "header_parameters",
    "install",
    "install_runtime",
    "install_vllm",
]
