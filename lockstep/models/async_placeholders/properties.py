"""The properties of async-placeholders (protocols.md P3(d)) and the final states.

- I1 ``suffix_form``: no -1 precedes a real token. I2 ``repair_postcondition``: after a repair
  no -1 remains, the length is first_placeholder + k and the written values are the first k
  valid ids of the previous row. I3 ``scans_agree``: on a suffix-form list ending with -1 both
  scans return the same index. I4 ``batch_aliases_request_list``. ``scan_cost_bounded``: a
  repair reads at most 1 + (length of the trailing -1 run) elements.
- K1 ``list_matches_scheduler_count``: after ``_update_states`` the list is exactly as long as
  the ``num_output_tokens`` the scheduler sent (the trim only shortens; nothing lengthens).
  K2 ``tokens_aligned``: every real token sits at its own output position. K3
  ``placeholders_nonnegative`` (the scheduler's ``assert num_output_placeholders >= 0``).
  ``placeholders_count_in_flight``: the scheduler's placeholders are 1 + drafts per output-producing
  step in the batch queue (0 from a v0.27.0 preemption while that output is stale);
  ``stale_output_drains`` (v0.27.0): stale output is marked only while a step of it is in flight.

A violation of K1/K2 in post-fix is a finding or a model error. The cost bound is exact for the
backward scan; the forward scan reads first_placeholder + 1 elements, so it breaks the bound once
the real tokens before the run outnumber the run, not at the first real token: the seed's first
violation is the list [0, 1, -1] (3 reads > 2).

The ``sometimes`` properties are witnesses that each operation of the instance is reachable.
"""

from __future__ import annotations

from collections.abc import Callable

from lockstep.models.async_placeholders.scans import BACKWARD, FORWARD, PLACEHOLDER, first_placeholder
from lockstep.models.async_placeholders.state import (
    Kind,
    Phase,
    State,
    current,
    ends_with_placeholder,
    in_flight,
    last_token,
    scheduled_here,
    sent,
    slots,
)
from lockstep.spec.machine import Machine
from lockstep.spec.terms import Term, TermLike, all_of, conjunction, count_of, if_then_else, minimum


def set_final(machine: Machine, state: State) -> None:
    """A run ends when both queues are empty, the runner is idle and no further output fits."""
    machine.set_final(
        conjunction(
            state.to_runner.is_empty(),
            state.to_scheduler.is_empty(),
            state.phase == Phase.IDLE,
            state.outputs + state.placeholders + 1 > state.sizes.capacity,
        )
    )


def _list_invariants(machine: Machine, state: State) -> None:
    """I1-I4 and the scan cost bound: the list's suffix form, the repair, the scans, the alias."""
    tokens, length, Position, capacity = state.tokens, state.length, state.Position, state.sizes.capacity
    machine.always(
        "suffix_form",
        all_of(
            Position,
            lambda p: (tokens[p] == PLACEHOLDER).implies(
                all_of(Position, lambda q: (q > p).implies(tokens[q] == PLACEHOLDER))
            ),
        ),
        "I1: every list is real* (-1)*: no -1 precedes a real token",
    )
    machine.always(
        "unused_slots_empty",
        all_of(Position, lambda p: (p >= length).implies(tokens[p] == PLACEHOLDER)),
        "model sanity: slots past the length hold -1",
    )
    start = state.repair_start
    machine.always(
        "repair_postcondition",
        state.repaired.implies(
            conjunction(
                count_of(Position, lambda p: (p < length) & (tokens[p] == PLACEHOLDER)) == 0,
                length == start + state.repair_written,
                all_of(
                    Position,
                    lambda p: ((p >= start) & (p < length)).implies(tokens[p] == state.prev_start + (p - start)),
                ),
            )
        ),
        "I2: after a repair no -1 remains, len = first_placeholder + k, and the k written ids are the previous row's",
    )
    suffix = all_of(
        Position,
        lambda p: ((p + 1 < capacity) & (tokens[p] == PLACEHOLDER)).implies(
            tokens[minimum(p + 1, capacity - 1)] == PLACEHOLDER
        ),
    )
    elements = slots(state)
    machine.always(
        "scans_agree",
        (suffix & ends_with_placeholder(state)).implies(
            first_placeholder(FORWARD, elements, length) == first_placeholder(BACKWARD, elements, length)
        ),
        "I3: on a suffix-form list ending with -1 the forward and backward scans return the same index",
    )
    machine.always(
        "batch_aliases_request_list",
        state.in_batch.implies(state.alias),
        "I4: the batch's req_output_token_ids row is the request's own list object",
    )
    machine.always(
        "scan_cost_bounded",
        state.repair_steps <= 1 + state.repair_run,
        "cost: a repair reads at most 1 + (length of the trailing -1 run) list elements",
    )


def _output_invariants(machine: Machine, state: State) -> None:
    """K1-K3: the list against the scheduler's count, token positions, placeholders."""
    tokens, length, Position = state.tokens, state.length, state.Position

    def is_real(p: Term) -> Term:
        return (p < length) & (tokens[p] != PLACEHOLDER)

    machine.always(
        "list_matches_scheduler_count",
        ((state.phase == Phase.UPDATED) & scheduled_here(state)).implies(length == sent(state)),
        "K1: after _update_states the list is as long as the scheduler's num_output_tokens",
    )
    machine.always(
        "tokens_aligned",
        all_of(Position, lambda p: is_real(p).implies(tokens[p] == p)),
        "K2: every real token sits at its own output position",
    )
    machine.always("placeholders_nonnegative", state.placeholders >= 0, "K3: num_output_placeholders >= 0")
    in_flight = _outputs_in_flight(state)
    if state.stale is not None:  # v0.27.0: a preemption zeroes the count; the stale steps no longer hold any
        in_flight = if_then_else(state.stale > 0, 0, in_flight)
    machine.always(
        "placeholders_count_in_flight",
        state.placeholders == in_flight,
        "num_output_placeholders is 1 + drafts for every output-producing step scheduled and not yet processed",
    )
    if state.stale is not None:
        runs = _count_in_flight(state, lambda entry: if_then_else(entry.field("kind") == Kind.RUN, 1, 0))
        machine.always(
            "stale_output_drains",
            (state.stale == 0) | (state.stale == runs),
            "v0.27.0: stale output is marked only while a step of it is in flight (it drains within the pipeline)",
        )


def _count_in_flight(state: State, weight: Callable[[Term], TermLike]) -> Term:
    """``weight(entry)`` summed over the steps in the batch queue."""
    total: Term | int = 0
    for occupied, entry in in_flight(state):
        total = total + if_then_else(occupied, weight(entry), 0)
    assert isinstance(total, Term)
    return total


def _outputs_in_flight(state: State) -> Term:
    """1 + drafts summed over the steps in the batch queue that produce an output (RUN, not a non-final chunk)."""
    return _count_in_flight(
        state,
        lambda entry: if_then_else(
            (entry.field("kind") == Kind.RUN) & ~entry.field("chunk"), 1 + entry.field("drafts"), 0
        ),
    )


def add_invariants(machine: Machine, state: State) -> None:
    """I1-I4, the scan cost bound and K1-K3."""
    _list_invariants(machine, state)
    _output_invariants(machine, state)


def add_witnesses(machine: Machine, state: State) -> None:
    """Each operation the instance enables is reachable (``sometimes``)."""
    sizes, repaired, length = state.sizes, state.repaired, state.length
    machine.sometimes("repaired", repaired & (state.repair_start > 0), "a repair after real tokens happens")
    sampled = (state.phase == Phase.SAMPLED) & scheduled_here(state)
    waiting_repair = conjunction(sampled, current(state).field("history"), state.prev_row)
    if sizes.drafts:
        machine.sometimes(
            "fewer_drafts_accepted",
            repaired & (state.repair_written < state.repair_run),
            "spec decode: fewer ids than optimistic placeholders; the excess is truncated",
        )
    if sizes.kv_load_failures:
        machine.sometimes(
            "trim_left_no_placeholder",
            conjunction(waiting_repair, state.sampled_cpu, ~repaired, length > 0, last_token(state) != PLACEHOLDER),
            "after a KV-load failure's trim the list ends with a real token: the repair skips it",
        )
    if sizes.kv_load_failures and sizes.drafts:
        machine.sometimes(
            "more_ids_than_placeholders",
            repaired & (state.repair_written < state.prev_count),
            "after a trim the previous row has more ids than the list has placeholders",
        )
    if sizes.preemptions:
        machine.sometimes(
            "rejoins_with_history",
            conjunction(state.phase == Phase.UPDATED, scheduled_here(state), ~state.prev_row, length > 0),
            "a request that missed a step rejoins the batch with its rebuilt list",
        )
    if sizes.preemptions and state.stale is not None:
        machine.sometimes(
            "stale_output_in_flight",
            state.stale > 0,
            "v0.27.0: the request is preempted with a step in flight; placeholders are 0 and its output is stale",
        )
    if sizes.chunked_prefill:
        machine.sometimes(
            "discarded_chunk", sampled & current(state).field("chunk"), "a non-final prefill chunk's row is discarded"
        )
    if sizes.history_toggles:
        machine.sometimes(
            "repair_without_sampled_ids",
            conjunction(waiting_repair, ends_with_placeholder(state), ~state.sampled_cpu),
            "the previous step registered no sampled ids: the repair is skipped, placeholders stay",
        )
