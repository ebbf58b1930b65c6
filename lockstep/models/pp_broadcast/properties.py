"""The properties of pp-broadcast: S1-S5 of protocols.md P1(e), ``reads_latest_token``,
``no_false_dependency`` (the pre-fix failure), the witness ``L2_pipelined_prefill``, and the final states.

Each predicate is a function of the model's ``State``; ``add_properties`` declares them in the
model's order. The built-ins ``no_collective_mismatch``, ``no_hang`` and ``no_deadlock`` come from
the machine and its communicators. Where each property comes from in vLLM's source (an assert, a
comment's invariant, a test's oracle) is listed in ``SOURCES`` and in ``docs/models/pp-broadcast.md``.

The features add or replace properties where they change what the runner keeps. The V1 runner's S2,
S3 and S4 read its ``discard_request_mask``, ``prev_req_id_to_index`` and placeholder lengths; the V2
runner keeps none of them (its need mask is computed from the scheduler's fields, its tokens live in
``req_states``), so ``runner=2`` checks ``reads_latest_token`` over ``req_states`` instead. S4 is the
async receive's placeholder invariant: without async scheduling a non-last rank appends a request's
token only when the request is scheduled again, and S2 (the masks agree for the step being run) is
what its skip decision would need. Speculative decoding adds ``sampled_one_column`` (the V1 assert) and
``draft_inputs_known``.
"""

from __future__ import annotations

from lockstep.models.pp_broadcast.engine import (
    all_chunked,
    clamp,
    computed_before,
    empty,
    is_decode,
    latest_kept,
    nonempty,
    present,
)
from lockstep.models.pp_broadcast.state import Path, Phase, State
from lockstep.models.pp_broadcast.stream import first_phase, front_is
from lockstep.models.pp_broadcast.worker import discarded
from lockstep.spec.machine import Machine
from lockstep.spec.terms import Term, TermLike, all_of, any_of, conjunction, if_then_else, lift, max_of


def handled_sample(state: State, rank: TermLike, step: Term) -> Term:
    return state.rpc[rank] >= 2 * step + 2


def in_sample_window(state: State, rank: Term) -> Term:
    return state.rpc[rank] % 2 == 1


def broadcast_matching(state: State) -> Term:
    """S1: for every sampled step the last rank broadcasts iff every other rank receives."""
    issued, last = state.issued, state.sizes.last
    return all_of(
        state.Rank,
        lambda r: all_of(
            state.StepIndex,
            lambda n: (handled_sample(state, r, n) & handled_sample(state, last, n)).implies(
                issued[r][n] == issued[last][n]
            ),
        ),
    )


def predicate_agreement(state: State) -> Term:
    """S2: ranks between exec(N) and sample(N) hold the same discard_request_mask for N."""
    rpc = state.rpc
    return all_of(
        state.Rank,
        lambda r: all_of(
            state.Rank,
            lambda other: (
                in_sample_window(state, r) & in_sample_window(state, other) & (rpc[r] == rpc[other])
            ).implies(
                all_of(
                    state.Request,
                    lambda q: discarded(state, r, rpc[r] // 2, q) == discarded(state, other, rpc[r] // 2, q),
                )
            ),
        ),
    )


def last_sampled_step(state: State, before: Term) -> Term:
    """The step (1-based) that sample_tokens last ran for before step ``before`` (0-based): the previous step,
    or with empty steps (which get no sample_tokens) the last non-empty one before it; 0 if none."""
    if not state.sizes.empties:
        return before
    return max_of(state.StepIndex, lambda n: if_then_else((n < before) & nonempty(state, n), n + 1, 0))


def reads_fresh(state: State, rank: Term) -> Term:
    """Before exec(N+1): every request of N+1 that the mapping holds was kept at the last sampled step (N, or
    the last non-empty step before an empty N), received from that step."""
    step = state.rpc[rank] // 2
    about_to_prepare = (state.rpc[rank] % 2 == 0) & (step < state.scheduled) & (step > 0)
    source = last_sampled_step(state, step)
    return about_to_prepare.implies(
        all_of(
            state.Request,
            lambda q: (present(state, step, q) & state.mapped[rank][q]).implies(
                (state.map_step[rank] == source) & (state.buffer_step[rank] == source)
            ),
        )
    )


def reads_latest(state: State, rank: Term) -> Term:
    """Before exec(N+1): a mapped request reads its latest sampled token, whatever step it came from."""
    step = state.rpc[rank] // 2
    about_to_prepare = (state.rpc[rank] % 2 == 0) & (step < state.scheduled) & (step > 0)
    return about_to_prepare.implies(
        all_of(
            state.Request,
            lambda q: (present(state, step, q) & state.mapped[rank][q]).implies(
                (state.map_step[rank] == state.buffer_step[rank])
                & (state.buffer_step[rank] == latest_kept(state, q, step))
            ),
        )
    )


def placeholder_agreement(state: State) -> Term:
    """S4: ranks that have sampled the same steps hold equal output_token_ids lengths."""
    rpc, lengths = state.rpc, state.output_length
    return all_of(
        state.Rank,
        lambda r: all_of(
            state.Rank, lambda other: (rpc[r] // 2 == rpc[other] // 2).implies(lengths[r] == lengths[other])
        ),
    )


def pipelined(state: State, step: Term) -> Term:
    """L2 at ``step``: rank 0 ran forward(step+1) while the last rank has not finished sample(step)."""
    gpu_step, last = state.gpu_step, state.sizes.last
    rank0_ran_next = (gpu_step[0] > step + 1) | ((gpu_step[0] == step + 1) & ~front_is(state, 0, Phase.FORWARD))
    last_sampled = (gpu_step[last] > step) | ((gpu_step[last] == step) & front_is(state, last, Phase.BROADCAST))
    witness = all_chunked(state, step) & (step + 1 < state.scheduled) & rank0_ran_next & ~last_sampled
    return witness & nonempty(state, step) if state.sizes.empties else witness  # an empty step has no rows


def no_sample_on_empty(state: State) -> Term:
    """No rank's sample_tokens runs for an empty step, so none samples, broadcasts or receives for it."""
    return all_of(
        state.Rank,
        lambda r: (
            ~((state.rpc[r] % 2 == 1) & empty(state, state.rpc[r] // 2))
            & all_of(state.StepIndex, lambda n: empty(state, n).implies(~state.issued[r][n]))
        ),
    )


def no_op_on_empty(state: State) -> Term:
    """A rank's stream at an empty step has run and posted nothing of it (no irecv, forward, isend, sample or
    broadcast): it is at the step's first op, unposted."""
    return all_of(
        state.Rank,
        lambda r: empty(state, state.gpu_step[r]).implies((state.gpu_phase[r] == first_phase(r)) & ~state.posted[r]),
    )


def reads_latest_v2(state: State, rank: Term) -> Term:
    """V2, in execute_model(N) after ``update_pp_decode_requests``: each decode row's input token (its
    ``req_states.last_sampled_tokens``, read by ``combine_sampled_and_draft_tokens``) came from the request's
    latest sampled step."""
    step = state.rpc[rank] // 2
    preparing = (state.rpc[rank] % 2 == 1) & (step < state.scheduled)
    return preparing.implies(
        all_of(
            state.Request,
            lambda q: is_decode(state, step, q).implies(state.applied[rank][q] == latest_kept(state, q, step)),
        )
    )


def reads_latest_sync(state: State, rank: Term) -> Term:
    """V1 without async scheduling, in execute_model(N): ``_prepare_input_ids`` copies every input id from
    ``token_ids_cpu`` (``prev_sampled_token_ids`` is None), so the rank's copy of a decode row's request holds every
    token up to its input position: the last rank appended it in ``_bookkeeping_sync``, the others in
    ``_update_states`` from the scheduler's ``new_token_ids``."""
    step = state.rpc[rank] // 2
    preparing = (state.rpc[rank] % 2 == 1) & (step < state.scheduled)
    return preparing.implies(
        all_of(
            state.Request,
            lambda q: is_decode(state, step, q).implies(
                state.output_length[rank][q] + state.prompt_of[q] >= computed_before(state, step, q) + 1
            ),
        )
    )


def knows_drafts(state: State, rank: Term) -> Term:
    """The rank holds the draft tokens it embeds: the last rank proposes them; the other ranks only where they
    are broadcast (the V2 PPHandler from v0.30.0, applied with the slot's tokens)."""
    if state.sizes.runner == 2 and state.sizes.release.broadcasts_drafts:
        return lift(True)
    if state.sizes.runner == 1 and not state.sizes.async_scheduling:  # the scheduler sends scheduled_spec_decode_tokens
        return lift(True)
    return rank == state.sizes.last


def draft_inputs_known(state: State, rank: Term) -> Term:
    """In execute_model(N), a decode row's draft-token inputs are the drafts proposed with its latest token."""
    step = state.rpc[rank] // 2
    preparing = (state.rpc[rank] % 2 == 1) & (step < state.scheduled)
    fresh = knows_drafts(state, rank)
    return preparing.implies(all_of(state.Request, lambda q: is_decode(state, step, q).implies(fresh)))


def side_waits_on_chunks(state: State) -> Term:
    """Rank 0's forward(N) waits for the side-stream broadcasts of step N - pp_size, an all-chunked step."""
    if not state.sizes.handler:
        return lift(False)
    step, size = state.gpu_step[0], state.sizes.ranks
    source = step - size
    return conjunction(
        front_is(state, 0, Phase.FORWARD),
        step >= size,
        state.issued[0][clamp(state, source)],
        state.side_step[0] <= source,
        all_chunked(state, clamp(state, source)),
    )


def finished(state: State) -> Term:
    """Every step processed, every request done, every rank idle at the last step."""
    rpc, gpu_step, scheduled = state.rpc, state.gpu_step, state.scheduled
    idle = conjunction(
        state.processed == scheduled,
        all_of(state.Request, lambda q: state.computed[q] == state.length_of[q]),
        all_of(state.Rank, lambda r: (gpu_step[r] == scheduled) & ~state.posted[r] & (rpc[r] == 2 * scheduled)),
    )
    if not state.sizes.handler:
        return idle
    return idle & all_of(state.Rank, lambda r: (state.side_step[r] == scheduled) & ~state.side_posted[r])


def add_properties(machine: Machine, state: State) -> None:
    """Declare the properties, in the model's order, and the final states."""
    Rank, gpu_phase, last, sizes = state.Rank, state.gpu_phase, state.sizes.last, state.sizes
    v1 = sizes.runner == 1

    def while_alive(predicate: Term) -> Term:
        """A data property holds while no execute_model (nor, with drafts on the V1 runner, sample_tokens) has
        raised: after one the engine raises and is gone."""
        if sizes.shape_asserts:
            predicate = (state.sample_failed == 0).implies(predicate)
        return (state.failed == 0).implies(predicate) if state.sizes.failures else predicate

    machine.always(
        "S1_broadcast_matching",
        while_alive(broadcast_matching(state)),
        "S1: for every sampled step the last rank broadcasts iff every other rank receives",
    )
    if v1:
        machine.always(
            "S2_predicate_agreement",
            while_alive(predicate_agreement(state)),
            "S2: ranks between exec(N) and sample(N) hold the same discard_request_mask for N",
        )
    if v1 and not sizes.async_scheduling:
        machine.always(
            "reads_latest_token",
            while_alive(all_of(Rank, lambda r: reads_latest_sync(state, r))),
            "without async scheduling every rank holds a decode's input token in token_ids_cpu when it prepares the "
            "step (the scheduler sends it to the non-last ranks: new_token_ids)",
        )
    elif v1:
        machine.always(
            "S3_no_stale_read",
            while_alive(all_of(Rank, lambda r: reads_fresh(state, r))),
            "S3: _prepare_input_ids(N+1) reads prev_sampled_token_ids only for rows kept at N, from N's broadcast"
            + (" (N: the last step sample_tokens ran for; an empty step gets none)" if state.sizes.empties else ""),
        )
        machine.always(
            "reads_latest_token",
            while_alive(all_of(Rank, lambda r: reads_latest(state, r))),
            "the id _prepare_input_ids scatters for a request is the last token sampled for it (S3 by value)",
        )
    else:
        machine.always(
            "reads_latest_token",
            while_alive(all_of(Rank, lambda r: reads_latest_v2(state, r))),
            "the token combine_sampled_and_draft_tokens writes for a decode (req_states.last_sampled_tokens) is the "
            "last one sampled for its request",
        )
    if v1 and sizes.async_scheduling:
        machine.always(
            "S4_placeholder_agreement",
            while_alive(placeholder_agreement(state)),
            "S4: ranks that have sampled the same steps hold equal output_token_ids lengths",
        )
    machine.always(
        "S5_rpc_order",
        while_alive(
            all_of(Rank, lambda r: (state.rpc[r] <= 2 * state.scheduled) & (2 * state.gpu_step[r] <= state.rpc[r]))
        ),
        "S5: every rank handles exec(N), sample(N), exec(N+1) as issued; its GPU never runs ahead",
    )
    main_stream_waits = state.posted[0] & (gpu_phase[0] == Phase.BROADCAST) & all_chunked(state, state.gpu_step[0])
    machine.always(
        "no_false_dependency",
        while_alive(~(main_stream_waits | side_waits_on_chunks(state)) if sizes.handler else ~main_stream_waits),
        "rank 0's stream never waits on the broadcast of a step whose rows are all non-final chunks"
        + (" (nor, from the ring, on the side stream's)" if sizes.handler else ""),
    )
    machine.always(
        "sample_only_with_state",
        all_of(Rank, lambda r: (state.path[r] == Path.SAMPLE).implies(r == last)),
        "sample_tokens samples (and calls _pp_broadcast_prev_sampled_token_ids, which asserts pp.is_last_rank) "
        "only with execute_model_state, which only the last rank sets"
        if v1
        else "sample_tokens samples (and calls PPHandler.broadcast, which asserts is_last_rank) only on the last rank",
    )
    machine.always(
        "receive_only_on_non_last",
        all_of(Rank, lambda r: (state.path[r] == Path.RECEIVE).implies(r != last)),
        "_pp_receive_prev_sampled_token_ids_to_input_batch (assert not pp.is_last_rank) runs only on non-last ranks"
        if v1
        else "PPHandler.receive / pp_receive (assert not is_last_rank) runs only on non-last ranks",
    )
    if v1 and not sizes.async_scheduling:
        machine.always(
            "return_only_after_failure",
            all_of(Rank, lambda r: (state.path[r] == Path.RETURN).implies((r != last) | (state.failed > 0))),
            "without async scheduling sample_tokens returns None on every non-last rank, and on the last rank only "
            "after its execute_model raised",
        )
    else:
        machine.always(
            "return_only_after_failure",
            all_of(Rank, lambda r: (state.path[r] == Path.RETURN).implies((r == last) & (state.failed > 0))),
            "sample_tokens returns None (no state, no receive) only on the last rank after its execute_model raised",
        )
    if v1 and sizes.failures:
        empty_output = lift(sizes.release.empty_output_on_failure)  # what sample_tokens returns without a state
        machine.always(
            "failure_reaches_engine",
            ~((state.path[last] == Path.RETURN) & (state.failed > 0) & empty_output),
            "after its execute_model raised, the output rank's sample_tokens returns None, so step_with_batch_queue "
            "re-raises that exception ('None from sample_tokens() implies that the original execute_model() call "
            "failed'); from v0.23.0 the V1 runner returns ModelRunnerOutput.with_kv_conn_output_only(None), "
            "EMPTY_MODEL_RUNNER_OUTPUT",
        )
    if v1 and sizes.drafts:
        machine.always(
            "sampled_one_column",
            state.sample_failed == 0,
            "_pp_broadcast_prev_sampled_token_ids: assert sampled_token_ids.shape[-1] == 1 ('PP+async expects "
            "sampled_token_ids to have shape [num_reqs, 1]'): the last rank's sample_tokens never raises on it",
        )
    if sizes.drafts:
        machine.always(
            "draft_inputs_known",
            while_alive(all_of(Rank, lambda r: draft_inputs_known(state, r))),
            "execute_model(N) embeds a decode row's real draft tokens: every rank holds the drafts proposed with "
            "the row's latest token (the last rank proposes them; the others receive them)",
        )
    if sizes.structured:
        machine.always(
            "grammar_bitmask_current",
            ~state.stale_bitmask,
            "the grammar bitmask of a step is computed once the structured request has all the output tokens it "
            "needs (SchedulerOutput.pending_structured_output_tokens); else the grammar cannot accept the sampled "
            "token ('Failed to advance FSM', vLLM issue #45014)",
        )
    if state.sizes.empties:
        machine.always(
            "no_sample_on_empty_step",
            no_sample_on_empty(state),
            "step_with_batch_queue sends no sample_tokens for a step with no scheduled tokens (model_executed is "
            "False): no rank samples, broadcasts or receives for it (every rank's execute_model_state stays None)",
        )
        machine.always(
            "no_pp_op_on_empty_step",
            no_op_on_empty(state),
            "Worker.execute_model of a step with no scheduled tokens posts no irecv (forward_pass is False) and "
            "GPUModelRunner.execute_model returns EMPTY_MODEL_RUNNER_OUTPUT before any forward or isend",
        )
    machine.sometimes(
        "L2_pipelined_prefill",
        any_of(state.StepIndex, lambda n: pipelined(state, n)),
        "L2: rank 0 runs forward(N+1) before the last rank finishes sample(N) of an all-chunked step N",
    )
    machine.set_final(finished(state) | state.dead)
