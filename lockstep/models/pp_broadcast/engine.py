"""The engine of pp-broadcast: ``schedule`` and ``process_output``, and what a scheduled step holds.

Mirrors ``vllm/v1/engine/core.py`` (``EngineCore.step_with_batch_queue``: at most P steps in
flight, the exec and sample RPCs of a step sent to every worker in the same order) and
``vllm/v1/core/sched/scheduler.py`` / ``async_scheduler.py`` (``Scheduler.schedule``;
``_update_after_schedule``: ``num_computed_tokens`` advances at schedule time, so the next chunk or
decode of a request may be scheduled while its previous step is in flight).

An empty step (``schedule_empty``, with ``empty_steps`` > 0) is a SchedulerOutput with no scheduled
tokens: ``step_with_batch_queue`` schedules whenever ``scheduler.has_requests()`` (unfinished requests,
or finished ones whose ``finished_req_ids`` the workers have not had yet), and ``Scheduler.schedule``
schedules nothing when the scheduler is paused with ``keep`` (``PAUSED_ALL``: token budget 0) or when
every running request's last token is in flight (async scheduling's ``num_output_placeholders`` check).
Such a step takes a batch-queue slot and gets the ``execute_model`` RPC, but no ``sample_tokens``
(``model_executed`` is False): the same code in v0.19.0 to v0.22.0.

The queries below read the plan the scheduler wrote (``scheduler.steps``): the scheduler's truth
about each step, which every rank also derives from its own state (``worker.py``).

What the scheduler waits for differs by feature. With async scheduling (the default) a request's next
decode may be scheduled while its last token is in flight (``num_output_placeholders``); without it
(``async_scheduling=0``) ``Scheduler.schedule`` finds no new token to schedule until
``update_from_output`` has appended the last one (``num_new_tokens`` is 0), so a decode waits until the
engine processed the request's last sampled step. The V2 runner's ``AsyncScheduler`` (v0.23.0 on) also
sets ``next_decode_eligible_step = current_step + pp_size`` after each step that is not a prefill chunk,
and ``Scheduler.schedule`` skips a running request until ``current_step`` (one per ``schedule()`` call,
empty steps included) reaches it: the cadence of the PPHandler's ring. Its batch queue holds
``pp_size + 1`` steps (``VllmConfig.max_concurrent_batches``).

Structured output (``structured_output=1``: the last request has a grammar). ``AsyncScheduler.
_update_after_schedule`` sets ``pending_structured_output_tokens`` when a scheduled row of a structured
request that is not a prefill chunk still has output placeholders (an earlier token in flight); then
``step_with_batch_queue`` sends ``execute_model`` only, pops the oldest step of the batch queue, waits for
it, ``update_from_output`` (the grammar accepts that step's tokens), and only then computes the grammar
bitmask and sends ``sample_tokens``; meanwhile it schedules nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from lockstep.models.pp_broadcast.state import State
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.sorts import MapSort
from lockstep.spec.terms import Term, all_of, any_of, conjunction, if_then_else, lift, map_of, max_of, maximum, minimum


def clamp(state: State, step: Term) -> Term:
    """``step`` as an index of the plan (the step after the last one reads the last)."""
    return minimum(step, state.sizes.steps - 1)


def present(state: State, step: Term, request: Term) -> Term:
    return state.plan[clamp(state, step)][request] > 0


def computed_before(state: State, step: Term, request: Term) -> Term:
    return state.plan[clamp(state, step)][request] - 1


def non_final_chunk(state: State, step: Term, request: Term) -> Term:
    """The scheduler's truth: this row does not reach the end of the prompt."""
    return present(state, step, request) & (computed_before(state, step, request) + 1 < state.prompt_of[request])


def nonempty(state: State, step: Term) -> Term:
    """The step's plan row holds a request (the rows of steps not yet scheduled are empty too)."""
    return any_of(state.Request, lambda q: present(state, step, q))


def empty(state: State, step: Term) -> Term:
    """A scheduled step with no scheduled tokens (``total_num_scheduled_tokens == 0``)."""
    return (step < state.scheduled) & ~nonempty(state, step)


def forward_pass(state: State, step: Term) -> list[Term]:
    """The guard that the step has scheduled tokens (``forward_pass`` in Worker.execute_model), where the
    instance has empty steps (without them every step does, and the guards stay as they were)."""
    return [~empty(state, step)] if state.sizes.empties else []


def all_chunked(state: State, step: Term) -> Term:
    return all_of(state.Request, lambda q: present(state, step, q).implies(non_final_chunk(state, step, q)))


def latest_kept(state: State, request: Term, before: Term) -> Term:
    """The last step (1-based) before ``before`` whose sampled token of ``request`` was kept (a final chunk or a
    decode: the scheduler's ``is_prefill_chunk`` is false after it); 0 if none."""
    return max_of(
        state.StepIndex,
        lambda n: if_then_else(
            (n < before) & present(state, n, request) & ~non_final_chunk(state, n, request), n + 1, 0
        ),
    )


def is_decode(state: State, step: Term, request: Term) -> Term:
    """The row of ``request`` at ``step`` is a decode (its input is a sampled token, and with drafts > 0 it
    carries the draft tokens proposed with that token)."""
    return present(state, step, request) & (computed_before(state, step, request) >= state.prompt_of[request])


def needs_sample(state: State, step: Term, request: Term) -> Term:
    """The V2 runner's ``compute_need_sampled_mask`` for one row: ``num_computed + num_scheduled >= prefill_len``
    (not a non-final chunk) and, where the release excludes them, not a final chunk whose token ends the
    request (``prefill_len + 1 >= max_seq_len``: no decode follows). Every rank computes it from the
    scheduler's fields (``input_batch.num_computed_tokens_np``, ``prefill_len``, ``max_seq_len``)."""
    row = present(state, step, request) & ~non_final_chunk(state, step, request)
    if not state.sizes.release.excludes_finishing_prefill:
        return row
    finishing = (computed_before(state, step, request) + 1 == state.prompt_of[request]) & (
        state.length_of[request] == state.prompt_of[request]
    )
    return row & ~finishing


def any_needs_sample(state: State, step: Term) -> Term:
    """``compute_need_sampled_mask(input_batch) is not None``."""
    return any_of(state.Request, lambda q: needs_sample(state, step, q))


def has_drafts(state: State, step: Term) -> Term:
    """The step schedules draft tokens (``input_batch.num_draft_tokens > 0``): a decode row, with drafts > 0."""
    if not state.sizes.drafts:
        return lift(False)
    return any_of(state.Request, lambda q: is_decode(state, step, q))


def may_schedule(state: State, request: Term) -> Term:
    """What the scheduler waits for before it schedules ``request``'s next decode (see the module docstring)."""
    sizes, scheduled = state.sizes, state.scheduled
    decode = state.computed[request] >= state.prompt_of[request]
    if not sizes.async_scheduling:
        return decode.implies(latest_kept(state, request, scheduled) <= state.processed)
    if sizes.handler:
        return decode.implies(scheduled + 1 >= latest_kept(state, request, scheduled) + sizes.ranks)
    return lift(True)


def structured_row_in_flight(state: State, step: Term) -> Term:
    """The structured request's row at ``step`` is not a prefill chunk and an earlier sampled step of it has not
    been processed (``request.num_output_placeholders > 0``): the grammar has not seen that token yet."""
    q = lift(state.sizes.requests - 1, state.Request)
    row = present(state, step, q) & ~non_final_chunk(state, step, q)
    return row & (latest_kept(state, q, step) > state.processed)


@action(actor="engine")
def sample_deferred(state: State) -> Step:
    """step_with_batch_queue after a deferral: the oldest step's output was processed; get_grammar_bitmask for the
    deferred step, then executor.sample_tokens (non_block)."""
    newest = state.scheduled - 1
    return Step(
        (state.samples_sent < state.scheduled) & (state.processed == state.defer_until) & ~state.dead,
        {
            state.samples_sent: state.scheduled,
            state.stale_bitmask: state.stale_bitmask | structured_row_in_flight(state, newest),
        },
    )


def structured_updates(state: State, pending: Term) -> dict[Term, Term]:
    """A scheduled step's effect on the deferral: its sample_tokens goes out now, or after the oldest output."""
    if not state.sizes.structured:
        return {}
    scheduled = state.scheduled
    return {
        state.samples_sent: if_then_else(pending, state.samples_sent, scheduled + 1),
        state.defer_until: if_then_else(pending, state.processed + 1, state.defer_until),
    }


def no_deferral(state: State) -> list[Term]:
    """The guard that no deferred sample_tokens is outstanding (the engine is inside that step's call)."""
    return [state.samples_sent == state.scheduled] if state.sizes.structured else []


@action(actor="engine")
def schedule(state: State, leave_out: Term) -> Step:
    """schedule() and the exec/sample RPCs of one step, while the batch queue has room.

    ``leave_out`` names a request the token budget leaves out of the step (-1: nobody)."""
    computed, scheduled, gaps_left = state.computed, state.scheduled, state.gaps_left

    def unfinished(q: Term) -> Term:
        return computed[q] < state.length_of[q]

    def included(q: Term) -> Term:
        return unfinished(q) & (leave_out != q) & may_schedule(state, q)

    nobody = leave_out < 0
    row = map_of(state.Request, lambda q: if_then_else(included(q), computed[q] + 1, 0), state.Planned)
    return Step(
        conjunction(
            (scheduled - state.processed < state.sizes.queue_size) & ~state.dead,
            scheduled < state.sizes.steps,
            any_of(state.Request, included),
            nobody | ((gaps_left > 0) & any_of(state.Request, lambda q: (q == leave_out) & unfinished(q))),
            *no_deferral(state),
        ),
        {
            state.plan: state.plan.set(clamp(state, scheduled), row),
            computed: map_of(
                state.Request, lambda q: if_then_else(included(q), computed[q] + 1, computed[q]), state.Pieces
            ),
            scheduled: scheduled + 1,
            gaps_left: if_then_else(nobody, gaps_left, gaps_left - 1),
            **structured_updates(state, pending_structured(state, included)),
        },
    )


def pending_structured(state: State, included: Callable[[Term], Term]) -> Term:
    """``pending_structured_output_tokens`` of the step being scheduled (async scheduling only)."""
    if not (state.sizes.structured and state.sizes.async_scheduling):
        return lift(False)
    q = lift(state.sizes.requests - 1, state.Request)
    final_or_decode = state.computed[q] + 1 >= state.prompt_of[q]
    return included(q) & final_or_decode & (latest_kept(state, q, state.scheduled) > state.processed)


@action(actor="engine")
def schedule_empty(state: State) -> Step:
    """schedule() returned a SchedulerOutput with no scheduled tokens; step_with_batch_queue sends it to
    execute_model on every worker and queues the exec future as the step's output, with no sample_tokens
    (``model_executed`` is False). The plan's row stays empty (rows are written only when scheduled).

    The scheduler has requests (``has_requests``): an unfinished one, a step in flight, or, after the last
    non-empty step, the finished requests whose ``finished_req_ids`` this empty step carries."""
    scheduled, processed = state.scheduled, state.processed
    forced = cadence_blocked(state)
    return Step(
        conjunction(
            (scheduled - processed < state.sizes.queue_size) & ~state.dead,
            scheduled < state.sizes.steps,
            (state.empties_left > 0) | forced if state.sizes.cadence_empties else state.empties_left > 0,
            any_of(state.Request, lambda q: state.computed[q] < state.length_of[q])
            | (processed < scheduled)
            | nonempty(state, maximum(scheduled - 1, 0)),
            *no_deferral(state),
        ),
        {
            scheduled: scheduled + 1,
            **({state.samples_sent: scheduled + 1} if state.sizes.structured else {}),
            **({} if not state.sizes.empty_steps else {state.empties_left: spent_empty(state, forced)}),
        },
    )


def spent_empty(state: State, forced: Term) -> Term:
    """The empty steps left after this one: a forced one (the cadence) spends none of ``empty_steps``."""
    if not state.sizes.cadence_empties:
        return state.empties_left - 1
    return if_then_else(forced, state.empties_left, state.empties_left - 1)


def cadence_blocked(state: State) -> Term:
    """The V2 decode cadence leaves the scheduler nothing to schedule while a request is unfinished: every
    unfinished request waits for its ``next_decode_eligible_step`` (the step is empty, not a choice)."""
    if not state.sizes.cadence_empties:
        return lift(False)

    def unfinished(q: Term) -> Term:
        return state.computed[q] < state.length_of[q]

    return any_of(state.Request, unfinished) & all_of(
        state.Request, lambda q: unfinished(q).implies(~may_schedule(state, q))
    )


@action(actor="engine")
def process_output(state: State) -> Step:
    """The oldest step's reply arrived (its GPU work, broadcast included, finished on the output rank)."""
    processed = state.processed
    last = state.sizes.last
    guard = (processed < state.scheduled) & (state.gpu_step[last] > processed) & (state.failed != processed + 1)
    if state.sizes.shape_asserts:  # a step whose sample_tokens raised: engine_raises_on_sample
        guard = guard & (state.sample_failed != processed + 1)
    if state.sizes.structured:  # a deferral pops exactly the oldest step before the deferred sample_tokens
        guard = guard & ~((state.samples_sent < state.scheduled) & (processed >= state.defer_until))
    return Step(guard, {processed: processed + 1})


@action(actor="engine")
def engine_raises_on_sample(state: State) -> Step:
    """The oldest step's sample_tokens raised on the output rank (spec decode on the V1 runner: the shape assert
    of ``_pp_broadcast_prev_sampled_token_ids``): ``future.result()`` raises the worker's failure
    (``RuntimeError: Worker failed with error ...``, ``MultiprocExecutor.collective_rpc.get_response``) and the
    engine is gone; the shutdown terminates the workers with the receives the other ranks posted."""
    processed = state.processed
    return Step(
        (processed < state.scheduled) & (state.sample_failed == processed + 1),
        {state.dead: lift(True), **terminated(state)},
    )


@action(actor="engine")
def engine_raises(state: State) -> Step:
    """The oldest step's execute_model raised on the output rank: once its sample_tokens reply is in (None, or
    the receive's AssertionError), step_with_batch_queue raises and the engine is gone. The engine's death
    shuts the executor down (``MultiprocExecutor.shutdown`` terminates the worker processes), so the ops the
    ranks still had posted on the PP group (the last rank's irecv of the failed step) go with them: a posted op
    of a terminated process is not a hang."""
    processed, last = state.processed, state.sizes.last
    return Step(
        conjunction(processed < state.scheduled, state.failed == processed + 1, state.rpc[last] >= 2 * processed + 2),
        {state.dead: lift(True), **terminated(state)},
    )


def terminated(state: State) -> dict[Term, Term]:
    """The updates that take every op the ranks still had posted (on pp, and ppb where there is one) with the
    terminated worker processes."""
    updates: dict[Term, Term] = {}
    for group in (state.pp, state.ppb):
        if group is not None:
            updates[group.queue] = lift(
                tuple(() for _ in range(group.members.count)), MapSort(group.members, group.queue_sort)
            )
    return updates
