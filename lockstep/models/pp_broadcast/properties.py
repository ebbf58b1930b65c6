"""The properties of pp-broadcast: S1-S5 of protocols.md P1(e), ``reads_latest_token``,
``no_false_dependency`` (the pre-fix failure), the witness ``L2_pipelined_prefill``, and the final states.

Each predicate is a function of the model's ``State``; ``add_properties`` declares them in the
model's order. The built-ins ``no_collective_mismatch``, ``no_hang`` and ``no_deadlock`` come from
the machine and its communicator.
"""

from __future__ import annotations

from lockstep.models.pp_broadcast.engine import all_chunked, empty, non_final_chunk, nonempty, present
from lockstep.models.pp_broadcast.state import Path, Phase, State
from lockstep.models.pp_broadcast.stream import first_phase, front_is
from lockstep.models.pp_broadcast.worker import discarded
from lockstep.spec.machine import Machine
from lockstep.spec.terms import Term, TermLike, all_of, any_of, conjunction, if_then_else, max_of


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
    if not state.sizes.empty_steps:
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


def latest_kept(state: State, request: Term, before: Term) -> Term:
    """The last step (1-based) before ``before`` whose sampled token of ``request`` was kept."""
    return max_of(
        state.StepIndex,
        lambda n: if_then_else(
            (n < before) & present(state, n, request) & ~non_final_chunk(state, n, request), n + 1, 0
        ),
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
    return witness & nonempty(state, step) if state.sizes.empty_steps else witness  # an empty step has no rows


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


def finished(state: State) -> Term:
    """Every step processed, every request done, every rank idle at the last step."""
    rpc, gpu_step, scheduled = state.rpc, state.gpu_step, state.scheduled
    return conjunction(
        state.processed == scheduled,
        all_of(state.Request, lambda q: state.computed[q] == state.length_of[q]),
        all_of(state.Rank, lambda r: (gpu_step[r] == scheduled) & ~state.posted[r] & (rpc[r] == 2 * scheduled)),
    )


def add_properties(machine: Machine, state: State) -> None:
    """Declare the properties, in the model's order, and the final states."""
    Rank, gpu_phase, last = state.Rank, state.gpu_phase, state.sizes.last

    def while_alive(predicate: Term) -> Term:
        """A data property holds while no execute_model has raised (after one the engine raises and is gone)."""
        return (state.failed == 0).implies(predicate) if state.sizes.failures else predicate

    machine.always(
        "S1_broadcast_matching",
        while_alive(broadcast_matching(state)),
        "S1: for every sampled step the last rank broadcasts iff every other rank receives",
    )
    machine.always(
        "S2_predicate_agreement",
        while_alive(predicate_agreement(state)),
        "S2: ranks between exec(N) and sample(N) hold the same discard_request_mask for N",
    )
    machine.always(
        "S3_no_stale_read",
        while_alive(all_of(Rank, lambda r: reads_fresh(state, r))),
        "S3: _prepare_input_ids(N+1) reads prev_sampled_token_ids only for rows kept at N, from N's broadcast"
        + (" (N: the last step sample_tokens ran for; an empty step gets none)" if state.sizes.empty_steps else ""),
    )
    machine.always(
        "reads_latest_token",
        while_alive(all_of(Rank, lambda r: reads_latest(state, r))),
        "the id _prepare_input_ids scatters for a request is the last token sampled for it (S3 by value)",
    )
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
    machine.always(
        "no_false_dependency",
        while_alive(~(state.posted[0] & (gpu_phase[0] == Phase.BROADCAST) & all_chunked(state, state.gpu_step[0]))),
        "rank 0's stream never waits on the broadcast of a step whose rows are all non-final chunks",
    )
    machine.always(
        "sample_only_with_state",
        all_of(Rank, lambda r: (state.path[r] == Path.SAMPLE).implies(r == last)),
        "sample_tokens samples (and calls _pp_broadcast_prev_sampled_token_ids, which asserts pp.is_last_rank) "
        "only with execute_model_state, which only the last rank sets",
    )
    machine.always(
        "receive_only_on_non_last",
        all_of(Rank, lambda r: (state.path[r] == Path.RECEIVE).implies(r != last)),
        "_pp_receive_prev_sampled_token_ids_to_input_batch (assert not pp.is_last_rank) runs only on non-last ranks",
    )
    machine.always(
        "return_only_after_failure",
        all_of(Rank, lambda r: (state.path[r] == Path.RETURN).implies((r == last) & (state.failed > 0))),
        "sample_tokens returns None (no state, no receive) only on the last rank after its execute_model raised",
    )
    if state.sizes.empty_steps:
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
