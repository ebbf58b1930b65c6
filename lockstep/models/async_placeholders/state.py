"""The state of the async-placeholders model: sizes, sorts and every state variable, in one place.

``declare`` turns the protocol's parameters into ``Sizes``, builds the sorts and declares the
state variables of the scheduler, of the batch queue between the scheduler and the last rank's
runner, of that runner (its ``CachedRequestState`` and persistent-batch row) and of the last
repair. It returns them as a ``State`` that ``scheduler.py``, ``runner.py`` and
``properties.py`` share; the helpers below it (the list's slots and last token, the step the
runner is handling) are the views of that state more than one of them reads.
(``model.py`` explains the list's encoding: a bounded array with -1 in its unused slots.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lockstep.models.async_placeholders.scans import PLACEHOLDER
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import POST_FIX as POST_FIX  # the variant names, defined once in spec
from lockstep.spec.protocol import PRE_FIX as PRE_FIX
from lockstep.spec.sorts import BOOL, IndexSort, IntSort, MapSort, RecordSort, SequenceSort, enum, integers, record
from lockstep.spec.terms import Term, TermLike, if_then_else, map_of, maximum, minimum

"""The variants: vLLM v0.21.0 (forward scan) and v0.22.0 (PR #42938, backward scan)."""

Phase = enum("Phase", ["IDLE", "UPDATED", "SAMPLED"])
"""Where the runner is in handling the step at the head of the queue."""
Kind = enum("Kind", ["RUN", "SKIP", "PREEMPT"])
"""What a scheduled step does to the request: scheduled; running but not scheduled; preempted."""


@dataclass(frozen=True)
class Sizes:
    """Every bound and switch of the model, from the protocol's parameters."""

    capacity: int  # max_tokens: output tokens the request may produce (the list's bound)
    drafts: int  # num_spec_tokens
    history_toggles: bool  # other rows decide per step whether output ids are needed
    preemptions: bool  # the request may be skipped or preempted
    chunked_prefill: bool  # (re)prefill may take non-final chunks
    kv_load_failures: int  # sync KV-load failures that discard outputs
    batch_queue: int  # steps in flight: 2 (one stage), pp_size (the V1 runner with PP, to v0.30.x)

    @property
    def prompt(self) -> int:
        """The token that stands for a prompt token (outputs are 0 .. capacity - 1)."""
        return self.capacity


def sizes_of(parameters: Mapping[str, int]) -> Sizes:
    return Sizes(
        capacity=parameters["max_tokens"],
        drafts=parameters["num_spec_tokens"],
        history_toggles=parameters["history_toggles"] == 1,
        preemptions=parameters["preemptions"] == 1,
        chunked_prefill=parameters["chunked_prefill"] == 1,
        kv_load_failures=parameters["kv_load_failures"],
        batch_queue=parameters["batch_queue"],
    )


@dataclass(frozen=True)
class State:
    """Sorts and state variables (Terms) of one built machine."""

    sizes: Sizes
    Position: IndexSort
    Token: IntSort
    Count: IntSort
    Drafts: IntSort
    RowCount: IntSort
    Scheduled: RecordSort  # a step as the runner receives it (SchedulerOutput, for this request)
    Result: RecordSort  # a step's output as the scheduler receives it (ModelRunnerOutput)
    # the scheduler (vllm/v1/core/sched/scheduler.py, async_scheduler.py)
    outputs: Term  # request.num_output_tokens
    placeholders: Term  # request.num_output_placeholders
    prefilling: Term
    to_runner: Term  # the batch queue: steps scheduled, not yet executed
    to_scheduler: Term  # steps executed, output not yet processed
    kv_failures: Term
    stale: Term | None  # v0.27.0 on: stale steps in flight (num_stale_output_tokens; None before: no such counter)
    # the last rank's runner (vllm/v1/worker/gpu_model_runner.py, gpu_input_batch.py)
    tokens: Term  # CachedRequestState.output_token_ids
    length: Term
    in_batch: Term
    alias: Term  # the batch's req_output_token_ids row is the request's list object
    draft_length: Term  # prev_num_draft_len
    phase: Term
    prev_row: Term  # the request is in prev_req_id_to_index
    prev_start: Term
    prev_count: Term
    sampled_cpu: Term  # the previous step's sampled ids are registered (set_async_sampled_token_ids)
    generated: Term  # ghost
    # the last repair (update_async_output_token_ids)
    repaired: Term
    repair_start: Term
    repair_written: Term
    repair_run: Term
    repair_steps: Term


def declare(machine: Machine, parameters: Mapping[str, int], stale_output: bool = False) -> State:
    """The state variables; ``stale_output`` (v0.27.0 on) adds the scheduler's stale-output counter."""
    sizes = sizes_of(parameters)
    capacity, drafts = sizes.capacity, sizes.drafts
    Count, Drafts, RowCount = integers(0, capacity), integers(0, drafts), integers(0, drafts + 1)
    Scheduled = record("Scheduled", kind=Kind, chunk=BOOL, drafts=Drafts, sent=Count, outputs=Count, history=BOOL)
    Result = record("Result", kind=Kind, chunk=BOOL, drafts=Drafts, accepted=Drafts)
    Position, Token = IndexSort("Position", capacity), integers(PLACEHOLDER, sizes.prompt)
    variable = machine.variable
    return State(
        sizes=sizes,
        Position=Position,
        Token=Token,
        Count=Count,
        Drafts=Drafts,
        RowCount=RowCount,
        Scheduled=Scheduled,
        Result=Result,
        outputs=variable("scheduler.outputs", Count, 0, "request.num_output_tokens: outputs the scheduler knows"),
        placeholders=variable(
            "scheduler.placeholders",
            integers(-capacity, capacity),
            0,
            "request.num_output_placeholders: outputs scheduled, not yet processed",
        ),
        prefilling=variable("scheduler.prefilling", BOOL, True, "the next scheduled step is (re)computing the prompt"),
        to_runner=variable(
            "queue.scheduled", SequenceSort(Scheduled, sizes.batch_queue), (), "steps scheduled, not yet executed"
        ),
        to_scheduler=variable(
            "queue.executed", SequenceSort(Result, sizes.batch_queue), (), "steps executed, output not yet processed"
        ),
        kv_failures=variable("scheduler.kv_load_failures", integers(0, sizes.kv_load_failures), 0),
        stale=variable(
            "scheduler.stale_output",
            integers(0, sizes.batch_queue),
            0,
            "request.num_stale_output_tokens: steps scheduled before the preemption and still in flight",
        )
        if stale_output
        else None,
        tokens=variable(
            "runner.output_token_ids",
            MapSort(Position, Token),
            tuple(PLACEHOLDER for _ in range(capacity)),
            "CachedRequestState.output_token_ids (unused slots hold -1)",
        ),
        length=variable("runner.length", Count, 0, "len(output_token_ids)"),
        in_batch=variable("runner.in_batch", BOOL, False, "the request has a row of the persistent batch"),
        alias=variable("runner.batch_aliases_list", BOOL, True, "req_output_token_ids[row] is the request's list"),
        draft_length=variable("runner.prev_num_draft_len", Drafts, 0),
        phase=variable("runner.phase", Phase, Phase.IDLE),
        prev_row=variable("runner.has_prev_row", BOOL, False, "the request is in prev_req_id_to_index"),
        prev_start=variable("runner.prev_row_start", Count, 0, "first output position of the previous row"),
        prev_count=variable("runner.prev_row_count", RowCount, 0, "valid ids of the previous row"),
        sampled_cpu=variable("runner.sampled_token_ids_cpu", BOOL, False, "the previous step's ids are registered"),
        generated=variable("runner.generated", Count, 0, "ghost: output tokens sampled so far"),
        repaired=variable("repair.done", BOOL, False),
        repair_start=variable("repair.first_placeholder", Count, 0),
        repair_written=variable("repair.written", RowCount, 0),
        repair_run=variable("repair.run_length", Count, 0, "the trailing -1 run the repair replaced"),
        repair_steps=variable("repair.scan_steps", integers(0, capacity + 1), 0, "list elements the scan read"),
    )


# ------------------------------------------------------------------------------ views of the list
def slots(state: State) -> list[Term]:
    """Every slot of the bounded list, front first (what the scans fold over)."""
    return [state.tokens[position] for position in range(state.sizes.capacity)]


def last_token(state: State) -> Term:
    """The list's last token (slot 0 when the list is empty)."""
    return state.tokens[maximum(0, minimum(state.sizes.capacity - 1, state.length - 1))]


def ends_with_placeholder(state: State) -> Term:
    return (state.length > 0) & (last_token(state) == PLACEHOLDER)


def list_of(state: State, new_length: TermLike, value: Callable[[Term], TermLike]) -> Term:
    """A list of ``new_length`` tokens, ``value(position)`` each, unused slots -1."""
    return map_of(state.Position, lambda p: if_then_else(p < new_length, value(p), PLACEHOLDER), state.Token)


# ------------------------------------------------------------------- the step the runner handles
def current(state: State) -> Term:
    """The step at the head of the batch queue (the one the runner is handling)."""
    return state.to_runner.head()


def scheduled_here(state: State) -> Term:
    """The runner's current step schedules the request."""
    return current(state).field("kind") == Kind.RUN


def in_flight(state: State) -> list[tuple[Term, Term]]:
    """Every slot of the batch queue, oldest first, as (occupied, entry): the executed steps, then the scheduled."""
    slots_of: list[tuple[Term, Term]] = []
    for queue in (state.to_scheduler, state.to_runner):
        rest = queue
        for position in range(state.sizes.batch_queue):
            slots_of.append((queue.length() > position, rest.head()))
            rest = rest.tail()
    return slots_of


def sent(state: State) -> Term:
    """The ``num_output_tokens`` the scheduler sent with the current step."""
    return current(state).field("sent")
