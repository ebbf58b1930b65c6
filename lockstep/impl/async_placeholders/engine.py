"""The engine of async-placeholders in one rank process: the scheduler loop, the runner thread, the copy thread.

The main thread is the engine core's busy loop (``step_with_batch_queue`` with a batch queue of
two): at each turn the choice source picks among what the loop may do (schedule a step while
fewer than two are in flight, process the oldest step's output, a sync KV-load failure while
nothing is in flight); processing blocks until the runner has handed the step back and its
sampled ids have landed on the host. The runner thread (the last PP rank's worker) takes the
scheduled steps in order and runs ``update_states``, ``sample`` and ``bookkeeping`` on each. The
copy thread lands each step's device-to-host copy when the choice source says (at once, or after
the next step is scheduled), so the repair of step N+1 and the scheduler's processing of step N
may find it in flight and wait.

Every state change is recorded under the model action it mirrors (checked against the model's vocabulary), as actor
``scheduler`` or ``runner``, with the tracked request's state in ``observed``; an event is
written before its effect is handed to the other thread (the scheduled step to the runner, the
output to the scheduler), and the ``send:``/``recv:`` clocks of the two queues say so.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import torch

from lockstep.impl.async_placeholders.batch import CopyThread
from lockstep.impl.async_placeholders.runner import Executed, ModelRunner
from lockstep.impl.async_placeholders.scheduler import ScenarioBounds, Scheduler, Step
from lockstep.impl.choices import ChoiceSource
from lockstep.impl.runtime import Recorder, StatusBoard

SCHEDULED, EXECUTED = "scheduled", "executed"


class Engine:
    """One engine core with its last-rank runner; ``run`` returns when the tracked request is done."""

    def __init__(
        self,
        variant: str,
        bounds: ScenarioBounds,
        background: int,
        device: torch.device,
        recorder: Recorder,
        status: StatusBoard,
        choices: ChoiceSource,
    ) -> None:
        self.bounds, self.recorder, self.status = bounds, recorder, status
        self.scheduler = Scheduler(bounds, background, choices)
        self.copies = CopyThread(choices, "copy")
        self.runner = ModelRunner(variant, bounds.num_spec_tokens, device, self.copies, choices)
        self.to_runner: queue.Queue[Step | None] = queue.Queue()
        self.to_scheduler: queue.Queue[Executed | BaseException] = queue.Queue()
        self.steps = 0
        self.error: BaseException | None = None

    def record(
        self,
        actor: str,
        event: str,
        args: dict[str, Any] | None,
        observed: dict[str, Any],
        clock: dict[str, int] | None = None,
    ) -> None:
        self.recorder.record(event, args or {}, observed, clock, actor=actor)

    # ------------------------------------------------------------------------ scheduler loop
    def run(self) -> None:
        runner = threading.Thread(target=self._runner_loop, name="lockstep-runner", daemon=True)
        self.copies.start()
        runner.start()
        scheduler = self.scheduler
        try:
            while True:
                options = scheduler.options()
                if not options:
                    break
                choice = scheduler.choices.choose("scheduler", "next", options)
                if choice == "schedule":
                    step, args = scheduler.schedule()
                    self.record("scheduler", "schedule", args, scheduler.observed(), self.recorder.send(SCHEDULED))
                    self.copies.step_scheduled()
                    self.to_runner.put(step)
                elif choice == "process":
                    self.status.update("receive", "receive(executed)")
                    executed = self.to_scheduler.get()
                    self.status.update("running")
                    if isinstance(executed, BaseException):
                        raise executed
                    sampled = self.copies.demand(executed.copy).tolist()  # get_output(): the copy has landed
                    scheduler.update_from_output(executed.step, executed.rows, sampled)
                    self.record(
                        "scheduler", "update_from_output", None, scheduler.observed(), self.recorder.receive(EXECUTED)
                    )
                else:
                    discarded = scheduler.kv_load_failure()
                    self.record("scheduler", "kv_load_failure", {"discarded": discarded}, scheduler.observed())
                self.status.count(steps=scheduler.steps)
        finally:
            self.to_runner.put(None)
            runner.join(timeout=10)
            self.copies.stop()
            self.copies.join(timeout=10)
        self.steps = scheduler.steps
        self.status.count(copy_waits_in_flight=self.copies.waited_in_flight)

    # --------------------------------------------------------------------------- runner thread
    def _runner_loop(self) -> None:
        runner, capacity = self.runner, self.bounds.max_tokens
        try:
            while True:
                step = self.to_runner.get()
                if step is None:
                    return
                started = time.perf_counter_ns()
                runner.update_states(step)
                self.record(
                    "runner", "update_states", None, runner.observed(capacity), self.recorder.receive(SCHEDULED)
                )
                runner.sample(step)
                self.record("runner", "sample", None, {**runner.observed(capacity), **runner.observed_repair()})
                executed = runner.bookkeeping(step)
                observed = {**runner.observed(capacity), **runner.observed_previous_row()}
                self.record(
                    "runner", "bookkeeping", {"accepted": executed.accepted}, observed, self.recorder.send(EXECUTED)
                )
                self.status.count(step_ns=self.status.counters.get("step_ns", 0) + time.perf_counter_ns() - started)
                self.to_scheduler.put(executed)
        except BaseException as error:  # hand it to the scheduler loop, which is waiting for the output
            self.to_scheduler.put(error)
