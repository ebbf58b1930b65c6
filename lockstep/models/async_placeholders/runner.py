"""The last pipeline rank's runner in async-placeholders: step N in three actions.

Mirrors ``vllm/v1/worker/gpu_model_runner.py`` and ``vllm/v1/worker/gpu_input_batch.py``:
``update_states`` is ``GPUModelRunner._update_states`` (A2: extend ``[-1] *
optimistic_num_accepted``; trim to ``num_output_tokens``; rebuild a resumed request;
``InputBatch.add_request``), ``sample`` is ``_sample`` → ``InputBatch.update_async_output_token_ids``
(the repair: replace the trailing -1 run by the ids copied back from the previous step) and
``bookkeeping`` is ``sample_tokens`` → ``_bookkeeping_sync`` (A1: one -1 per sampled row;
``prev_req_id_to_index``) → ``InputBatch.set_async_sampled_token_ids`` and the reply.

The variants differ only in ``sample``: v0.21.0 finds the run with ``ids.index(-1)`` (the forward
scan), v0.22.0 (PR #42938) walks back from the end (the backward scan); both are the folds of
``scans.py``, unrolled over the list's slots.

Faithfulness notes:
- The repair's "empty row" skip cannot fire: rows come from a tensor of width >= 1, and the
  first id of a non-discarded row is valid (the rejection sampler always emits one token). The
  model keeps the test in ``sample`` but never samples an empty row.
- A rebuild (``req_index is None``) takes the last ``num_output_tokens`` of the scheduler's
  ``all_token_ids`` (prompt + outputs); ``num_output_tokens`` counts placeholders too, so a
  rebuild with placeholders in flight copies prompt tokens (K2 shows it). With two steps in
  flight a request that missed step N has no step in flight when it is scheduled again; with
  three (``batch_queue=3``: PP) it may (the instance ``pipeline-queue``).
"""

from __future__ import annotations

from lockstep.models.async_placeholders.scans import BACKWARD, FORWARD, first_placeholder, scan_cost
from lockstep.models.async_placeholders.state import (
    PRE_FIX,
    Phase,
    State,
    current,
    ends_with_placeholder,
    list_of,
    scheduled_here,
    sent,
    slots,
)
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.terms import Term, conjunction, if_then_else, minimum, record_of


@action(actor="runner")
def update_states(state: State) -> Step:
    """_update_states: drop an unscheduled row; A2 extend; trim to num_output_tokens; rebuild a re-added request."""
    here, count, length, tokens = scheduled_here(state), sent(state), state.length, state.tokens
    outputs = current(state).field("outputs")
    stays = here & state.in_batch
    extended = length + if_then_else(stays, state.draft_length, 0)  # A2: optimistic -1 per previous draft
    trimmed = minimum(extended, count)
    # A re-added request (req_index is None) gets the last `sent` ids of prompt + outputs.
    rebuilt = list_of(
        state, count, lambda p: if_then_else(p < count - outputs, state.sizes.prompt, p - (count - outputs))
    )
    rebuild = here & ~state.in_batch & (count > 0)
    kept = list_of(state, trimmed, lambda p: tokens[p])
    return Step(
        (state.phase == Phase.IDLE) & ~state.to_runner.is_empty(),
        {
            state.phase: Phase.UPDATED,
            tokens: if_then_else(rebuild, rebuilt, if_then_else(here, kept, tokens)),
            length: if_then_else(rebuild, count, if_then_else(here, trimmed, length)),
            state.in_batch: here,
            state.alias: if_then_else(here, True, state.alias),  # add_request re-aliases the new list
            # update_req_spec_token_ids; a row that left the batch is reset on its return anyway.
            state.draft_length: if_then_else(here, current(state).field("drafts"), 0),
        },
    )


@action(actor="runner")
def sample(state: State, variant: str) -> Step:
    """_sample → update_async_output_token_ids: replace the trailing -1 run by the previous row's ids."""
    scan = FORWARD if variant == PRE_FIX else BACKWARD  # v0.21.0 calls ids.index(-1); v0.22.0 on walk back
    elements, length, tokens = slots(state), state.length, state.tokens
    applies = conjunction(
        state.sampled_cpu,
        current(state).field("history"),
        scheduled_here(state),
        state.prev_row,
        ends_with_placeholder(state),
        state.prev_count > 0,
    )
    start = first_placeholder(scan, elements, length)
    run = length - start
    written = minimum(state.prev_count, run)
    repaired_list = list_of(
        state, start + written, lambda p: if_then_else(p < start, tokens[p], state.prev_start + (p - start))
    )
    return Step(
        state.phase == Phase.UPDATED,
        {
            state.phase: Phase.SAMPLED,
            tokens: if_then_else(applies, repaired_list, tokens),
            length: if_then_else(applies, start + written, length),
            state.repaired: applies,
            state.repair_start: if_then_else(applies, start, 0),
            state.repair_written: if_then_else(applies, written, 0),
            state.repair_run: if_then_else(applies, length - first_placeholder(BACKWARD, elements, length), 0),
            state.repair_steps: if_then_else(applies, scan_cost(scan, elements, length), 0),
        },
    )


@action(actor="runner")
def bookkeeping(state: State, accepted: Term) -> Step:
    """_bookkeeping_sync: A1 appends one -1; prev_req_id_to_index; set_async_sampled_token_ids; reply."""
    step, generated = current(state), state.generated
    produced = scheduled_here(state) & ~step.field("chunk")
    result = record_of(
        state.Result, kind=step.field("kind"), chunk=step.field("chunk"), drafts=step.field("drafts"), accepted=accepted
    )
    return Step(
        (state.phase == Phase.SAMPLED) & (accepted <= step.field("drafts")),
        {
            state.phase: Phase.IDLE,
            state.to_runner: state.to_runner.tail(),
            state.to_scheduler: state.to_scheduler.append(result),
            # the -1 lands in an unused slot, already -1
            state.length: if_then_else(produced, state.length + 1, state.length),
            state.prev_row: produced,
            state.prev_start: if_then_else(produced, generated, state.prev_start),
            state.prev_count: if_then_else(produced, accepted + 1, state.prev_count),
            generated: if_then_else(produced, generated + accepted + 1, generated),
            state.sampled_cpu: step.field("history"),
            state.repaired: False,
            state.repair_start: 0,
            state.repair_written: 0,
            state.repair_run: 0,
            state.repair_steps: 0,
        },
    )
