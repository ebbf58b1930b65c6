"""The engine of cudagraph-pp: ``schedule``, one batch a step, and the dispatch every stage makes of it.

Mirrors ``vllm/v1/engine/core.py`` (``EngineCore.step`` -> ``Scheduler.schedule``: one
``SchedulerOutput`` that the executor runs on every stage) and, for ``dispatch``,
``vllm/v1/worker/gpu/cudagraph_utils.py`` (``CudaGraphManager.dispatch`` over the plan of
``descriptors.py``). Without DP every stage dispatches the same batch identically, so the
descriptor of a step is a function of the batch the engine scheduled.
"""

from __future__ import annotations

from lockstep.models.cudagraph_pp.state import Phase, State
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.terms import Term, all_of, conjunction, if_then_else


def captures_done(state: State) -> Term:
    """Every rank has captured its graphs (capture_model runs before the engine schedules anything)."""
    return all_of(state.Rank, lambda r: state.phase[r] != Phase.CAPTURING)


def dispatch(state: State, at: Term) -> Term:
    """The descriptor for step ``at``'s batch (CudaGraphManager.dispatch over the plan)."""
    chosen = state.term_of(None)
    for (tokens, requests, decode), found in state.plan.table.items():
        chosen = if_then_else(
            conjunction(
                state.batch_tokens[at] == tokens, state.batch_requests[at] == requests, state.batch_decode[at] == decode
            ),
            state.term_of(found),
            chosen,
        )
    return chosen


def padded(state: State, chosen: Term, at: Term) -> Term:
    """num_tokens_after_padding: the descriptor's tokens, or the batch's own when eager."""
    return if_then_else(chosen == state.term_of(None), state.batch_tokens[at], state.tokens_of[chosen])


@action(actor="engine")
def schedule(state: State, tokens: Term, requests: Term, decode: Term) -> Step:
    """The scheduler's next batch; every stage runs the same scheduler output."""
    scheduled, decode_query_len = state.scheduled, state.sizes.decode_query_len
    uniform_ok = decode.implies(tokens == requests * decode_query_len)
    if decode_query_len == 1:  # one token per request is a uniform decode
        uniform_ok = decode == (tokens == requests)
    return Step(
        conjunction(captures_done(state), scheduled < state.sizes.steps, requests <= tokens, uniform_ok),
        {
            state.batch_tokens: state.batch_tokens.set(scheduled, tokens),
            state.batch_requests: state.batch_requests.set(scheduled, requests),
            state.batch_decode: state.batch_decode.set(scheduled, decode),
            scheduled: scheduled + 1,
        },
    )
