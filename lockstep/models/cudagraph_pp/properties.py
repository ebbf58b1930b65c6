"""The properties of cudagraph-pp: protocols.md P5(d) (A1, A2, A3, K1, S1, C1, D1, R1), each an
``always`` over what the last capture, receive and forward of each rank recorded, the witness
``graph_replayed_on_non_first_rank`` (v0.18.0 with PP never replays one), and the final states.

Each predicate is a function of the model's ``State``; ``add_properties`` declares them in the
model's order. The second half of K1 (the manager's FULL output buffer has the model output's
keys) holds by construction (``IntermediateTensors.empty_like`` of the model output) and is not a
state here.
"""

from __future__ import annotations

from lockstep.models.cudagraph_pp.descriptors import Descriptor
from lockstep.models.cudagraph_pp.engine import padded
from lockstep.models.cudagraph_pp.state import GraphMode, Key, Phase, State
from lockstep.models.cudagraph_pp.variants import FULL_ADJUSTMENT, Variant
from lockstep.spec.machine import Machine
from lockstep.spec.terms import Term, all_of, any_of, conjunction, disjunction, lift


def replayed(state: State, rank: Term) -> Term:
    """The rank's last forward replayed a graph (it was not eager)."""
    return (state.forward_step[rank] >= 0) & (state.mode_of[state.forward_descriptor[rank]] != GraphMode.NONE)


def non_first(rank: Term) -> Term:
    return rank >= 1


def address_stability(state: State, rank: Term) -> Term:
    """A1 on ``rank``."""
    given, recorded = state.forward_given[rank], state.graph_input[rank][state.forward_descriptor[rank]]
    return (non_first(rank) & replayed(state, rank)).implies(given == recorded)


def freshness(state: State, rank: Term) -> Term:
    """A2 on ``rank``."""
    forward_step = state.forward_step[rank]
    return (non_first(rank) & (forward_step >= 0)).implies(
        all_of(Key, lambda key: state.forward_data[rank][key] == forward_step)
    )


def key_sets(state: State, variant: Variant, rank: Term) -> Term:
    """K1 on ``rank``: the persistent buffer has both keys (none without one)."""
    keys = (Key.hidden_states, Key.residual) if variant.persistent_buffer else ()
    return (state.phase[rank] == Phase.RECEIVED).implies(conjunction(*(state.received_keys[rank][key] for key in keys)))


def sizes_fit(state: State, rank: Term) -> Term:
    """S1 on ``rank``."""
    rows = padded(state, state.descriptor[rank], state.step[rank])
    return (non_first(rank) & (state.phase[rank] == Phase.INPUTS_READY)).implies(
        (rows <= state.sizes.max_num_tokens) & (state.received_rows[rank] >= rows)
    )


def capture_order(state: State, rank: Term) -> Term:
    """C1 on ``rank``."""
    return conjunction(
        *(
            (state.graph_requests[rank][state.term_of(d)] > 0).implies(d.num_tokens <= state.output_rows[rank])
            for d in state.plan.descriptors
        )
    )


def dummy_bounds(state: State, variant: Variant, rank: Term, d: Descriptor) -> Term:
    """D1 on ``rank`` for descriptor ``d`` (and, for the adjustment, that it divides and does not grow)."""
    max_num_reqs = state.sizes.max_num_reqs
    requests = state.graph_requests[rank][state.term_of(d)]
    nominal = d.num_reqs or min(d.num_tokens, max_num_reqs)
    facts = [requests >= 1, requests <= min(d.num_tokens, max_num_reqs)]
    if d.uniform_token_count is not None:
        facts.append(requests * state.sizes.decode_query_len == d.num_tokens)
    if variant.name == FULL_ADJUSTMENT:
        facts.extend([lift(d.num_tokens) % requests == 0, requests <= nominal])
    return (requests > 0).implies(conjunction(*facts))


def compatible(state: State, rank: Term) -> Term:
    """R1 on ``rank``: the replayed descriptor fits its batch; a FULL one was captured with desc.num_reqs."""
    chosen, at = state.forward_descriptor[rank], state.forward_step[rank]
    parts = []
    for d in state.plan.descriptors:
        fits = conjunction(
            d.num_tokens >= state.batch_tokens[at],
            lift(True) if d.num_reqs is None else (state.batch_requests[at] <= d.num_reqs),
            lift(True) if d.uniform_token_count is None else state.batch_decode[at],
        )
        if d.mode == "FULL":
            fits = fits & (state.graph_requests[rank][state.term_of(d)] == d.num_reqs)
        parts.append((chosen == state.term_of(d)) & fits)
    return disjunction(*parts)


def add_properties(machine: Machine, state: State, variant: Variant) -> None:
    """Declare the final states and the properties, in the model's order."""
    Rank, descriptors = state.Rank, state.plan.descriptors
    machine.set_final(all_of(Rank, lambda r: (state.phase[r] == Phase.IDLE) & (state.step[r] == state.sizes.steps)))
    machine.always(
        "A1_address_stability",
        all_of(Rank, lambda r: address_stability(state, r)),
        "a replayed graph on a non-first rank is given its inputs at the address it recorded at capture",
    )
    machine.always(
        "A2_freshness",
        all_of(Rank, lambda r: freshness(state, r)),
        "a non-first rank's forward of step N reads step N's received data, every key",
    )
    machine.always(
        "A3_sender_reuse",
        all_of(Rank, lambda r: state.send_pending[r].implies(state.send_data[r] == state.send_step[r])),
        "the tensor handed to isend(N) still holds step N's output until the receiver has it",
    )
    machine.always(
        "K1_key_sets",
        all_of(Rank, lambda r: key_sets(state, variant, r)),
        "the received tensors have every key of the persistent buffer",
    )
    machine.always(
        "S1_sizes",
        all_of(Rank, lambda r: sizes_fit(state, r)),
        "num_tokens_after_padding fits the persistent buffer and the received tensors have that many rows",
    )
    machine.always(
        "C1_capture_order",
        all_of(Rank, lambda r: capture_order(state, r)),
        "every capture's output fits the manager's buffers, sized at the first capture",
    )
    machine.always(
        "D1_dummy_batch_bounds",
        all_of(Rank, lambda r: conjunction(*(dummy_bounds(state, variant, r, d) for d in descriptors))),
        "each captured dummy batch has 1 <= num_reqs <= min(num_tokens, max_num_reqs), uniform ones divide",
    )
    machine.always(
        "R1_replay_compatibility",
        all_of(Rank, lambda r: replayed(state, r).implies(compatible(state, r))),
        "a replayed descriptor fits the batch, and a FULL graph was captured with desc.num_reqs requests",
    )
    machine.sometimes(
        "graph_replayed_on_non_first_rank",
        any_of(Rank, lambda r: non_first(r) & replayed(state, r)),
        "a CUDA graph runs on a non-first pipeline stage",
    )
