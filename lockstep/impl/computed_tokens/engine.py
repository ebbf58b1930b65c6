"""The engine core and the workers of computed-tokens: who talks to whom, and what each records.

- ``EngineCore`` (a thread of rank 0's process, actor ``scheduler``): accepts one connection per
  rank (vLLM's scheduler-output broadcast queue and the workers' response queue are message
  queues, not collectives), then runs ``step_with_batch_queue``: ``schedule`` sends the
  ``SchedulerOutput`` to every rank; ``update_from_output`` blocks on the last rank's output of
  the oldest step. When every request finished it shuts the workers down.
- ``Worker`` (every rank's main thread, actor ``rank:R``): per step ``execute_model`` (its runner's
  ``add_requests``/``update_requests``/``prepare_inputs`` and its pipeline stage: the hidden states
  arrive from rank R-1 over ``torch.distributed.recv`` and go to rank R+1 over ``send``, on the
  ``pp`` group), then ``sample_tokens`` on the last rank (sample, rejection-sample the drafts,
  ``postprocess``, ``pp_broadcast`` of (num_sampled, num_rejected) over ``torch.distributed.broadcast``
  on the ``pp_sampled`` group, the output to the engine) or ``pp_receive`` on the others (the
  broadcast, then ``postprocess``).

Each event is recorded under the model's action (checked against the model's vocabulary) before its effect leaves
the process (the step to the ranks, the hidden states, the broadcast, the output) and after what
it waited for arrived; ``send:``/``recv:`` clocks name each message so the per-process files merge
in causal order. The acceptance count of each request (the model's ``accepted`` parameter) is the
last rank's choice at point ``accepted`` (``accepted_Q`` with several requests).
"""

from __future__ import annotations

import threading
import time
from multiprocessing.connection import Connection, Listener
from typing import Any

import torch
import torch.distributed as dist

from lockstep.impl.choices import ChoiceSource
from lockstep.impl.computed_tokens.runner import HIDDEN, Executed, ModelRunner
from lockstep.impl.computed_tokens.scheduler import DONE, SCHEDULE, Bounds, Scheduler, StepRecord
from lockstep.impl.distributed import Groups
from lockstep.impl.runtime import Recorder, StatusBoard, accept

SCHEDULER = "scheduler"
OUTPUT = "output"


def to_rank(rank: int) -> str:
    return f"scheduler>rank:{rank}"


class EngineCore(threading.Thread):
    """The scheduler's loop in rank 0's process; ``error`` holds what stopped it, if anything did."""

    def __init__(self, bounds: Bounds, listener: Listener, recorder: Recorder, status: StatusBoard) -> None:
        super().__init__(name="lockstep-engine-core", daemon=True)
        self.bounds, self.listener, self.recorder, self.status = bounds, listener, recorder, status
        self.scheduler = Scheduler(bounds)
        self.error: BaseException | None = None

    def record(self, event: str, clock: dict[str, int]) -> None:
        self.recorder.record(event, {}, self.scheduler.observed(), clock, actor=SCHEDULER)

    def run(self) -> None:
        ranks = range(self.bounds.ranks)
        connections: dict[str, Connection] = {}
        try:
            connections = accept(self.listener, [f"rank:{rank}" for rank in ranks])
            output = connections[f"rank:{self.bounds.ranks - 1}"]
            scheduler = self.scheduler
            while (move := scheduler.next_move()) != DONE:
                if move == SCHEDULE:
                    step = scheduler.schedule()
                    clock: dict[str, int] = {}
                    for rank in ranks:
                        clock.update(self.recorder.send(to_rank(rank)))
                    self.record("schedule", clock)
                    for rank in ranks:
                        connections[f"rank:{rank}"].send(step.to_json())
                else:
                    message = output.recv()
                    finished = scheduler.update_from_output(list(message["num_sampled"]))
                    if finished.number != message["step"]:
                        raise RuntimeError(
                            f"output of step {message['step']} while updating from step {finished.number}"
                        )
                    self.record("update_from_output", self.recorder.receive(OUTPUT))
                self.status.count(steps=scheduler.steps)
            if not scheduler.finished():
                raise RuntimeError(
                    f"nothing to schedule or update, but requests are not finished: {scheduler.observed()}"
                )
            for connection in connections.values():
                connection.send({"shutdown": True})
        except BaseException as error:  # the workers see their connection close and stop
            self.error = error
        finally:
            for connection in connections.values():
                connection.close()
            self.listener.close()


class Worker:
    """One rank's worker: its runner, its connection to the engine core, its pipeline neighbours."""

    def __init__(
        self,
        variant: str,
        bounds: Bounds,
        groups: Groups,
        connection: Connection,
        recorder: Recorder,
        status: StatusBoard,
        choices: ChoiceSource,
        seed: int,
    ) -> None:
        self.bounds, self.rank, self.connection = bounds, groups.rank, connection
        self.recorder, self.status, self.choices = recorder, status, choices
        self.actor = f"rank:{self.rank}"
        self.last = self.rank == bounds.ranks - 1
        self.pp = groups.groups.get("pp")
        self.pp_sampled = groups.groups.get("pp_sampled")
        self.device = groups.device if groups.backends.get("pp") == "nccl" else torch.device("cpu")
        self.runner = ModelRunner(variant, bounds, self.rank, groups.device, seed, recorder.vocabulary)
        self.steps = 0

    def record(self, event: str, args: dict[str, Any], observed: dict[str, Any], clock: dict[str, int]) -> None:
        self.recorder.record(event, args, observed, clock)

    def run(self) -> None:
        while True:
            self.status.update("receive", f"receive({to_rank(self.rank)})")
            message = self.connection.recv()
            self.status.update("running")
            if message.get("shutdown"):
                return
            started = time.perf_counter_ns()
            step = StepRecord.from_json(message)
            clock = self.recorder.receive(to_rank(self.rank))
            executed = self.execute_model(step, clock)
            if self.last:
                self.sample_tokens(executed)
            else:
                self.pp_receive(step)
            self.steps += 1
            self.status.count(
                steps=self.steps, step_ns=self.status.counters.get("step_ns", 0) + time.perf_counter_ns() - started
            )

    def execute_model(self, step: StepRecord, clock: dict[str, int]) -> Executed:
        runner, rank = self.runner, self.rank
        runner.update_states(step)
        metadata, order, positions, requests, starts = runner.prepare_inputs(step)
        received = None
        if rank > 0:  # the previous stage's hidden states (PP send/recv)
            received = torch.empty(starts[-1], HIDDEN, device=self.device)
            self.status.update("collective", f"recv(pp)#{step.number}")
            dist.recv(received, src=rank - 1, group=self.pp)
            self.status.update("running")
            clock.update(self.recorder.receive(f"hidden:{rank - 1}>{rank}"))
        hidden = runner.forward(positions, requests, received)
        if not self.last:
            clock.update(self.recorder.send(f"hidden:{rank}>{rank + 1}"))
        self.record("execute_model", {"rank": rank}, {**runner.observed(), **runner.observed_metadata(metadata)}, clock)
        if not self.last:
            self.status.update("collective", f"send(pp)#{step.number}")
            dist.send(hidden.contiguous(), dst=rank + 1, group=self.pp)
            self.status.update("running")
        return Executed(step, order, starts, hidden)

    def sample_tokens(self, executed: Executed) -> None:
        runner = self.runner
        sampled, rejected, tokens, arguments = runner.sample(
            executed, lambda point, options: self.choices.choose(self.actor, point, options)
        )
        runner.postprocess(executed.step, rejected)
        clock = self.recorder.send(OUTPUT)
        for rank in range(self.bounds.ranks - 1):
            clock.update(self.recorder.send(f"sampled>rank:{rank}"))
        self.record("sample_tokens", dict(arguments), runner.observed(), clock)
        if self.bounds.ranks > 1:  # pp_broadcast
            counts = torch.tensor([sampled, rejected], dtype=torch.int64, device=self.device)
            self.status.update("collective", f"broadcast(pp_sampled)#{executed.step.number}")
            dist.broadcast(counts, src=self.rank, group=self.pp_sampled)
            self.status.update("running")
        self.connection.send({"step": executed.step.number, "num_sampled": sampled, "tokens": tokens})

    def pp_receive(self, step: StepRecord) -> None:
        counts = torch.zeros(2, self.bounds.requests, dtype=torch.int64, device=self.device)
        self.status.update("collective", f"broadcast(pp_sampled)#{step.number}")
        dist.broadcast(counts, src=self.bounds.ranks - 1, group=self.pp_sampled)
        self.status.update("running")
        rejected = [int(value) for value in counts[1].tolist()]
        self.runner.postprocess(step, rejected)
        self.record(
            "pp_receive",
            {"rank": self.rank},
            self.runner.observed(),
            self.recorder.receive(f"sampled>rank:{self.rank}"),
        )
