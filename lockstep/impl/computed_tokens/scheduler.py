"""The scheduler of computed-tokens (vLLM ``Scheduler``/``AsyncScheduler`` with the engine's batch queue).

Mirrors ``vllm/v1/core/sched/scheduler.py`` as ``lockstep/models/computed_tokens/scheduler.py``
models it: ``schedule`` runs the RUNNING loop (token budget, the async ``max_tokens`` skip, the
``max_model_len`` clamp, the scheduled drafts), then the WAITING loop (a prompt longer than the
budget is a **chunked prefill**), builds one ``StepRecord`` whose rows carry each request's
``num_computed_tokens`` *before* the step (``_make_cached_request_data``) and advances it at once
(``_update_after_schedule``; ``AsyncScheduler`` adds output and draft placeholders).
``update_from_output`` subtracts the rejected drafts and appends the kept tokens
(``_update_request_with_output``, ``check_stop``); without async scheduling ``post_step`` gives a
request its ``k`` drafts for the next step. ``next_move`` is ``EngineCore.step_with_batch_queue``'s
order: schedule while the queue has room and something is schedulable, else block on the oldest
step. Pure Python, no torch: chunking and draft counts follow from the state, as in vLLM.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

WAITING, RUNNING, FINISHED = "WAITING", "RUNNING", "FINISHED"
SCHEDULE, UPDATE, DONE = "schedule", "update_from_output", "done"


@dataclass(frozen=True)
class Bounds:
    """The model instance's parameters that the scheduler and runner use."""

    requests: int
    prefill_len: int
    budget: int
    drafts: int
    max_tokens: int
    max_model_len: int
    asynchronous: bool
    padded_rows: int
    ranks: int

    @property
    def batch_queue(self) -> int:
        """``MultiprocExecutor.max_concurrent_batches``: 2 with one stage and async scheduling, else pp_size."""
        return 2 if self.ranks == 1 and self.asynchronous else self.ranks


@dataclass(frozen=True)
class Row:
    """One request's part of a ``SchedulerOutput`` (0 tokens: not scheduled in this step)."""

    scheduled: int
    computed: int  # the scheduler's num_computed_tokens before this step's tokens
    drafts: int  # spec tokens scheduled with it
    new: bool  # NewRequestData (first scheduled): the runner adds it
    allowed: int  # Σ drafts of the request's steps scheduled and not yet updated from (U3's allowance)
    alone: bool  # no step of the request was unprocessed when this one was scheduled


@dataclass(frozen=True)
class StepRecord:
    number: int
    rows: tuple[Row, ...]

    def to_json(self) -> dict[str, Any]:
        return {"step": self.number, "rows": [row.__dict__ for row in self.rows]}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> StepRecord:
        return cls(int(value["step"]), tuple(Row(**row) for row in value["rows"]))


@dataclass
class Request:
    status: str = WAITING
    num_computed_tokens: int = 0
    num_output_placeholders: int = 0
    num_output_tokens: int = 0
    spec_token_ids: int = 0  # len(request.spec_token_ids)
    is_prefill_chunk: bool = False


@dataclass
class Scheduler:
    bounds: Bounds
    requests: list[Request] = field(default_factory=list)
    unprocessed: deque[StepRecord] = field(default_factory=deque)
    steps: int = 0

    def __post_init__(self) -> None:
        self.requests = [Request() for _ in range(self.bounds.requests)]

    # ------------------------------------------------------------------------------ state
    def observed(self) -> dict[str, Any]:
        """The model's scheduler variables (``scheduler.*``), one entry per request."""
        requests = self.requests
        return {
            "scheduler.status": [request.status for request in requests],
            "scheduler.num_computed_tokens": [request.num_computed_tokens for request in requests],
            "scheduler.num_output_placeholders": [request.num_output_placeholders for request in requests],
            "scheduler.num_output_tokens": [request.num_output_tokens for request in requests],
            "scheduler.spec_token_ids": [request.spec_token_ids for request in requests],
            "scheduler.is_prefill_chunk": [request.is_prefill_chunk for request in requests],
        }

    def finished(self) -> bool:
        return all(request.status == FINISHED for request in self.requests)

    def _running_tokens(self, request: Request, budget: int) -> int:
        """The RUNNING loop's num_new_tokens for ``request`` with ``budget`` left (0: not scheduled)."""
        bounds = self.bounds
        if request.status != RUNNING:
            return 0
        computed, placeholders = request.num_computed_tokens, request.num_output_placeholders
        if (
            bounds.asynchronous
            and placeholders > 0
            and computed + 2 - placeholders >= bounds.prefill_len + bounds.max_tokens
        ):
            return 0  # the step in flight surely reaches max_tokens
        num_tokens = bounds.prefill_len + request.num_output_tokens
        wanted = num_tokens + request.spec_token_ids + placeholders - computed
        wanted = min(wanted, budget, bounds.max_model_len - 1 - computed)
        return max(wanted, 0)

    def anything_to_schedule(self) -> bool:
        return any(
            request.status == WAITING or self._running_tokens(request, self.bounds.budget) > 0
            for request in self.requests
        )

    def next_move(self) -> str:
        """What ``step_with_batch_queue`` does next: schedule, update from the oldest step, or stop."""
        if len(self.unprocessed) < self.bounds.batch_queue and self.anything_to_schedule():
            return SCHEDULE
        if self.unprocessed:
            return UPDATE
        return DONE

    # ---------------------------------------------------------------------------- actions
    def schedule(self) -> StepRecord:
        bounds, requests = self.bounds, self.requests
        budget = bounds.budget
        scheduled, drafts = [0] * len(requests), [0] * len(requests)
        for index, request in enumerate(requests):  # RUNNING requests first
            tokens = self._running_tokens(request, budget)
            spec_tokens = (
                tokens
                + request.num_computed_tokens
                - (bounds.prefill_len + request.num_output_tokens)
                - request.num_output_placeholders
            )
            if tokens > 0 and request.spec_token_ids > 0:
                drafts[index] = max(0, min(request.spec_token_ids, spec_tokens))
            scheduled[index] = tokens
            budget -= tokens
        for index, request in enumerate(requests):  # then WAITING requests, while budget is left
            if request.status == WAITING and budget > 0:
                scheduled[index] = min(bounds.prefill_len, budget)
                budget -= scheduled[index]
        rows = []
        for index, request in enumerate(requests):
            tokens = scheduled[index]
            in_flight = [step.rows[index] for step in self.unprocessed]
            rows.append(
                Row(
                    scheduled=tokens,
                    computed=request.num_computed_tokens,
                    drafts=drafts[index],
                    new=request.status == WAITING and tokens > 0,
                    allowed=sum(row.drafts for row in in_flight),
                    alone=not any(row.scheduled > 0 for row in in_flight),
                )
            )
            if tokens == 0:
                continue
            # _update_after_schedule (and AsyncScheduler's): advance at schedule time, optimistically.
            is_chunk = request.num_computed_tokens + tokens < (
                bounds.prefill_len + request.num_output_tokens + request.num_output_placeholders
            )
            if request.status == WAITING:
                request.status = RUNNING
            request.num_computed_tokens += tokens
            request.is_prefill_chunk = is_chunk
            if bounds.asynchronous and not is_chunk:
                request.num_output_placeholders += 1 + drafts[index]
                request.spec_token_ids = bounds.drafts  # draft placeholders for the next step
            else:
                request.spec_token_ids = 0
        self.steps += 1
        step = StepRecord(self.steps, tuple(rows))
        self.unprocessed.append(step)
        return step

    def update_from_output(self, num_sampled: list[int]) -> StepRecord:
        """The oldest step's output: ``num_sampled[q]`` tokens for request q (0: a chunk or not scheduled)."""
        bounds = self.bounds
        step = self.unprocessed.popleft()
        for row, request, sampled in zip(step.rows, self.requests, num_sampled, strict=True):
            if row.scheduled == 0 or request.status != RUNNING:  # finished requests are skipped
                continue
            rejected = row.drafts - (sampled - 1) if row.drafts > 0 and sampled > 0 else 0
            if request.num_computed_tokens > 0:
                request.num_computed_tokens -= rejected
            if request.num_output_placeholders > 0:
                request.num_output_placeholders -= rejected
            produced = request.num_output_tokens
            kept = min(sampled, bounds.max_tokens - produced, bounds.max_model_len - bounds.prefill_len - produced)
            stopped = sampled > 0 and (
                produced + kept >= bounds.max_tokens or bounds.prefill_len + produced + kept >= bounds.max_model_len
            )
            if bounds.asynchronous:
                request.num_output_placeholders -= kept
            request.num_output_tokens = produced + kept
            if stopped:
                request.status = FINISHED
            if not bounds.asynchronous and bounds.drafts > 0:  # post_step -> update_draft_token_ids
                request.spec_token_ids = bounds.drafts if not stopped and not request.is_prefill_chunk else 0
        return step
