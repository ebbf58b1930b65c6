"""The CPU thread of a rank: ``execute_model`` and ``sample_tokens``, and the rank's own discard mask.

Mirrors ``vllm/v1/worker/gpu_worker.py`` (``Worker.execute_model``: wait ``_pp_send_work``,
``irecv_tensor_dict`` wrapped in ``AsyncIntermediateTensors``, ``isend_tensor_dict``) and
``vllm/v1/worker/gpu_model_runner.py`` (``_prepare_inputs`` computing ``discard_request_mask``,
``sample_tokens``, ``_bookkeeping_sync``, ``_is_all_reqs_chunked_prefill`` (v0.20.0 only),
``_pp_broadcast_prev_sampled_token_ids`` and ``_pp_receive_prev_sampled_token_ids_to_input_batch``).

Each rank handles the RPCs in the order the executor sends them: exec(N), sample(N), exec(N+1)...
``sample_tokens`` is where the variants differ (``variants.py``); the faithfulness notes of
``model.py`` say how the buffered gloo metadata and the recomputed mask are modelled. The V2 runner's
path (``runner=2``) lives in ``handler.py``; the actions here call it, so each RPC is one action.

Two features change the V1 path. Without async scheduling (``async_scheduling=0``) no rank broadcasts
or receives: ``sample_tokens`` samples on the last rank (``_bookkeeping_sync`` appends the real ids) and
returns None elsewhere, and a non-last rank appends a request's new token in ``_update_states`` from
the scheduler's ``new_token_ids`` (``Scheduler._make_cached_request_data``: sent ``if self.use_pp and
not async_scheduling``) when the request is scheduled again. With speculative decoding (``drafts`` > 0)
a step with a decode row samples ``[num_reqs, 1 + k]`` ids (the rejection sampler), and the last
rank's ``_pp_broadcast_prev_sampled_token_ids`` fails its ``assert sampled_token_ids.shape[-1] == 1``
before the broadcast: ``sample_tokens`` raises on the output rank.
"""

from __future__ import annotations

from lockstep.models.pp_broadcast import handler
from lockstep.models.pp_broadcast.engine import clamp, computed_before, empty, forward_pass, has_drafts, present
from lockstep.models.pp_broadcast.state import Path, Phase, State
from lockstep.models.pp_broadcast.stream import first_phase
from lockstep.models.pp_broadcast.variants import PRE_FIX, SKIP_DISAGREE, SKIP_WHOLE_RECEIVE, receive_guard
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.sorts import BOOL
from lockstep.spec.terms import Term, all_of, any_of, conjunction, if_then_else, lift, map_of, maximum


def discarded(state: State, rank: Term, step: Term, request: Term) -> Term:
    """discard_request_mask from the rank's own state: num_computed + num_scheduled < num_tokens."""
    return present(state, step, request) & (
        computed_before(state, step, request) + 1 < state.prompt_of[request] + state.output_length[rank][request]
    )


def kept(state: State, rank: Term, step: Term, request: Term) -> Term:
    return present(state, step, request) & ~discarded(state, rank, step, request)


def every_row_discarded(state: State, rank: Term, step: Term) -> Term:
    """_is_all_reqs_chunked_prefill() on this rank."""
    return all_of(state.Request, lambda q: present(state, step, q).implies(discarded(state, rank, step, q)))


def has_state(state: State, rank: Term, step: Term) -> Term:
    """``execute_model_state`` is set after execute_model(step): only the last rank sets it (the others
    return their IntermediateTensors), and not when its execute_model raised."""
    return (rank == state.sizes.last) & (state.failed != step + 1)


def skips(state: State, variant: str, rank: Term, step: Term) -> Term:
    """Whether this rank's sample_tokens(step) leaves out the broadcast (or its receive)."""
    if variant == PRE_FIX:
        return lift(False)
    if variant == SKIP_DISAGREE:
        no_decode = all_of(
            state.Request,
            lambda q: present(state, step, q).implies(computed_before(state, step, q) < state.prompt_of[q]),
        )
        return if_then_else(has_state(state, rank, step), every_row_discarded(state, rank, step), no_decode)
    return every_row_discarded(state, rank, step)


@action(actor="rank:{rank}")
def execute_model(state: State, rank: Term) -> Step:
    """Worker.execute_model(N): wait the sends of N-1, irecv (r > 0), prepare inputs, forward, isend (r < P-1)."""
    rpc = state.rpc
    step = rpc[rank] // 2
    metadata = (rank == 0) | (rpc[state.previous_rank[rank]] >= 2 * step + 1)
    return Step(
        conjunction((rpc[rank] % 2 == 0) & ~state.dead, step < state.scheduled, metadata, *forward_pass(state, step)),
        {rpc: rpc.set(rank, rpc[rank] + 1), **new_token_updates(state, rank, step), **handler.ring(state, rank, step)},
    )


def new_token_updates(state: State, rank: Term, step: Term) -> dict[Term, Term]:
    """Without async scheduling, GPUModelRunner._update_states on a non-last rank: the scheduler's
    ``new_token_ids`` of a scheduled request hold its tokens from ``num_computed_tokens`` on, so the request's
    ``output_token_ids`` grow to ``num_computed_tokens + len(new_token_ids) - num_prompt_tokens`` (a chunk adds
    none). With async scheduling (and on the V2 runner) nothing: the ids come from the broadcast."""
    if state.sizes.async_scheduling or state.sizes.runner != 1:
        return {}
    output_length = state.output_length
    grown = map_of(
        state.Request,
        lambda q: if_then_else(
            present(state, step, q),
            maximum(output_length[rank][q], computed_before(state, step, q) + 1 - state.prompt_of[q]),
            output_length[rank][q],
        ),
        state.Pieces,
    )
    return {output_length: output_length.set(rank, if_then_else(rank == state.sizes.last, output_length[rank], grown))}


@action(actor="rank:{rank}")
def execute_model_empty(state: State, rank: Term) -> Step:
    """Worker.execute_model(N) of a step with no scheduled tokens, on every rank alike: ``forward_pass`` is False
    (no irecv_tensor_dict); GPUModelRunner.execute_model runs _update_states (every request leaves the
    persistent batch; prev_req_id_to_index and prev_sampled_token_ids stay) and returns EMPTY_MODEL_RUNNER_OUTPUT
    at ``if not num_scheduled_tokens`` (execute_model_state stays None; no isend_tensor_dict). The engine sends
    no sample_tokens(N), so the rank's next RPC is exec(N+1): its RPC count passes both of N's."""
    rpc = state.rpc
    step = rpc[rank] // 2
    return Step(
        (rpc[rank] % 2 == 0) & ~state.dead & empty(state, step),
        {rpc: rpc.set(rank, rpc[rank] + 2), **handler.ring(state, rank, step)},
    )


@action(actor="rank:{rank}")
def execute_model_raises(state: State, rank: Term) -> Step:
    """Worker.execute_model(N) on the last rank: the irecv is posted, then GPUModelRunner.execute_model raises
    before its forward (execute_model_state stays None); the worker reports the error and takes the next RPC."""
    rpc, last = state.rpc, state.sizes.last
    step = rpc[rank] // 2
    metadata = rpc[state.previous_rank[rank]] >= 2 * step + 1
    return Step(
        conjunction(
            rank == last,
            rpc[rank] % 2 == 0,
            step < state.scheduled,
            metadata,
            state.failed == 0,
            *forward_pass(state, step),
        ),
        {rpc: rpc.set(rank, rpc[rank] + 1), state.failed: step + 1},
    )


@action(actor="rank:{rank}")
def sample_tokens(state: State, variant: str, rank: Term) -> Step:
    """sample_tokens(N), by execute_model_state and the release's guard: with a state the rank samples and
    broadcasts; without one it receives if the guard holds (and, on the last rank, fails the receive's
    ``assert not pp.is_last_rank`` before anything else) and returns None otherwise."""
    if state.sizes.runner == 2:  # the V2 runner's sample_tokens
        return handler.sample_tokens(state, variant, rank)
    rpc, output_length, mapped, Request = state.rpc, state.output_length, state.mapped, state.Request
    step = rpc[rank] // 2
    sampling = has_state(state, rank, step)
    any_kept = any_of(Request, lambda q: kept(state, rank, step, q))
    at_broadcast = (state.gpu_step[rank] == step) & (state.gpu_phase[rank] == Phase.BROADCAST)
    if state.sizes.async_scheduling:
        receiving = ~sampling & receive_guard(variant, rank, state.sizes.last)
        # spec decode: the last rank's sampled ids are [num_reqs, 1 + k]; the broadcast's shape assert raises
        asserts = sampling & has_drafts(state, step)
        rebuilds = (sampling & ~asserts) | (receiving & (rank != state.sizes.last))  # the receive on the last asserts
        skip = skips(state, variant, rank, step)
        issues = rebuilds & ~skip
        frozen = ~rebuilds | (lift(variant == SKIP_WHOLE_RECEIVE) & skip & receiving)  # the mutant returns early
        appends = ~frozen
        buffered = if_then_else(sampling | ~skip, step + 1, 0)
    else:  # no broadcast and no mapping; _bookkeeping_sync appends the real ids on the last rank
        receiving = asserts = issues = lift(False)
        frozen, appends, buffered = lift(True), sampling, lift(0)
    updates: dict[Term, Term] = {
        rpc: rpc.set(rank, rpc[rank] + 1),
        state.issued: state.issued.set(rank, state.issued[rank].set(clamp(state, step), issues)),
        state.path: state.path.set(
            rank, if_then_else(sampling, Path.SAMPLE, if_then_else(receiving, Path.RECEIVE, Path.RETURN))
        ),
        output_length: output_length.set(
            rank,
            map_of(
                Request,
                lambda q: if_then_else(
                    kept(state, rank, step, q) & appends, output_length[rank][q] + 1, output_length[rank][q]
                ),
                state.Pieces,
            ),
        ),
        mapped: mapped.set(
            rank, map_of(Request, lambda q: if_then_else(frozen, mapped[rank][q], kept(state, rank, step, q)), BOOL)
        ),
        state.map_step: state.map_step.set(
            rank, if_then_else(frozen, state.map_step[rank], if_then_else(any_kept, step + 1, 0))
        ),
        state.buffer_step: state.buffer_step.set(rank, if_then_else(frozen, state.buffer_step[rank], buffered)),
        state.gpu_step: state.gpu_step.set(rank, if_then_else(at_broadcast & ~issues, step + 1, state.gpu_step[rank])),
        state.gpu_phase: state.gpu_phase.set(
            rank, if_then_else(at_broadcast & ~issues, first_phase(rank), state.gpu_phase[rank])
        ),
    }
    if state.sizes.shape_asserts:
        updates[state.sample_failed] = if_then_else(asserts, step + 1, state.sample_failed)
    return Step(conjunction((rpc[rank] % 2 == 1) & ~state.dead, *sample_sent(state, step)), updates)


def sample_sent(state: State, step: Term) -> list[Term]:
    """The guard that the engine has sent sample_tokens(step) (with structured output it may defer it)."""
    return [step < state.samples_sent] if state.sizes.structured else []
