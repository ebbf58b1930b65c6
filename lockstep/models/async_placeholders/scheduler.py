"""The scheduler side of async-placeholders: ``schedule``, ``update_from_output`` and a KV-load failure.

Mirrors ``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule``, ``_make_cached_request_data``,
which sends ``num_output_tokens`` = outputs + placeholders; ``_preempt_request``;
``update_from_output``; ``_handle_invalid_blocks``) and ``vllm/v1/core/sched/async_scheduler.py``
(``AsyncScheduler._update_after_schedule``: placeholders += 1 + drafts;
``_update_request_with_output``: placeholders -= new tokens), with ``vllm/v1/engine/core.py``'s
``step_with_batch_queue`` (``batch_queue`` steps in flight).

Preemption from v0.27.0 (variant ``v0.27.0``, built with ``scheduler.stale_output``):
``_preempt_request`` sets ``num_output_placeholders = 0`` and ``num_stale_output_tokens =
num_in_flight_tokens``; ``update_from_output`` delivers a stale step's tokens but, with ``is_stale``,
neither subtracts its rejected drafts nor its new tokens from the placeholders; ``schedule`` keeps a
preempted request waiting while deliverable stale output is in flight. Before v0.27.0 the placeholders
survive the preemption and the in-flight output resolves them.

Finished requests (faithfulness note): once ``num_output_tokens >= max_tokens``, ``check_stop``
(``vllm/v1/core/sched/utils.py``) finishes the request in ``update_from_output``, preempted or
not, and it leaves the queues, so the model gives a request with all ``max_tokens`` outputs no step
and no KV-load failure. An unfinished request whose outputs and placeholders already reach
``max_tokens`` may still be skipped (``Scheduler.schedule``'s async check that the step in flight
reaches ``max_tokens``, or a token budget spent on other requests) or preempted (another request's
``allocate_slots`` fails): the engine schedules the batch's other requests regardless
(``step_with_batch_queue`` asks ``has_requests()``).

KV-load failure (faithfulness note): in v0.22.0 ``update_from_output`` skips the failed request
before ``_update_request_with_output`` and truncates ``num_computed_tokens``; no line there drops
output tokens. The model follows the runner's comment in ``_update_states`` ("some output tokens
were discarded due to a sync-KV-load failure"): between steps the scheduler drops the last
``discarded`` outputs, so the next ``num_output_tokens`` is below the runner's length.
"""

from __future__ import annotations

from lockstep.models.async_placeholders.state import Kind, Phase, State, in_flight
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.terms import Term, conjunction, if_then_else, record_of


@action(actor="scheduler")
def schedule(state: State, kind: Term, chunk: Term, drafts: Term, history: Term) -> Step:
    """schedule(): RUN sends num_output_tokens = outputs + placeholders, then adds 1 + drafts
    placeholders unless the step is a non-final prefill chunk (_update_after_schedule)."""
    sizes = state.sizes
    outputs, placeholders, prefilling = state.outputs, state.placeholders, state.prefilling
    run = kind == Kind.RUN
    produces = run & ~chunk
    guard = conjunction(
        state.to_runner.length() + state.to_scheduler.length() < sizes.batch_queue,  # step_with_batch_queue
        outputs < sizes.capacity,  # check_stop finished the request at max_tokens: it takes no more steps
        produces.implies(outputs + placeholders + 1 + drafts <= sizes.capacity),
        chunk.implies(run & prefilling) if sizes.chunked_prefill else ~chunk,
        (drafts > 0).implies(produces & ~prefilling),
        history if not sizes.history_toggles else True,
    )
    if not sizes.preemptions:
        guard = conjunction(guard, run)
    if state.stale is not None:  # v0.27.0: a preempted request waits until its stale output drained
        guard = conjunction(guard, run.implies(state.stale == 0))
    entry = record_of(
        state.Scheduled,
        kind=kind,
        chunk=chunk,
        drafts=drafts,
        sent=outputs + placeholders,
        outputs=outputs,
        history=history,
    )
    updates = {
        state.to_runner: state.to_runner.append(entry),
        placeholders: if_then_else(produces, placeholders + 1 + drafts, placeholders),
        prefilling: if_then_else(kind == Kind.PREEMPT, True, if_then_else(produces, False, prefilling)),
    }
    if state.stale is not None:
        # v0.27.0 _preempt_request: num_stale_output_tokens = num_in_flight_tokens, num_output_placeholders = 0
        preempt = kind == Kind.PREEMPT
        updates[placeholders] = if_then_else(preempt, 0, updates[placeholders])
        updates[state.stale] = if_then_else(preempt, _run_in_flight(state), state.stale)
    return Step(guard, updates)


def _run_in_flight(state: State) -> Term:
    """The steps in the batch queue that scheduled the request (num_in_flight_tokens, counted in steps)."""
    total: Term | int = 0
    for occupied, entry in in_flight(state):
        total = total + if_then_else(occupied & (entry.field("kind") == Kind.RUN), 1, 0)
    assert isinstance(total, Term)
    return total


@action(actor="scheduler")
def update_from_output(state: State) -> Step:
    """update_from_output: accepted + 1 new tokens; placeholders lose the rejected drafts and the new tokens."""
    outputs, placeholders = state.outputs, state.placeholders
    head = state.to_scheduler.head()
    produced = (head.field("kind") == Kind.RUN) & ~head.field("chunk")
    accepted, drafts = head.field("accepted"), head.field("drafts")
    rejected_taken = if_then_else((drafts > 0) & (placeholders > 0), placeholders - (drafts - accepted), placeholders)
    updates = {
        state.to_scheduler: state.to_scheduler.tail(),
        outputs: if_then_else(produced, outputs + accepted + 1, outputs),
        placeholders: if_then_else(produced, rejected_taken - (accepted + 1), placeholders),
    }
    if state.stale is not None:
        # v0.27.0: a stale output is delivered, but neither rolls back rejections nor resolves placeholders
        stale = (state.stale > 0) & (head.field("kind") == Kind.RUN)
        updates[placeholders] = if_then_else(stale, placeholders, updates[placeholders])
        updates[state.stale] = if_then_else(stale, state.stale - 1, state.stale)
    return Step(~state.to_scheduler.is_empty(), updates)


@action(actor="scheduler")
def kv_load_failure(state: State, discarded: Term) -> Step:
    """A sync KV-load failure discards the last outputs; the request recomputes (see module doc)."""
    idle = conjunction(state.to_runner.is_empty(), state.to_scheduler.is_empty(), state.phase == Phase.IDLE)
    return Step(
        conjunction(
            idle,
            state.kv_failures < state.sizes.kv_load_failures,
            state.outputs >= discarded,
            state.outputs < state.sizes.capacity,  # a finished request loads no KV
        ),
        {
            state.outputs: state.outputs - discarded,
            state.generated: state.generated - discarded,
            state.prefilling: True,
            state.kv_failures: state.kv_failures + 1,
        },
    )
