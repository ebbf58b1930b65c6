"""The engine side of computed-tokens: ``Scheduler.schedule`` and ``Scheduler.update_from_output``.

Mirrors ``vllm/v1/core/sched/scheduler.py`` (``schedule``: the RUNNING loop with its token
budget, the async ``max_tokens`` skip, the ``max_model_len`` clamp and the scheduled drafts;
the WAITING loop; ``_make_cached_request_data``, which sends each request's
``num_computed_tokens`` *before* this step's tokens; ``_update_after_schedule``;
``update_from_output`` with its rejected-draft correction and ``check_stop``),
``async_scheduler.py`` (placeholders, draft placeholders) and ``vllm/v1/engine/core.py``
(``step``: schedule, run, update; ``step_with_batch_queue``: schedule while the queue is not
full and something is schedulable, else block on the oldest step and update from it;
``post_step``: the drafts of a synchronous step).

The per-request loop is unrolled in Python over the requests in index order (the order in which
they were admitted, so the order of ``self.running``); the token budget is threaded through it.

Faithfulness notes:
- The engine's order is ``step_with_batch_queue``'s: it schedules whenever the queue has room
  and ``schedule()`` would return tokens, and updates from the oldest step only when the queue
  is full or nothing can be scheduled (an empty ``SchedulerOutput`` changes no mirror and is not
  modelled as a step).
- Synchronous drafts (``post_step``): the model gives a request ``k`` drafts when the scheduler
  updates from one of its steps (none for a prefill chunk or a finished request). In v0.22.0
  ``take_draft_token_ids`` is queued behind the ``sample_tokens`` RPCs already sent, so it
  returns [-1]*k for the *last* sampled batch, and ``update_draft_token_ids`` reads the request's
  *latest* ``is_prefill_chunk``. With PP (batch queue = pp_size) that lets a request be scheduled
  again while its final prefill chunk is unprocessed: the finding ``sync-pipeline-early-drafts``
  (U2 violated in v0.22.0 too).
"""

from __future__ import annotations

from lockstep.models.computed_tokens.state import State, Status
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.sorts import MapSort
from lockstep.spec.terms import (
    Term,
    TermLike,
    all_of,
    conjunction,
    disjunction,
    if_then_else,
    lift,
    map_of,
    maximum,
    minimum,
    record_of,
)


def _schedule_tokens(state: State) -> tuple[dict[int, Term], dict[int, Term]]:
    """The RUNNING loop then the WAITING loop, threading the token budget: each request's
    scheduled tokens and scheduled drafts."""
    sizes = state.sizes
    budget: Term = lift(sizes.budget)
    scheduled: dict[int, Term] = {}
    drafts: dict[int, Term] = {}
    for request in range(sizes.requests):  # RUNNING requests first
        tokens = _running_tokens(state, request, budget)
        spec_tokens = (
            tokens
            + state.computed[request]
            - (sizes.prefill_len + state.outputs[request])
            - state.placeholders[request]
        )
        drafts[request] = if_then_else(
            (tokens > 0) & (state.spec[request] > 0), maximum(0, minimum(state.spec[request], spec_tokens)), 0
        )
        scheduled[request] = tokens
        budget = budget - tokens
    for request in range(sizes.requests):  # then WAITING requests, while budget is left
        admitted = (state.status[request] == Status.WAITING) & (budget > 0)
        tokens = if_then_else(admitted, minimum(sizes.prefill_len, budget), 0)
        scheduled[request] = if_then_else(admitted, tokens, scheduled[request])
        budget = budget - tokens
    return scheduled, drafts


def _scheduled_rows(state: State, scheduled: dict[int, Term], drafts: dict[int, Term]) -> dict[int, Term]:
    """The SchedulerOutput's row of each request (``num_computed_tokens`` before this step's tokens)."""
    rows: dict[int, Term] = {}
    for request in range(state.sizes.requests):
        tokens = scheduled[request]
        is_new = state.status[request] == Status.WAITING
        in_flight_drafts, in_flight_steps = unprocessed(state, request)
        rows[request] = record_of(
            state.Row_,
            scheduled=tokens,
            computed=state.computed[request],
            drafts=drafts[request],
            new=is_new & (tokens > 0),
            allowed=in_flight_drafts,
            alone=in_flight_steps == 0,
        )
    return rows


def _update_after_schedule(state: State, scheduled: dict[int, Term], drafts: dict[int, Term]) -> dict[Term, Term]:
    """_update_after_schedule (and AsyncScheduler's): advance at schedule time; the scheduler's
    new status, num_computed_tokens, placeholders, spec_token_ids and is_prefill_chunk."""
    sizes = state.sizes
    status, computed, placeholders = state.status, state.computed, state.placeholders
    spec, chunk = state.spec, state.prefill_chunk
    for request in range(sizes.requests):
        tokens, went = scheduled[request], scheduled[request] > 0
        is_new = state.status[request] == Status.WAITING
        after = state.computed[request] + tokens
        is_chunk = after < sizes.prefill_len + state.outputs[request] + state.placeholders[request]
        status = status.set(request, if_then_else(went & is_new, Status.RUNNING, state.status[request]))
        computed = computed.set(request, after)
        chunk = chunk.set(request, if_then_else(went, is_chunk, state.prefill_chunk[request]))
        if sizes.asynchronous:
            placeholders = placeholders.set(
                request,
                if_then_else(
                    went & ~is_chunk, state.placeholders[request] + 1 + drafts[request], state.placeholders[request]
                ),
            )
            spec = spec.set(
                request, if_then_else(went & ~is_chunk, sizes.drafts, if_then_else(went, 0, state.spec[request]))
            )
        else:
            spec = spec.set(request, if_then_else(went, 0, state.spec[request]))  # spec_token_ids = []
    return {
        state.status: status,
        state.computed: computed,
        state.placeholders: placeholders,
        state.spec: spec,
        state.prefill_chunk: chunk,
    }


@action(actor="scheduler")
def schedule(state: State) -> Step:
    """Scheduler.schedule + _update_after_schedule: one SchedulerOutput for every rank."""
    scheduled, drafts = _schedule_tokens(state)
    rows = _scheduled_rows(state, scheduled, drafts)
    queue_room = state.batch.length() - state.processed < state.sizes.batch_queue
    return Step(
        conjunction(queue_room, anything_to_schedule(state)),
        {
            state.batch: state.batch.append(_map_from(state.StepRecord, rows)),
            **_update_after_schedule(state, scheduled, drafts),
        },
    )


@action(actor="scheduler")
def update_from_output(state: State) -> Step:
    """The engine blocks on the oldest step (queue full, or nothing to schedule) and updates."""
    sizes = state.sizes
    position = state.processed
    record, result = state.batch[position], state.results[position]
    status, computed, placeholders, outputs = state.status, state.computed, state.placeholders, state.outputs
    spec = state.spec
    for request in range(sizes.requests):
        row, sampled = record[request], result[request]
        handled = (row.field("scheduled") > 0) & (state.status[request] == Status.RUNNING)  # finished: skipped
        corrected = (row.field("drafts") > 0) & (sampled > 0)
        rejected = if_then_else(corrected, row.field("drafts") - (sampled - 1), 0)
        now_computed = state.computed[request]
        new_computed = if_then_else(now_computed > 0, now_computed - rejected, now_computed)
        now_placeholders = state.placeholders[request]
        new_placeholders = if_then_else(now_placeholders > 0, now_placeholders - rejected, now_placeholders)
        # _update_request_with_output: append one by one, check_stop trims at max_tokens / max_model_len.
        produced = state.outputs[request]
        kept = minimum(sampled, sizes.max_tokens - produced, sizes.max_model_len - sizes.prefill_len - produced)
        stopped = (sampled > 0) & (
            (produced + kept >= sizes.max_tokens) | (sizes.prefill_len + produced + kept >= sizes.max_model_len)
        )
        if sizes.asynchronous:
            new_placeholders = new_placeholders - kept
        status = status.set(request, if_then_else(handled & stopped, Status.FINISHED, state.status[request]))
        computed = computed.set(request, if_then_else(handled, new_computed, now_computed))
        placeholders = placeholders.set(request, if_then_else(handled, new_placeholders, now_placeholders))
        outputs = outputs.set(request, if_then_else(handled, produced + kept, produced))
        if not sizes.asynchronous and sizes.drafts > 0:
            # post_step -> update_draft_token_ids: the drafter's k tokens, none for a prefill chunk.
            proposed = if_then_else(~stopped & ~state.prefill_chunk[request], sizes.drafts, 0)
            spec = spec.set(request, if_then_else(handled, proposed, state.spec[request]))
    full = state.batch.length() - state.processed >= sizes.batch_queue
    updates: dict[Term, TermLike] = {
        state.status: status,
        state.computed: computed,
        state.placeholders: placeholders,
        state.outputs: outputs,
    }
    if not sizes.asynchronous and sizes.drafts > 0:
        updates[state.spec] = spec
    updates.update(retire(state, state.processed + 1, state.sampled))
    return Step(conjunction(position < state.results.length(), full | ~anything_to_schedule(state)), updates)


def unprocessed(state: State, request: int) -> tuple[Term, Term]:
    """(Σ drafts, number of steps) of ``request`` in steps scheduled but not yet updated from."""
    total: Term = lift(0)
    steps: Term = lift(0)
    for position in range(state.sizes.capacity):
        inside = (position < state.batch.length()) & (position >= state.processed)
        row = state.batch[position][request]
        total = total + if_then_else(inside, row.field("drafts"), 0)
        steps = steps + if_then_else(inside & (row.field("scheduled") > 0), 1, 0)
    return total, steps


def schedulable_tokens(state: State, request: int) -> Term:
    """The RUNNING loop's num_new_tokens for ``request`` with the whole budget (0: not scheduled)."""
    return _running_tokens(state, request, lift(state.sizes.budget))


def _running_tokens(state: State, request: int, budget: TermLike) -> Term:
    sizes = state.sizes
    computed, placeholders = state.computed[request], state.placeholders[request]
    num_tokens = sizes.prefill_len + state.outputs[request]
    skip = lift(False)
    if sizes.asynchronous:  # the previous step surely reached max_tokens
        skip = (placeholders > 0) & (computed + 2 - placeholders >= sizes.prefill_len + sizes.max_tokens)
    wanted = num_tokens + state.spec[request] + placeholders - computed
    wanted = minimum(wanted, budget, sizes.max_model_len - 1 - computed)
    return if_then_else((state.status[request] == Status.RUNNING) & ~skip & (wanted > 0), wanted, 0)


def anything_to_schedule(state: State) -> Term:
    """schedule() would return a non-empty output (a waiting request, or a running one with tokens)."""
    parts = []
    for request in range(state.sizes.requests):
        parts.append((state.status[request] == Status.WAITING) | (schedulable_tokens(state, request) > 0))
    return disjunction(*parts)


def retire(state: State, processed: Term, sampled: Term, results: Term | None = None) -> dict[Term, TermLike]:
    """Drop the oldest record once the scheduler and every rank are done with it."""
    done = (processed >= 1) & all_of(state.Rank, lambda rank: sampled[rank] >= 1)
    shifted = map_of(state.Rank, lambda rank: sampled[rank] - 1, state.Position)
    results = state.results if results is None else results
    return {
        state.batch: if_then_else(done, state.batch.tail(), state.batch),
        state.results: if_then_else(done, results.tail(), results),
        state.processed: if_then_else(done, processed - 1, processed),
        state.sampled: if_then_else(done, shifted, sampled),
    }


def _map_from(sort: MapSort, values: dict[int, Term]) -> Term:
    """The map ``key -> values[key]`` of ``sort`` (keys 0 .. len(values) - 1)."""

    def pick(key: Term) -> Term:
        chosen = values[len(values) - 1]
        for index in range(len(values) - 2, -1, -1):
            chosen = if_then_else(key == index, values[index], chosen)
        return chosen

    return map_of(sort.key, pick, sort.value)
