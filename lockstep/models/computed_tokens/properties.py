"""The properties of computed-tokens (protocols.md P4(d)), the final states and the strengthening.

U1-U6 read the attention metadata each rank built last (``metadata.*``), per real row:
- U1 ``U1_sound``: ``seq_lens_cpu_upper_bound >= seq_lens`` (the GPU value).
- U2 ``U2_exact``: equal on prefill rows, and on every row outside async spec decode.
- U3 ``U3_bounded_slack``: bound - seq_len is at most the drafts of the request's steps that were
  scheduled but not yet updated from when this step was scheduled (``allowed``, read at schedule
  time); the corollary ``upper <= max_model_len + k`` is checked as ``U3_within_max_model_len``.
- U4 ``U4_prefill_progress``: ``num_computed_prefill_tokens = min(mirror, prefill_len)`` and
  ``is_prefilling`` iff the scheduler's pre-step value is below ``prefill_len``.
- U5 ``U5_padding``: with FULL graphs ``prepare_attn`` takes ``max_seq_len`` over the *padded*
  rows (``num_reqs = num_reqs_after_padding``), not over real rows only; padded rows are 0, so it
  equals the maximum over real rows. The model takes it over every row, as the source does.
- U6 ``U6_mirror_converges``: "if a request has no in-flight step, the mirror equals the GPU
  value" cannot hold at every moment in v0.22.0: the mirror is written only in
  ``add_requests``/``update_requests``, so between a step's ``postprocess`` and the next
  ``update_requests`` it holds the pre-step value while the GPU value has moved on (in sync mode
  without drafts as well). The mirror is read only in ``prepare_inputs``, so the model checks U6
  there: a row of a request that had no step unprocessed by the scheduler when this step was
  scheduled has mirror == GPU value.

``strengthen`` hands the invariants of ``invariants.py`` to k-induction (post-fix only).
"""

from __future__ import annotations

from collections.abc import Callable

from lockstep.models.computed_tokens.invariants import invariants
from lockstep.models.computed_tokens.state import State, Status
from lockstep.spec.machine import Machine
from lockstep.spec.terms import Term, TermLike, all_of, any_of, conjunction, disjunction, if_then_else, maximum, minimum


def rows(state: State, body: Callable[[Term, int], TermLike]) -> Term:
    """``body(rank, request)`` on every real row of every rank's last metadata."""
    return all_of(
        state.Rank,
        lambda r: conjunction(
            *[(state.built[r] & state.real[r][q]).implies(body(r, q)) for q in range(state.sizes.requests)]
        ),
    )


def slack(state: State, r: Term, q: Term | int) -> Term:
    """How far the row's bound is above the GPU seq_len."""
    return state.upper[r][q] - state.seq_len[r][q]


def _bound_properties(machine: Machine, state: State) -> None:
    """U1-U3: the upper bound is sound, exact where it must be, and within its slack."""
    sizes, upper = state.sizes, state.upper
    machine.always(
        "U1_sound",
        rows(state, lambda r, q: upper[r][q] >= state.seq_len[r][q]),
        "U1: seq_lens_cpu_upper_bound >= the GPU seq_lens on every real row",
    )
    exact_everywhere = not (sizes.asynchronous and sizes.drafts > 0)
    machine.always(
        "U2_exact",
        rows(
            state, lambda r, q: (state.prefilling[r][q] | exact_everywhere).implies(upper[r][q] == state.seq_len[r][q])
        ),
        "U2: exact on prefill rows, and on every row outside async spec decode",
    )
    machine.always(
        "U3_bounded_slack",
        rows(state, lambda r, q: slack(state, r, q) <= state.allowed[r][q]),
        "U3: bound - seq_len <= Σ drafts of the request's steps unprocessed when this step was scheduled",
    )
    machine.always(
        "U3_within_max_model_len",
        rows(state, lambda r, q: upper[r][q] <= sizes.max_model_len + sizes.drafts),
        "U3 (corollary): the bound stays within max_model_len + num_spec",
    )


def _metadata_properties(machine: Machine, state: State) -> None:
    """U4-U6: prefill progress, padding and max_seq_len, the mirror's convergence."""
    upper, count = state.upper, state.sizes.requests
    machine.always(
        "U4_prefill_progress",
        rows(
            state,
            lambda r, q: conjunction(
                state.seen_prefill_tokens[r][q] == minimum(state.seen_mirror[r][q], state.seen_prefill_len[r][q]),
                state.prefilling[r][q] == (state.sent[r][q] < state.seen_prefill_len[r][q]),
            ),
        ),
        "U4: num_computed_prefill_tokens = min(mirror, prefill_len); "
        "is_prefilling iff the scheduler's pre-step value < prefill_len",
    )
    machine.always(
        "U5_padding",
        all_of(
            state.Rank,
            lambda r: state.built[r].implies(
                conjunction(
                    all_of(state.Row, lambda row: (row >= count).implies(upper[r][row] == 0)),
                    state.max_seq_len[r]
                    == maximum(*[if_then_else(state.real[r][q], upper[r][q], 0) for q in range(count)]),
                )
            ),
        ),
        "U5: padded rows have bound 0; max_seq_len equals the maximum over real rows",
    )
    machine.always(
        "U6_mirror_converges",
        rows(state, lambda r, q: state.alone[r][q].implies(state.seen_mirror[r][q] == state.seen_gpu[r][q])),
        "U6: a request with no step in flight when scheduled has mirror == GPU num_computed_tokens",
    )


def _final_and_witnesses(machine: Machine, state: State) -> None:
    """The final states (every request finished, the queue empty) and the reachability witnesses."""
    sizes, count = state.sizes, state.sizes.requests
    finished = all_of(state.Request, lambda q: state.status[q] == Status.FINISHED)
    machine.set_final(finished & state.batch.is_empty())
    machine.sometimes("all_finished", finished, "every request can run to max_tokens")
    if sizes.asynchronous and sizes.drafts > 0:
        machine.sometimes(
            "optimistic_bound",
            any_of(
                state.Rank,
                lambda r: disjunction(
                    *[state.built[r] & state.real[r][q] & (slack(state, r, q) > 0) for q in range(count)]
                ),
            ),
            "async spec decode: a bound above the GPU seq_len (drafts of the step in flight)",
        )


def add_properties(machine: Machine, state: State) -> None:
    """U1-U6, the final states and the reachability witnesses."""
    _bound_properties(machine, state)
    _metadata_properties(machine, state)
    _final_and_witnesses(machine, state)


def strengthen(machine: Machine, state: State, as_properties: bool) -> None:
    """Give k-induction the strengthening invariants; ``as_properties`` also checks each as ``always``."""
    for name, predicate in invariants(state):
        machine.strengthen(predicate)
        if as_properties:
            machine.always(f"invariant_{name}", predicate, "strengthening invariant for k-induction")
