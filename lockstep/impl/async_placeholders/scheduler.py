"""The async scheduler's side of async-placeholders (vLLM ``AsyncScheduler`` with its request state).

Per request: ``output_token_ids`` (the real outputs it knows, ``num_output_tokens``),
``num_output_placeholders`` (outputs scheduled, not yet processed) and whether the next step
(re)computes the prompt. ``schedule`` makes one step (``SchedulerOutput``): the tracked request
runs, runs a non-final prefill chunk, is skipped or preempted (as the scenario allows and the
run's choice source picks), with ``num_output_tokens = outputs + placeholders`` and, for a
producing step, ``1 + drafts`` more placeholders (``_update_after_schedule``); the other
requests of the batch decode on every step. ``update_from_output`` reads the landed sampled ids
of a step (the async copy's host tensor) and moves ``accepted + 1`` tokens from placeholders to
outputs, first giving back the rejected drafts (``_update_request_with_output``). A sync KV-load
failure drops the last outputs and makes the request recompute. Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lockstep.impl.async_placeholders.scans import valid_count
from lockstep.impl.choices import ChoiceSource

RUN, SKIP, PREEMPT = "RUN", "SKIP", "PREEMPT"
TRACKED = "request-0"


@dataclass(frozen=True)
class ScheduledRequest:
    """One request's entry of a scheduled step (what the runner's ``_update_states`` reads)."""

    request_id: str
    kind: str  # RUN: scheduled; SKIP: running but not scheduled; PREEMPT: preempted
    chunk: bool  # a non-final prefill chunk: its sampled row is discarded
    drafts: int  # draft tokens scheduled with it (async spec decode)
    num_output_tokens: int  # outputs + placeholders the scheduler counts
    outputs: int  # real outputs the scheduler knows
    prefill: bool  # the step (re)computes the prompt: the runner's positions restart at ``outputs``
    all_token_ids: tuple[int, ...] | None  # prompt + known outputs, for a request the runner must re-add


@dataclass(frozen=True)
class Step:
    """One ``SchedulerOutput``: its number, whether any row needs output ids, and its requests."""

    number: int
    history: bool
    requests: tuple[ScheduledRequest, ...]


@dataclass
class SchedulerRequest:
    request_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int] = field(default_factory=list)
    placeholders: int = 0
    prefilling: bool = True
    ran_last_step: bool = False  # scheduled in the previous step: the runner still has its row

    def entry(self, kind: str, chunk: bool, drafts: int) -> ScheduledRequest:
        """Its entry; the token ids go along only when the runner must (re-)add it (``_make_cached_request_data``)."""
        outputs = len(self.output_token_ids)
        every = None if self.ran_last_step else tuple(self.prompt_token_ids + self.output_token_ids)
        self.ran_last_step = kind == RUN
        return ScheduledRequest(
            self.request_id, kind, chunk, drafts, outputs + self.placeholders, outputs, self.prefilling, every
        )


@dataclass(frozen=True)
class ScenarioBounds:
    """What the scenario lets the tracked request do (the model instance's parameters)."""

    max_tokens: int
    num_spec_tokens: int
    history_toggles: bool
    preemptions: bool
    chunked_prefill: bool
    kv_load_failures: int
    interruptions: int  # non-producing steps (chunks, skips, preemptions) the run may take


class Scheduler:
    """The scheduler of one engine; the tracked request's decisions go through the choice source."""

    def __init__(
        self, bounds: ScenarioBounds, background: int, choices: ChoiceSource, actor: str = "scheduler"
    ) -> None:
        self.bounds, self.choices, self.actor = bounds, choices, actor
        prompt = [bounds.max_tokens, bounds.max_tokens]  # the model's PROMPT token
        self.tracked = SchedulerRequest(TRACKED, list(prompt))
        self.background = [SchedulerRequest(f"request-{number}", list(prompt)) for number in range(1, background + 1)]
        self.in_flight = 0  # steps scheduled and not yet processed (the batch queue holds two)
        self.steps = 0
        self.kv_failures = 0
        self.interruptions_left = bounds.interruptions

    # ------------------------------------------------------------------------------ state
    def observed(self) -> dict[str, int | bool]:
        """The model's scheduler variables, for the tracked request."""
        return {
            "scheduler.outputs": len(self.tracked.output_token_ids),
            "scheduler.placeholders": self.tracked.placeholders,
            "scheduler.prefilling": self.tracked.prefilling,
            "scheduler.kv_load_failures": self.kv_failures,
        }

    def can_produce(self, drafts: int = 0) -> bool:
        request = self.tracked
        return len(request.output_token_ids) + request.placeholders + 1 + drafts <= self.bounds.max_tokens

    def finished(self) -> bool:
        """The tracked request has all ``max_tokens`` outputs (``check_stop`` finishes it; it leaves the queues)."""
        return len(self.tracked.output_token_ids) >= self.bounds.max_tokens

    def kinds(self) -> list[str]:
        """What the next step may do to the tracked request.

        ``run`` only while one more output (and its drafts) fits ``max_tokens``. The engine schedules a
        step for the batch whether or not the tracked request can produce (``step_with_batch_queue``
        asks ``has_requests()``), so an unfinished request at its limit may still be skipped (the async
        check that the step in flight reaches ``max_tokens``, or the token budget spent on others),
        preempted (another request's ``allocate_slots`` fails) or take a prefill chunk, as the scenario
        allows and while the run has interruptions left. A finished request takes no step.
        """
        request, bounds = self.tracked, self.bounds
        if self.finished():
            return []
        found = ["run"] if self.can_produce() else []
        if self.interruptions_left > 0:
            if bounds.chunked_prefill and request.prefilling:
                found.append("chunk")
            if bounds.preemptions:
                found += ["skip", "preempt"]
        return found

    def options(self) -> list[str]:
        """What the engine loop may do next: schedule, process the oldest output, a KV-load failure."""
        found = []
        if self.in_flight < 2 and self.kinds():
            found.append("schedule")
        if self.in_flight > 0:
            found.append("process")
        if (
            self.in_flight == 0
            and self.kv_failures < self.bounds.kv_load_failures
            and self.tracked.output_token_ids
            and not self.finished()
        ):
            found.append("kv_load_failure")
        return found

    # --------------------------------------------------------------------------- actions
    def schedule(self) -> tuple[Step, dict[str, str | int | bool]]:
        """One step; returns it and the model's ``schedule`` arguments for the tracked request."""
        request, bounds = self.tracked, self.bounds
        picked = self.choices.choose(self.actor, "kind", self.kinds())
        kind = {"run": RUN, "chunk": RUN, "skip": SKIP, "preempt": PREEMPT}[picked]
        chunk = picked == "chunk"
        if picked != "run":
            self.interruptions_left -= 1
        drafts = 0
        if picked == "run" and not request.prefilling and bounds.num_spec_tokens:
            fitting = [str(count) for count in range(bounds.num_spec_tokens + 1) if self.can_produce(count)]
            drafts = int(self.choices.choose(self.actor, "drafts", fitting))
        history = True
        if bounds.history_toggles:
            history = self.choices.choose(self.actor, "history", ("needed", "not-needed")) == "needed"
        entries = [request.entry(kind, chunk, drafts)]
        entries += [other.entry(RUN, False, 0) for other in self.background]
        # _update_after_schedule: a producing step adds 1 + drafts placeholders.
        if kind == RUN and not chunk:
            request.placeholders += 1 + drafts
            request.prefilling = False
        elif kind == PREEMPT:
            request.prefilling = True
        for other in self.background:
            other.placeholders += 1
            other.prefilling = False
        self.in_flight += 1
        self.steps += 1
        step = Step(self.steps, history, tuple(entries))
        return step, {"kind": kind, "chunk": chunk, "drafts": drafts, "history": history}

    def update_from_output(self, step: Step, rows: dict[str, int], sampled: list[list[int]]) -> None:
        """The step's output, once its sampled ids landed: ``rows`` maps each non-discarded request to its row."""
        for entry in step.requests:
            if entry.kind != RUN or entry.chunk:
                continue
            request = self.tracked if entry.request_id == TRACKED else self._background(entry.request_id)
            row = sampled[rows[entry.request_id]]
            new_ids = row[: valid_count(row)]
            accepted = len(new_ids) - 1
            if entry.drafts > 0 and request.placeholders > 0:  # the rejected drafts' placeholders
                request.placeholders -= entry.drafts - accepted
            request.placeholders -= accepted + 1
            request.output_token_ids.extend(new_ids)
            if request.placeholders < 0:
                raise AssertionError(f"{request.request_id}: num_output_placeholders = {request.placeholders} < 0")
        self.in_flight -= 1

    def kv_load_failure(self) -> int:
        """A sync KV-load failure discards the tracked request's last outputs; it recomputes."""
        request = self.tracked
        options = [str(count) for count in (1, 2) if count <= len(request.output_token_ids)]
        discarded = int(self.choices.choose(self.actor, "discarded", options))
        del request.output_token_ids[len(request.output_token_ids) - discarded :]
        request.prefilling = True
        self.kv_failures += 1
        return discarded

    def _background(self, request_id: str) -> SchedulerRequest:
        return self.background[int(request_id.split("-")[1]) - 1]
