"""One DP engine core of dp-pause (vLLM ``DPEngineCoreProc`` with its workers), in one rank process.

The class has vLLM v0.21.0's shape at every point the dp-pause instrumentation
(``lockstep.instrumentation.vllm_dp_pause``) patches, so the patch written for vLLM is tested on
it: ``run_busy_loop`` → ``_handle_shutdown``, ``_process_input_queue`` (idle: fire
``_notify_idle_state_callbacks``, block on ``input_queue.get()``; then drain), ``_process_engine_step``
(a real forward when a request is scheduled), ``execute_dummy_batch`` while the wave runs, and
``_has_global_unfinished_reqs`` (every ``sync_interval`` forwards the engine-level all-reduce
``ParallelConfig.sync_dp_state``, pre-fix ``has_unfinished_dp``); ``_handle_client_request`` with
``(request_type, request)`` items, ``add_request``, ``pause_scheduler``/``_pause_complete`` (a
``concurrent.futures.Future`` resolved by an idle callback), ``collective_rpc`` (its body an
all-reduce on ``worker_world``, in the core thread) and ``resume_scheduler``; vLLM's attribute
names ``engines_running``, ``current_wave``, ``step_counter``, ``pending_pause`` and
``ignore_start_dp_wave`` (post-fix only, as in vLLM), ``scheduler`` (``surface.Scheduler``),
``input_queue``, ``output_queue`` (``surface.OutputQueue``), ``_idle_state_callbacks``. Every
forward posts the workers' DP all-reduce through ``surface.coordinate_batch_across_dp`` →
``_run_ar``.

The runtime's own recording (``--trace-dir``) records each state change under the model action it
mirrors, with the rank's projected state in ``observed`` (``mode`` is the model's position of the
core thread, kept for that). A message is sent only after the event that sends it is on file
(the output queue holds it until ``record``), and the emptiness check of the input queue and
the ``step`` or ``notify_idle`` it enables are recorded with the queue held (``InputQueue.held``),
as the arrival thread records arrivals under the same lock. Without ``--trace-dir`` the runtime
records nothing and sends at once, so an installed instrumentation writes the only trace.

The arrival thread reads the two sockets (client, coordinator) into per-source FIFO buffers and
moves messages into the input queue: which source goes next and how late is asked of the choice
source, among the messages the scenario lets arrive.
"""

from __future__ import annotations

import collections
import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any

from lockstep.impl.choices import ChoiceSource
from lockstep.impl.distributed import Collective, Groups
from lockstep.impl.dp_pause.parameters import DpPauseConfig
from lockstep.impl.dp_pause.scenario import Arrivals, Progress
from lockstep.impl.dp_pause.surface import (
    DPGroup,
    EngineCoreOutputs,
    EngineCoreRequestType,
    OutputQueue,
    ParallelConfig,
    PauseState,
    Scheduler,
    coordinate_batch_across_dp,
)
from lockstep.impl.runtime import InputQueue, Recorder, StatusBoard, ready, receive
from lockstep.models.dp_pause.model import POST_FIX
from lockstep.traces import JSONValue
from lockstep.traces.recorder import Projection, RawObject

DELAYS_MS = ("0", "1", "2")
# the model's per-rank variables each rank observes (``mode`` is the model's position of the core thread)
OBSERVED = (
    "mode",
    "engines_running",
    "current_wave",
    "step_counter",
    "pause_state",
    "requests",
    "finished_pending",
    "pause_future",
)
OBSERVED_POST_FIX = ("pending_pause", "ignore_start_dp_wave")
CALLS = {"pause_scheduler": "PAUSE", "collective_rpc": "RPC", "resume_scheduler": "RESUME"}  # utility → wire kind
RequestType = EngineCoreRequestType


class PauseInFlight(RuntimeError):
    """resume_scheduler while the two-phase pause is in flight (the caller gets an error reply)."""


class DPEngineCoreProc:
    """The engine core of one rank; ``run_busy_loop`` returns when the client shut it down."""

    def __init__(
        self,
        config: DpPauseConfig,
        groups: Groups,
        client: Connection,
        coordinator: Connection,
        recorder: Recorder,
        status: StatusBoard,
        choices: ChoiceSource,
        arrivals: Arrivals,
    ) -> None:
        self.config, self.dp_rank, self.dp_size = config, groups.rank, groups.world_size
        self.engine_index, self.has_coordinator = groups.rank, True
        self.actor = f"rank:{self.dp_rank}"
        self.fixed = config.variant == POST_FIX
        self.recorder, self.status, self.choices = recorder, status, choices
        self.recording = recorder.path is not None  # the runtime's own trace (--trace-dir)
        self.input_queue = InputQueue()
        self.output_queue = OutputQueue(client, coordinator, hold=self.recording)
        self.progress = Progress()
        self.worker_dp = Collective(groups, "worker_dp", recorder, status)
        self.worker_world = Collective(groups, "worker_world", recorder, status)
        self.dp_group = DPGroup(Collective(groups, "engine_dp", recorder, status), self.dp_size)
        self.scheduler = Scheduler()
        self.mode = "TOP"  # the model's position of the core thread (the runtime's own trace)
        self.engines_running, self.current_wave, self.step_counter = False, 0, 0
        if self.fixed:  # DPEngineCoreProc's two-phase pause state (v0.21.0)
            self.pending_pause, self.ignore_start_dp_wave = False, False
        self._idle_state_callbacks: list[Callable[[DPEngineCoreProc], None]] = []
        self.shutdown_requested, self.resume_barrier = False, False
        self.steps, self.step_nanoseconds, self.step_started = 0, 0, 0
        self.arrival = ArrivalThread(self, arrivals, client, coordinator)
        observed = [*OBSERVED, *(OBSERVED_POST_FIX if self.fixed else ())]  # the rank's entries, named by the model
        vocabulary = recorder.vocabulary
        self.projection = Projection(vocabulary, [vocabulary.entry(name, self.dp_rank) for name in observed])

    # ------------------------------------------------------------------------------- state
    def observed(self) -> RawObject:
        """The rank's entries of the model's variables (``OBSERVED``, then ``OBSERVED_POST_FIX``
        post-fix), encoded by the projection made from the vocabulary: this runs every step."""
        scheduler = self.scheduler
        step = self.step_counter % self.config.sync_interval
        requests = len(scheduler.waiting) + len(scheduler.running)
        values: list[JSONValue] = [
            self.mode,
            self.engines_running,
            self.current_wave,
            step,
            scheduler.pause_state.name,
            requests,
            bool(scheduler.finished_req_ids),
            bool(self._idle_state_callbacks),
        ]
        if self.fixed:
            values += [self.pending_pause, self.ignore_start_dp_wave]
        return self.projection.encode(*values)

    def record(self, event: str, flush: bool = True) -> None:
        """The runtime's own record of ``event``, with the send clocks of the messages the output queue
        holds; then those messages leave (a reply's effects never precede its send event)."""
        self.progress.handled += 1
        if not self.recording:  # nothing held: the output queue sends at once
            return
        items = self.output_queue.take()
        clock: dict[str, int] = {}
        for client_index, outputs in items:
            if client_index == -1 and (outputs.start_wave is not None or outputs.wave_complete is not None):
                clock.update(self.recorder.send(f"{self.actor}>coordinator"))
            elif outputs.utility_output is not None:
                clock.update(self.recorder.send(f"{self.actor}>client"))
        self.recorder.record(
            event, {"rank": self.dp_rank}, self.observed(), clock or None, flush=flush or bool(items)
        )  # a send is on file before its message leaves
        self.output_queue.release(items)

    def has_work(self) -> bool:
        return self.engines_running or self.scheduler.has_requests()

    # ------------------------------------------------------------------------------ the loop
    def run_busy_loop(self) -> None:
        self.arrival.start()
        try:
            while self._handle_shutdown():
                self._process_input_queue()
                executed = self._process_engine_step()
                if executed is None:  # a message arrived after the queue was drained: handle it first
                    continue
                local_unfinished_reqs = self.scheduler.has_unfinished_requests()
                if not executed:
                    if not local_unfinished_reqs and not self.engines_running:
                        continue
                    self.execute_dummy_batch()
                self.engines_running = self._has_global_unfinished_reqs(local_unfinished_reqs)
                synced, self.mode = self.mode == "SYNC", "TOP"
                if not self.engines_running:
                    if self.dp_rank == 0:
                        self.output_queue.put_nowait(
                            (-1, EngineCoreOutputs(self.dp_rank, wave_complete=self.current_wave))
                        )
                    self.current_wave += 1
                    self.step_counter = 0
                self.record("finish_sync" if synced else "finish_forward")
                self.step_nanoseconds += time.perf_counter_ns() - self.step_started
                self.status.count(steps=self.steps, step_ns=self.step_nanoseconds)
        finally:
            self.arrival.stop()

    def _handle_shutdown(self) -> bool:
        """False once the client asked to shut down and no work is left."""
        return not (self.shutdown_requested and not self.has_work())

    def _process_input_queue(self) -> None:
        """Block for messages while idle (firing idle callbacks first), then drain the queue. The
        emptiness check and the notify_idle it enables are recorded with the queue held, so no
        arrival is recorded between them (see ``_process_engine_step`` for the step)."""
        hold = self.arrival.arrivals.wait_before_core_event
        while not self.has_work() and not self.shutdown_requested:
            hold(self.progress)
            with self.input_queue.held():
                empty, waiting = self.input_queue.empty(), bool(self._idle_state_callbacks)
                self._notify_idle_state_callbacks()
                if waiting and empty:  # else the reply goes out with the next handled message's event
                    self.record("notify_idle")
            self.status.update("receive", "receive(input_queue)")
            request = self.input_queue.get()
            self.status.update("running")
            hold(self.progress)
            self._handle_client_request(*request)
        while not self.input_queue.empty():
            hold(self.progress)
            request = self.input_queue.get_nowait()
            if request is not None:
                self._handle_client_request(*request)

    def _notify_idle_state_callbacks(self) -> None:
        while self._idle_state_callbacks:
            callback = self._idle_state_callbacks.pop()
            callback(self)

    def _process_engine_step(self) -> bool | None:
        """schedule() and, if a request is scheduled, the real forward; whether it ran (None: a message
        arrived since the queue was drained). The check and the ``step`` event are atomic with
        arrivals; the event also says whether the loop goes on to a dummy forward."""
        hold = self.arrival.arrivals.wait_before_core_event
        hold(self.progress)
        with self.input_queue.held():
            if not self.input_queue.empty():
                return None
            if not self.has_work():
                return False
            self.step_started = time.perf_counter_ns()
            executed = self.scheduler.schedule()
            dummy = not executed and (self.scheduler.has_unfinished_requests() or self.engines_running)
            self.mode = "FORWARD_REAL" if executed else "FORWARD_DUMMY" if dummy else "TOP"
            self.record("step", flush=not (executed or dummy))  # with a forward, written with its enter
        if executed:
            self.execute_model()
        return executed

    def execute_model(self) -> None:
        """The real forward: the workers' DP all-reduce, then the scheduled requests finish."""
        coordinate_batch_across_dp(self.worker_dp, len(self.scheduler.waiting), self.dp_size, self.dp_rank)
        finished = self.scheduler.update_from_output()
        self.output_queue.put_nowait((0, EngineCoreOutputs(self.dp_rank, finished_requests=finished)))

    def execute_dummy_batch(self) -> None:
        coordinate_batch_across_dp(self.worker_dp, 1, self.dp_size, self.dp_rank)

    def _has_global_unfinished_reqs(self, local_unfinished: bool) -> bool:
        """Count the forward; every sync_interval-th, the engine all-reduce decides the wave."""
        self.steps += 1
        self.step_counter += 1
        if self.step_counter % self.config.sync_interval != 0:
            return True
        self.mode = "SYNC"
        self.record("finish_forward", flush=False)  # written with the sync's enter
        if not self.fixed:
            return ParallelConfig.has_unfinished_dp(self.dp_group, local_unfinished)
        has_unfinished, pause_consensus = ParallelConfig.sync_dp_state(
            self.dp_group, has_unfinished=local_unfinished, pending_pause=self.pending_pause
        )
        if pause_consensus:
            self.ignore_start_dp_wave = True
            self.pending_pause = False
        return has_unfinished

    # ----------------------------------------------------------------------------- requests
    def _handle_client_request(self, request_type: EngineCoreRequestType, request: Any) -> None:
        """Dispatch one input-queue item, then record the event it was (the runtime's own trace)."""
        if request_type == RequestType.SHUTDOWN:
            self.shutdown_requested = True
            return
        if request_type == RequestType.ARRIVAL_FAILED:
            raise RuntimeError(f"{self.actor}: the arrival thread failed: {request}")
        if request_type == RequestType.START_DP_WAVE:
            if not (self.fixed and self.ignore_start_dp_wave):
                new_wave, exclude_engine_index = request
                if exclude_engine_index != self.engine_index and new_wave >= self.current_wave:
                    self.current_wave = new_wave
                    self.engines_running = True
            self.record("handle_start_wave")
        elif request_type == RequestType.ADD:
            self.add_request(*request)
            self.record("handle_add")
        elif request_type == RequestType.UTILITY:
            _, _, method_name, args = request
            self.resume_barrier = False
            self._invoke_utility_method(method_name, args)
            if method_name == "pause_scheduler":
                self.record("handle_pause")
            elif method_name == "collective_rpc":
                self.record("finish_collective_rpc")
            else:
                self.record("finish_resume" if self.resume_barrier else "handle_resume")
        else:
            raise RuntimeError(f"{self.actor}: unknown request type {request_type!r}")

    def _invoke_utility_method(self, method_name: str, args: tuple[Any, ...]) -> None:
        """Call the utility; reply now, or when the Future it returns resolves (an error is a reply too)."""

        def enqueue_output(future: Future[Any] | None = None) -> None:
            if CALLS[method_name] == "PAUSE":
                self.progress.pause_replied = True
            self.output_queue.put_nowait((0, EngineCoreOutputs(self.dp_rank, utility_output=CALLS[method_name])))

        try:
            result = getattr(self, method_name)(*args)
        except PauseInFlight:  # vLLM replies with the failure message (a collective's failure is no reply)
            result = None
        if isinstance(result, Future):
            result.add_done_callback(enqueue_output)
        else:
            enqueue_output()

    def add_request(self, request: int, request_wave: int = 0) -> None:
        """Adopt a newer wave; a stale wave wakes an idle, unpaused engine (start_wave to the coordinator)."""
        self.scheduler.waiting.append(request)
        if self.has_coordinator and request_wave != self.current_wave:
            if request_wave > self.current_wave:
                self.current_wave = request_wave
            elif not self.engines_running and self.scheduler.pause_state == PauseState.UNPAUSED:
                self.engines_running = True
                self.output_queue.put_nowait((-1, EngineCoreOutputs(self.dp_rank, start_wave=self.current_wave)))

    def pause_scheduler(self, mode: str = "keep", clear_cache: bool = True) -> Future[Any] | None:
        """mode keep: PAUSED_ALL; None when the pause completed at once, else a Future an idle callback resolves."""

        def engine_idle_callback(engine: DPEngineCoreProc, future: Future[Any]) -> None:
            future.set_result(None)

        self.scheduler.set_pause_state(PauseState.PAUSED_ALL)
        if self._pause_complete():
            return None
        future: Future[Any] = Future()
        self._idle_state_callbacks.append(functools.partial(engine_idle_callback, future=future))
        return future

    def _pause_complete(self) -> bool:
        """Pre-fix: complete when idle. Post-fix (two-phase): vote, kick-start the loop, always defer."""
        if not self.fixed:
            return not self.has_work()
        self.pending_pause = True
        self.engines_running = True
        return False

    def collective_rpc(
        self,
        method: str,
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> list[Any]:
        """The body (a weight update across every rank) runs in the core thread: worker_world all-reduce."""
        self.mode = "RPC"
        self.record("handle_collective_rpc")
        self.progress.rpc_started = True
        self.worker_world.all_reduce("rpc", [1] * 16, "sum")
        self.mode = "TOP"
        return [None]

    def resume_scheduler(self) -> None:
        """Pre-fix: unpause (+ start_wave). Post-fix: error while the pause is in flight, no-op while
        running, else unpause and the has_unfinished_dp barrier."""
        if not self.fixed:
            wake = not self.engines_running and bool(self.scheduler.waiting)
            self.scheduler.set_pause_state(PauseState.UNPAUSED)
            if wake:
                self.output_queue.put_nowait((-1, EngineCoreOutputs(self.dp_rank, start_wave=self.current_wave)))
            return
        if self.pending_pause or (self.engines_running and self.ignore_start_dp_wave):
            raise PauseInFlight("resume_scheduler called while pause is still in flight")
        if self.engines_running:
            return
        self.scheduler.set_pause_state(PauseState.UNPAUSED)
        self.ignore_start_dp_wave = False
        self.mode, self.resume_barrier = "RESUME_BARRIER", True
        self.record("handle_resume")
        has_global_unfinished = ParallelConfig.has_unfinished_dp(
            self.dp_group, self.scheduler.has_unfinished_requests(), op="resume_max"
        )
        self.mode = "TOP"
        if has_global_unfinished:
            self.engines_running = True


Engine = DPEngineCoreProc


def queue_item(message: dict[str, Any]) -> tuple[EngineCoreRequestType, Any]:
    """A wire message as an input-queue item ``(request_type, request)`` in vLLM's layout."""
    kind = message["kind"]
    if kind == "ADD":
        return RequestType.ADD, (message["request"], int(message["wave"]))
    if kind == "START_WAVE":
        return RequestType.START_DP_WAVE, (int(message["wave"]), message["exclude"])
    if kind in ("PAUSE", "RPC", "RESUME"):
        method = {call: name for name, call in CALLS.items()}[kind]
        args: tuple[Any, ...] = ("keep",) if kind == "PAUSE" else ("update_weights",) if kind == "RPC" else ()
        return RequestType.UTILITY, (0, 0, method, args)
    if kind == "SHUTDOWN":
        return RequestType.SHUTDOWN, None
    raise RuntimeError(f"unknown message {message!r}")


class ArrivalThread(threading.Thread):
    """Moves messages from the client and coordinator sockets into the engine's input queue."""

    def __init__(
        self, engine: DPEngineCoreProc, arrivals: Arrivals, client: Connection, coordinator: Connection
    ) -> None:
        super().__init__(name=f"arrivals-{engine.dp_rank}", daemon=True)
        self.engine, self.arrivals = engine, arrivals
        self.channels = {"client": client, "coordinator": coordinator}
        self.buffers: dict[str, collections.deque[Any]] = {name: collections.deque() for name in self.channels}
        self.open = dict.fromkeys(self.channels, True)
        self.stopping = threading.Event()
        self.failure: BaseException | None = None

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as error:  # surfaced by the process's exit status
            self.failure = error
            self.engine.input_queue.put_many([(RequestType.ARRIVAL_FAILED, repr(error))])

    def _loop(self) -> None:
        engine, actor = self.engine, self.engine.actor
        while not self.stopping.is_set():
            live = [connection for name, connection in self.channels.items() if self.open[name]]
            if not live:
                return
            for connection in ready(live, timeout=0.005):
                name = next(n for n, c in self.channels.items() if c is connection)
                try:
                    message = receive(connection)
                except (EOFError, OSError):
                    self.open[name] = False
                    continue
                if message["kind"] == "SHUTDOWN":  # not a protocol message: straight to the queue
                    engine.input_queue.put_many([queue_item(message)])
                else:
                    self.buffers[name].append(message)
            while True:
                counts = {
                    name: self.arrivals.ready(name, buffer, engine.progress) for name, buffer in self.buffers.items()
                }
                names = [name for name, count in counts.items() if count]
                scripted = engine.choices.peek(actor, "arrival", self.channels)
                if not names or (scripted is not None and scripted not in names):
                    break  # nothing may arrive yet, or the scripted source has nothing yet
                name = engine.choices.choose(actor, "arrival", names)
                delay = int(engine.choices.choose(actor, "delay", DELAYS_MS))
                if delay:
                    time.sleep(delay / 1000)
                batch = [self.buffers[name].popleft() for _ in range(counts[name])]
                engine.input_queue.put_many(
                    [queue_item(message) for message in batch], announce=functools.partial(self.announce, name, batch)
                )

    def announce(self, name: str, batch: list[dict[str, Any]]) -> None:
        """Note the batch's arrivals (with the queue held: see ``InputQueue``), recording them in the
        runtime's own trace when it is on."""
        engine, actor = self.engine, self.engine.actor
        event = "arrive_from_client" if name == "client" else "arrive_from_coordinator"
        for message in batch:
            if engine.recording:
                engine.recorder.record(
                    event, {"rank": engine.dp_rank}, None, engine.recorder.receive(f"{name}>{actor}")
                )
            kind = message["kind"]
            engine.progress.got_request |= kind == "ADD"
            engine.progress.pause_delivered |= kind == "PAUSE"
            engine.progress.start_wave_delivered |= kind == "START_WAVE"
            engine.progress.arrived += 1
