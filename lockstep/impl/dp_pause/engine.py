"""One DP engine core of dp-pause (vLLM ``DPEngineCoreProc`` with its workers), in one rank process.

The core thread runs the busy loop of ``run_busy_loop`` (v0.20.0 pre-fix, v0.21.0 post-fix):
drain the input queue (blocking while there is no work, after firing idle callbacks), then one
engine step: a real forward if a request is scheduled, else a dummy forward while the wave runs;
every forward posts the workers' DP all-reduce (``worker_dp``, a [4, dp_size] tensor as in
``coordinate_batch_across_dp``), and every ``sync_interval`` forwards the engine-level
all-reduce on the gloo ``engine_dp`` group (pre-fix MAX of [unfinished]; post-fix SUM of
[unfinished, pending_pause]). A ``collective_rpc`` runs its body, an all-reduce on
``worker_world``, in the core thread, as vLLM's does. Each state change is recorded under the
model action it mirrors, with the rank's projected state in ``observed``.

The arrival thread reads the two sockets (client, coordinator) into per-source FIFO buffers and
moves messages into the input queue: which source goes next and how late is asked of the choice
source, among the messages the scenario lets arrive. Its ``arrive_from_*`` events carry the
channel's receive number; the senders' events carry the matching send number. A message is
sent only after the event that sends it is on file (``outbox``), so no file records an effect of
a message before the sender's file records sending it, and the per-process files always merge.
"""

from __future__ import annotations

import collections
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from lockstep.impl.choices import ChoiceSource
from lockstep.impl.distributed import Collective, Groups
from lockstep.impl.dp_pause.scenario import Arrivals, Progress
from lockstep.impl.runtime import InputQueue, RawObject, Recorder, RunConfig, StatusBoard, ready, receive
from lockstep.models.dp_pause.model import POST_FIX, RUNTIME_ACTIONS

DELAYS_MS = ("0", "1", "2")
UNPAUSED, PAUSED_ALL = "UNPAUSED", "PAUSED_ALL"


class Engine:
    """The engine core of one rank; ``run`` returns when the client shut it down."""

    def __init__(self, config: RunConfig, groups: Groups, client: Connection, coordinator: Connection,
                 recorder: Recorder, status: StatusBoard, choices: ChoiceSource, arrivals: Arrivals) -> None:
        self.config, self.rank, self.size = config, groups.rank, groups.world_size
        self.actor = f"rank:{self.rank}"
        self.fixed = config.variant == POST_FIX
        self.client, self.coordinator = client, coordinator
        self.recorder, self.status, self.choices = recorder, status, choices
        self.queue = InputQueue()
        self.progress = Progress()
        self.send_lock = threading.Lock()
        self.outbox: list[tuple[Connection, dict[str, Any]]] = []  # sent once the event sending them is on file
        self.worker_dp = Collective(groups, "worker_dp", recorder, status)
        self.engine_dp = Collective(groups, "engine_dp", recorder, status)
        self.worker_world = Collective(groups, "worker_world", recorder, status)
        self.mode, self.running, self.wave, self.counter = "TOP", False, 0, 0
        self.pause_state, self.finished_pending = UNPAUSED, False
        self.requests: list[int] = []
        self.pause_future, self.pending_pause, self.ignore_wave = False, False, False
        self.shutdown_requested = False
        self.steps, self.step_nanoseconds, self.step_started = 0, 0, 0
        self.arrival = ArrivalThread(self, arrivals)

    # ------------------------------------------------------------------------------- state
    def observed(self) -> RawObject:
        """The rank's entries of the model's variables (JSON built directly: this runs every step)."""
        r = self.rank
        text = (f'{{"mode[{r}]":"{self.mode}","engines_running[{r}]":{_json(self.running)},'
                f'"current_wave[{r}]":{self.wave},"step_counter[{r}]":{self.counter},'
                f'"pause_state[{r}]":"{self.pause_state}","requests[{r}]":{len(self.requests)},'
                f'"finished_pending[{r}]":{_json(self.finished_pending)},"pause_future[{r}]":{_json(self.pause_future)}')
        if self.fixed:
            text += f',"pending_pause[{r}]":{_json(self.pending_pause)},"ignore_start_dp_wave[{r}]":{_json(self.ignore_wave)}'
        return RawObject(text + "}")

    def record(self, event: str, clock: dict[str, int] | None = None, flush: bool = True) -> None:
        """Record the event, then send the messages it sent (a reply's effects never precede its send event)."""
        self.recorder.record(RUNTIME_ACTIONS[event], {"rank": self.rank}, self.observed(), clock,
                             flush=flush or bool(self.outbox))  # a send is on file before its message leaves
        self.progress.handled += 1
        while self.outbox:
            connection, message = self.outbox.pop(0)
            self._send(connection, message)

    def unfinished(self) -> bool:
        """scheduler.get_num_unfinished_requests() > 0 (0 when PAUSED_ALL)."""
        return self.pause_state != PAUSED_ALL and bool(self.requests)

    def has_work(self) -> bool:
        return self.running or self.unfinished() or self.finished_pending

    # ------------------------------------------------------------------------- messages out
    def _send(self, connection: Connection, message: dict[str, Any]) -> None:
        with self.send_lock:
            connection.send(message)

    def reply(self, call: str) -> dict[str, int]:
        if call == "PAUSE":
            self.progress.pause_replied = True
        self.outbox.append((self.client, {"kind": "REPLY", "call": call, "rank": self.rank}))
        return self.recorder.send(f"{self.actor}>client")

    def report(self, kind: str, wave: int) -> dict[str, int]:
        self.outbox.append((self.coordinator, {"kind": kind, "wave": wave, "rank": self.rank}))
        return self.recorder.send(f"{self.actor}>coordinator")

    def fire_idle_callbacks(self) -> dict[str, int]:
        """_notify_idle_state_callbacks: resolve the pause future if the engine is idle."""
        if self.pause_future and not self.has_work():
            self.pause_future = False
            return self.reply("PAUSE")
        return {}

    # ------------------------------------------------------------------------------ the loop
    def run(self) -> None:
        self.arrival.start()
        try:
            while (forward := self.process_input_queue()) is not None:
                if forward:
                    self.forward(forward == "real")
        finally:
            self.arrival.stop()

    def process_input_queue(self) -> str | None:
        """Block for messages while idle (firing idle callbacks first), then drain; once the queue is
        found empty with work to do, begin the step. Returns the step's forward ("real", "dummy", or
        "" for none) or None: shut down. The emptiness check and the event it enables (notify_idle,
        step) are recorded with the queue held, so no arrival is recorded between them."""
        hold = self.arrival.arrivals.wait_before_core_event
        while True:
            while not self.has_work():
                if self.shutdown_requested:
                    return None
                hold(self.progress)
                with self.queue.held():
                    if self.pause_future and self.queue.empty():
                        clock = self.fire_idle_callbacks()
                        self.record("notify_idle", clock)
                self.status.update("receive", "receive(input_queue)")
                message = self.queue.get()
                self.status.update("running")
                hold(self.progress)
                self.handle(message)
            while True:
                hold(self.progress)
                with self.queue.held():
                    if (message := self.queue.get_nowait()) is None:
                        return self.begin_step() if self.has_work() else ""
                self.handle(message)

    def handle(self, message: dict[str, Any]) -> None:
        kind = message["kind"]
        if kind == "SHUTDOWN":
            self.shutdown_requested = True
            return
        clock = self.fire_idle_callbacks()
        if kind == "ADD":
            self.handle_add(message, clock)
        elif kind == "START_WAVE":
            self.handle_start_wave(message, clock)
        elif kind == "PAUSE":
            self.handle_pause(clock)
        elif kind == "RPC":
            self.handle_collective_rpc(clock)
        elif kind == "RESUME":
            self.handle_resume(clock)
        else:
            raise RuntimeError(f"{self.actor}: unknown message {message!r}")

    def handle_add(self, message: dict[str, Any], clock: dict[str, int]) -> None:
        """add_request: adopt a newer wave; a stale wave wakes an idle, unpaused engine (start_wave)."""
        request_wave = int(message["wave"])
        wake = request_wave < self.wave and not self.running and self.pause_state == UNPAUSED
        self.requests.append(message["request"])
        self.wave = max(self.wave, request_wave)
        if wake:
            self.running = True
            clock = {**clock, **self.report("START_WAVE", self.wave)}
        self.record("handle_add", clock)

    def handle_start_wave(self, message: dict[str, Any], clock: dict[str, int]) -> None:
        """START_DP_WAVE: join unless excluded or stale (post-fix: or ignoring after the consensus)."""
        excluded = message["exclude"] is not None and message["exclude"] == self.rank
        applies = not excluded and message["wave"] >= self.wave and not (self.fixed and self.ignore_wave)
        if applies:
            self.wave, self.running = int(message["wave"]), True
        self.record("handle_start_wave", clock)

    def handle_pause(self, clock: dict[str, int]) -> None:
        """pause_scheduler(mode="keep"): PAUSED_ALL; pre-fix replies at once if idle, post-fix defers."""
        self.pause_state = PAUSED_ALL
        if self.fixed:  # _pause_complete: vote, kick-start the loop, always defer
            self.pending_pause, self.running, self.pause_future = True, True, True
        elif self.has_work():
            self.pause_future = True
        else:
            clock = {**clock, **self.reply("PAUSE")}
        self.record("handle_pause", clock)

    def handle_collective_rpc(self, clock: dict[str, int]) -> None:
        """collective_rpc: the body (a weight update across every rank) runs in the core thread."""
        self.mode = "RPC"
        self.record("handle_collective_rpc", clock)
        self.progress.rpc_started = True
        self.worker_world.all_reduce("rpc", [1] * 16, "sum")
        self.mode = "TOP"
        self.record("finish_collective_rpc", self.reply("RPC"))

    def handle_resume(self, clock: dict[str, int]) -> None:
        """resume_scheduler: pre-fix unpause (+ start_wave); post-fix error / no-op / unpause + barrier."""
        if not self.fixed:
            wake = not self.running and bool(self.requests)
            self.pause_state = UNPAUSED
            if wake:
                clock = {**clock, **self.report("START_WAVE", self.wave)}
            self.record("handle_resume", {**clock, **self.reply("RESUME")})
            return
        in_flight = self.pending_pause or (self.running and self.ignore_wave)
        if in_flight or self.running:  # error (pause still in flight) or no-op: reply now
            self.record("handle_resume", {**clock, **self.reply("RESUME")})
            return
        self.pause_state, self.ignore_wave, self.mode = UNPAUSED, False, "RESUME_BARRIER"
        self.record("handle_resume", clock)
        result = self.engine_dp.all_reduce("resume_max", [1 if self.requests else 0], "max")
        self.running, self.mode = result[0] > 0, "TOP"
        self.record("finish_resume", self.reply("RESUME"))

    def begin_step(self) -> str:
        """_process_engine_step: a real forward if a request is scheduled, else the dummy batch while
        the wave runs (or nothing). Returns the forward: "real", "dummy" or ""."""
        self.step_started = time.perf_counter_ns()
        executed = self.pause_state == UNPAUSED and bool(self.requests)
        dummy = not executed and (self.unfinished() or self.running)
        self.finished_pending = False
        self.mode = "FORWARD_REAL" if executed else "FORWARD_DUMMY" if dummy else "TOP"
        self.record("step", flush=not (executed or dummy))  # with a forward, written with its enter
        return "real" if executed else "dummy" if dummy else ""

    def forward(self, executed: bool) -> None:
        """The forward's DP all-reduce, then the step's end."""
        counts = [0] * (4 * self.size)
        counts[self.rank] = len(self.requests) if executed else 1  # num tokens (a dummy batch: 1)
        self.worker_dp.all_reduce("forward", counts, "sum", shape=(4, self.size))
        self.finish_forward(executed)
        self.step_nanoseconds += time.perf_counter_ns() - self.step_started
        self.status.count(steps=self.steps, step_ns=self.step_nanoseconds)

    def finish_forward(self, real: bool) -> None:
        """The forward returned; _has_global_unfinished_reqs counts the step (and syncs on the boundary)."""
        self.steps += 1
        finished = self.requests if real else []
        self.finished_pending = self.finished_pending or (real and bool(self.requests))
        if real:
            self.requests = []
        for request in finished:
            self._send(self.client, {"kind": "OUTPUT", "request": request, "rank": self.rank})
        local = 1 if self.pause_state != PAUSED_ALL and self.requests else 0
        sync = self.counter + 1 == self.config.sync_interval
        self.counter = 0 if sync else self.counter + 1
        if not sync:
            self.running = True
        self.mode = "SYNC" if sync else "TOP"
        self.record("finish_forward", flush=not sync)  # on the boundary, written with the sync's enter
        if not sync:
            return
        if self.fixed:
            total = self.engine_dp.all_reduce("sync_sum", [local, 1 if self.pending_pause else 0], "sum")
            consensus = total[1] == self.size
            still = total[0] > 0 or total[1] % self.size != 0
            self.ignore_wave = self.ignore_wave or consensus
            self.pending_pause = self.pending_pause and not consensus
        else:
            still = self.engine_dp.all_reduce("sync_max", [local], "max")[0] > 0
        self.running, self.mode = still, "TOP"
        clock: dict[str, int] = {}
        if not still:
            if self.rank == 0:
                clock = self.report("WAVE_COMPLETE", self.wave)
            self.wave += 1
        self.record("finish_sync", clock)


def _json(flag: bool) -> str:
    return "true" if flag else "false"


class ArrivalThread(threading.Thread):
    """Moves messages from the client and coordinator sockets into the engine's input queue."""

    def __init__(self, engine: Engine, arrivals: Arrivals) -> None:
        super().__init__(name=f"arrivals-{engine.rank}", daemon=True)
        self.engine, self.arrivals = engine, arrivals
        self.channels = {"client": engine.client, "coordinator": engine.coordinator}
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
            self.engine.queue.put_many([{"kind": "ARRIVAL_FAILED", "error": repr(error)}])

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
                    engine.queue.put_many([message])
                else:
                    self.buffers[name].append(message)
            while True:
                counts = {name: self.arrivals.ready(name, buffer, engine.progress) for name, buffer in self.buffers.items()}
                names = [name for name, count in counts.items() if count]
                scripted = engine.choices.peek(actor, "arrival")
                if not names or (scripted is not None and scripted not in names):
                    break  # nothing may arrive yet, or the scripted source has nothing yet
                name = engine.choices.choose(actor, "arrival", names)
                delay = int(engine.choices.choose(actor, "delay", DELAYS_MS))
                if delay:
                    time.sleep(delay / 1000)
                batch = [self.buffers[name].popleft() for _ in range(counts[name])]
                engine.queue.put_many(batch, announce=lambda: self.announce(name, batch))

    def announce(self, name: str, batch: list[dict[str, Any]]) -> None:
        """Record the batch's arrivals (with the queue held: see ``InputQueue``)."""
        engine, actor = self.engine, self.engine.actor
        event = "arrive_from_client" if name == "client" else "arrive_from_coordinator"
        for message in batch:
            engine.recorder.record(RUNTIME_ACTIONS[event], {"rank": engine.rank}, None, engine.recorder.receive(f"{name}>{actor}"))
            kind = message["kind"]
            engine.progress.got_request |= kind == "ADD"
            engine.progress.pause_delivered |= kind == "PAUSE"
            engine.progress.start_wave_delivered |= kind == "START_WAVE"
            engine.progress.arrived += 1
