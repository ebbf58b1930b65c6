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
"""

from __future__ import annotations

from lockstep.models.pp_broadcast.state import State
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.sorts import MapSort
from lockstep.spec.terms import Term, all_of, any_of, conjunction, if_then_else, lift, map_of, maximum, minimum


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
    return [~empty(state, step)] if state.sizes.empty_steps else []


def all_chunked(state: State, step: Term) -> Term:
    return all_of(state.Request, lambda q: present(state, step, q).implies(non_final_chunk(state, step, q)))


@action(actor="engine")
def schedule(state: State, leave_out: Term) -> Step:
    """schedule() and the exec/sample RPCs of one step, while the batch queue has room.

    ``leave_out`` names a request the token budget leaves out of the step (-1: nobody)."""
    computed, scheduled, gaps_left = state.computed, state.scheduled, state.gaps_left

    def unfinished(q: Term) -> Term:
        return computed[q] < state.length_of[q]

    def included(q: Term) -> Term:
        return unfinished(q) & (leave_out != q)

    nobody = leave_out < 0
    row = map_of(state.Request, lambda q: if_then_else(included(q), computed[q] + 1, 0), state.Planned)
    return Step(
        conjunction(
            (scheduled - state.processed < state.sizes.ranks) & ~state.dead,
            scheduled < state.sizes.steps,
            any_of(state.Request, included),
            nobody | ((gaps_left > 0) & any_of(state.Request, lambda q: (q == leave_out) & unfinished(q))),
        ),
        {
            state.plan: state.plan.set(clamp(state, scheduled), row),
            computed: map_of(
                state.Request, lambda q: if_then_else(included(q), computed[q] + 1, computed[q]), state.Pieces
            ),
            scheduled: scheduled + 1,
            gaps_left: if_then_else(nobody, gaps_left, gaps_left - 1),
        },
    )


@action(actor="engine")
def schedule_empty(state: State) -> Step:
    """schedule() returned a SchedulerOutput with no scheduled tokens; step_with_batch_queue sends it to
    execute_model on every worker and queues the exec future as the step's output, with no sample_tokens
    (``model_executed`` is False). The plan's row stays empty (rows are written only when scheduled).

    The scheduler has requests (``has_requests``): an unfinished one, a step in flight, or, after the last
    non-empty step, the finished requests whose ``finished_req_ids`` this empty step carries."""
    scheduled, processed = state.scheduled, state.processed
    return Step(
        conjunction(
            (scheduled - processed < state.sizes.ranks) & ~state.dead,
            scheduled < state.sizes.steps,
            state.empties_left > 0,
            any_of(state.Request, lambda q: state.computed[q] < state.length_of[q])
            | (processed < scheduled)
            | nonempty(state, maximum(scheduled - 1, 0)),
        ),
        {scheduled: scheduled + 1, state.empties_left: state.empties_left - 1},
    )


@action(actor="engine")
def process_output(state: State) -> Step:
    """The oldest step's reply arrived (its GPU work, broadcast included, finished on the output rank)."""
    processed = state.processed
    return Step(
        (processed < state.scheduled)
        & (state.gpu_step[state.sizes.last] > processed)
        & (state.failed != processed + 1),
        {processed: processed + 1},
    )


@action(actor="engine")
def engine_raises(state: State) -> Step:
    """The oldest step's execute_model raised on the output rank: once its sample_tokens reply is in (None, or
    the receive's AssertionError), step_with_batch_queue raises and the engine is gone. The engine's death
    shuts the executor down (``MultiprocExecutor.shutdown`` terminates the worker processes), so the ops the
    ranks still had posted on the PP group (the last rank's irecv of the failed step) go with them: a posted op
    of a terminated process is not a hang."""
    processed, last, pp = state.processed, state.sizes.last, state.pp
    nothing_posted = lift(tuple(() for _ in range(pp.members.count)), MapSort(pp.members, pp.queue_sort))
    return Step(
        conjunction(processed < state.scheduled, state.failed == processed + 1, state.rpc[last] >= 2 * processed + 2),
        {state.dead: True, pp.queue: nothing_posted},
    )
