"""A scheduler and its runner driven in one thread: the engine loop without threads or a trace.

``Pipeline.turn`` is one turn of the engine loop of ``engine.Engine`` (schedule a step, process
the oldest output, or a KV-load failure), with the runner executing a step as soon as it is
scheduled and every copy landing when it is issued. Two pipelines of different variants fed
the same choices take the same decisions as long as their states agree, so ``lists_equal`` after
every turn checks that the forward and the backward scan repair every list alike. The
benchmark (``bench/runtime_async_placeholders.py``) runs both variants this way with a batch of
128 requests and long histories (``prefill``), timing each step's repair; the tests run small
random workloads.
"""

from __future__ import annotations

import collections

import torch

from lockstep.impl.async_placeholders.runner import Executed, ModelRunner
from lockstep.impl.async_placeholders.scheduler import ScenarioBounds, Scheduler
from lockstep.impl.choices import ChoiceSource

VLLM_LOOP = "vllm"  # step_with_batch_queue: schedule while fewer than two steps are in flight, else process


class Pipeline:
    """One variant's scheduler and runner (see the module doc)."""

    def __init__(
        self, variant: str, bounds: ScenarioBounds, background: int, choices: ChoiceSource, policy: str | None = None
    ) -> None:
        self.scheduler = Scheduler(bounds, background, choices)
        self.runner = ModelRunner(variant, bounds.num_spec_tokens, torch.device("cpu"), None, choices)
        self.choices, self.policy = choices, policy
        self.executed: collections.deque[Executed] = collections.deque()

    def prefill(self, history: list[int]) -> None:
        """Give every request ``history`` as its outputs so far (the first step re-adds them)."""
        for request in [self.scheduler.tracked, *self.scheduler.background]:
            request.output_token_ids = list(history)

    def turn(self) -> str | None:
        """One engine-loop turn; what it did (``schedule``, ``process``, ``kv_load_failure``), None when done."""
        scheduler = self.scheduler
        options = scheduler.options()
        if not options:
            return None
        if self.policy == VLLM_LOOP:
            choice = "schedule" if "schedule" in options and scheduler.in_flight < 2 else "process"
        else:
            choice = self.choices.choose("scheduler", "next", options)
        if choice == "schedule":
            step, _ = scheduler.schedule()
            self.runner.update_states(step)
            self.runner.sample(step)
            self.executed.append(self.runner.bookkeeping(step))
        elif choice == "process":
            executed = self.executed.popleft()
            scheduler.update_from_output(executed.step, executed.rows, executed.copy.wait().tolist())
        else:
            scheduler.kv_load_failure()
        return choice


def lists_equal(first: Pipeline, second: Pipeline) -> bool:
    """Whether every request's output list is the same in both pipelines."""
    left, right = first.runner.requests, second.runner.requests
    return left.keys() == right.keys() and all(
        left[key].output_token_ids == right[key].output_token_ids for key in left
    )
