"""The state of the computed-tokens model: sizes, sorts and every state variable, in one place.

``declare`` turns the protocol's parameters into ``Sizes`` (every bound the model uses), builds
the sorts and declares the state variables of the scheduler, of the engine's batch queue, of
each rank's V2 runner (its ``RequestState``) and of each rank's last attention metadata. It
returns them as a ``State`` that ``scheduler.py``, ``runner.py``, ``properties.py`` and
``invariants.py`` share, so each of those modules reads like the vLLM code it mirrors. The
variant names live here too, so that the actions can test ``variant == POST_FIX`` where the
releases differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lockstep.spec.machine import Machine
from lockstep.spec.protocol import POST_FIX as POST_FIX  # the variant names, defined once in spec
from lockstep.spec.protocol import PRE_FIX as PRE_FIX
from lockstep.spec.sorts import (
    BOOL,
    IndexSort,
    IntSort,
    MapSort,
    RecordSort,
    SequenceSort,
    Sort,
    Value,
    enum,
    integers,
    record,
)
from lockstep.spec.terms import Term

"""The variants: vLLM v0.21.0 (the mirror moves in ``postprocess``) and v0.22.0 (PR #42202: in
``update_requests``)."""

Status = enum("Status", ["WAITING", "RUNNING", "FINISHED"])
"""A request's ``RequestStatus`` as the scheduler sees it (no preemption)."""


@dataclass(frozen=True)
class Sizes:
    """Every bound of the model, from the protocol's parameters."""

    ranks: int
    requests: int
    prefill_len: int  # tokens of each prompt (prefill_len = prompt_len: no preemption)
    budget: int  # max_num_scheduled_tokens per step
    drafts: int  # num_speculative_tokens (MTP k)
    max_tokens: int  # SamplingParams.max_tokens of every request
    max_model_len: int
    asynchronous: bool  # scheduler_config.async_scheduling
    padded_rows: int  # FULL CUDA graph request padding (num_reqs_padded - num_reqs)
    batch_queue: int  # MultiprocExecutor.max_concurrent_batches
    capacity: int  # records the engine keeps until every rank and the scheduler are done with them
    length: int  # the largest token count any counter can reach
    slack: int  # the largest Σ drafts of unprocessed steps

    @property
    def last(self) -> int:
        return self.ranks - 1


def sizes_of(parameters: Mapping[str, int]) -> Sizes:
    ranks, drafts = parameters["ranks"], parameters["drafts"]
    asynchronous = parameters["async_scheduling"] == 1
    # MultiprocExecutor.max_concurrent_batches (v0.21.0/v0.22.0): 2 if PP = 1 and async, else pp_size.
    batch_queue = 2 if ranks == 1 and asynchronous else ranks
    prefill_len, max_tokens = parameters["prefill_len"], parameters["max_tokens"]
    steps = prefill_len + max_tokens + batch_queue + 1  # every step schedules at least one token
    return Sizes(
        ranks=ranks,
        requests=parameters["requests"],
        prefill_len=prefill_len,
        budget=parameters["budget"],
        drafts=drafts,
        max_tokens=max_tokens,
        max_model_len=parameters["max_model_len"],
        asynchronous=asynchronous,
        padded_rows=parameters["padded_rows"],
        batch_queue=batch_queue,
        capacity=batch_queue + ranks,
        length=prefill_len + steps * (drafts + 1) + parameters["budget"],
        slack=drafts * (batch_queue + ranks),
    )


@dataclass(frozen=True)
class State:
    """Sorts and state variables (Terms) of one built machine."""

    sizes: Sizes
    Request: IndexSort
    Rank: IndexSort
    Row: IndexSort  # rows of the attention metadata: one per request, then the padded rows
    Length: IntSort
    Drafts: IntSort  # drafts of one request in one step (and those it accepts)
    Position: IntSort  # a position in the engine's batch queue
    Row_: RecordSort  # one request's part of a step (a row of SchedulerOutput)
    StepRecord: MapSort
    Result: MapSort
    # scheduler (vllm/v1/core/sched/scheduler.py, async_scheduler.py), per request
    status: Term
    computed: Term  # request.num_computed_tokens
    placeholders: Term  # request.num_output_placeholders
    outputs: Term  # request.num_output_tokens
    spec: Term  # len(request.spec_token_ids)
    prefill_chunk: Term  # request.is_prefill_chunk
    # engine (EngineCore.step / step_with_batch_queue)
    batch: Term  # scheduler outputs not yet done with, oldest first
    results: Term  # sampled counts from the output (last) rank, aligned with ``batch``
    processed: Term  # records at the front of ``batch`` that update_from_output has handled
    # runners (vllm/v1/worker/gpu/model_runner.py, states.py), per rank and request
    sampled: Term  # records at the front of ``batch`` this rank has sampled
    executed: Term  # this rank ran execute_model for its next record and awaits sample_tokens
    added: Term
    prefill_len: Term  # RequestState.prefill_len
    mirror: Term  # RequestState.num_computed_tokens_np
    prefill_tokens: Term  # RequestState.num_computed_prefill_tokens
    gpu: Term  # RequestState.num_computed_tokens (GPU tensor)
    # the attention metadata each rank built last (CommonAttentionMetadata and its inputs)
    built: Term
    real: Term  # per Row
    upper: Term  # per Row: seq_lens_cpu_upper_bound
    seq_len: Term  # per Row: seq_lens on the GPU
    max_seq_len: Term
    prefilling: Term  # per request: is_prefilling
    allowed: Term  # per request: Σ drafts of its steps unprocessed when this step was scheduled
    alone: Term  # per request: no step of it was unprocessed when this step was scheduled
    sent: Term  # per request: the scheduler's num_computed_tokens in this step's output
    seen_mirror: Term  # per request: num_computed_tokens_np after update_requests
    seen_gpu: Term  # per request: the GPU num_computed_tokens the step's kernels read
    seen_prefill_tokens: Term
    seen_prefill_len: Term


@dataclass(frozen=True)
class _Declaration:
    """Declares the per-request, per-rank and per-row variables of one machine."""

    machine: Machine
    Request: IndexSort
    Rank: IndexSort
    Row: IndexSort

    def per_request(self, name: str, sort: Sort, initial: Value, description: str = "") -> Term:
        """A scheduler variable: Request -> sort."""
        return self.machine.variable(name, MapSort(self.Request, sort), self._requests(initial), description)

    def per_rank(self, name: str, sort: Sort, initial: Value, description: str = "") -> Term:
        """A runner variable: Rank -> Request -> sort."""
        value = MapSort(self.Request, sort)
        return self.machine.variable(name, MapSort(self.Rank, value), self._ranks(self._requests(initial)), description)

    def per_row(self, name: str, sort: Sort, description: str = "") -> Term:
        """A metadata variable: Rank -> Row -> sort, all False or 0."""
        initial = False if sort is BOOL else 0
        rows = tuple(initial for _ in range(self.Row.count))
        return self.machine.variable(name, MapSort(self.Rank, MapSort(self.Row, sort)), self._ranks(rows), description)

    def of_rank(self, name: str, sort: Sort, initial: Value, description: str = "") -> Term:
        """A per-rank variable: Rank -> sort."""
        return self.machine.variable(name, MapSort(self.Rank, sort), self._ranks(initial), description)

    def _requests(self, value: Value) -> tuple[Value, ...]:
        return tuple(value for _ in range(self.Request.count))

    def _ranks(self, value: Value) -> tuple[Value, ...]:
        return tuple(value for _ in range(self.Rank.count))


@dataclass(frozen=True)
class _Sorts:
    """The sorts ``declare`` builds from the sizes."""

    Request: IndexSort
    Rank: IndexSort
    Row: IndexSort
    Length: IntSort
    Prefill: IntSort
    Drafts: IntSort
    Row_: RecordSort
    StepRecord: MapSort
    Result: MapSort
    Position: IntSort
    Bound: IntSort  # a sequence length: computed tokens plus a step's budget


def _sorts_of(sizes: Sizes) -> _Sorts:
    """The sorts of the model's values for these sizes."""
    Request = IndexSort("Request", sizes.requests)
    Length, Drafts = integers(0, sizes.length), integers(0, sizes.drafts)
    Row_ = record(
        "Row",
        scheduled=integers(0, sizes.budget),
        computed=Length,
        drafts=Drafts,
        new=BOOL,
        allowed=integers(0, sizes.slack),
        alone=BOOL,
    )
    return _Sorts(
        Request=Request,
        Rank=IndexSort("Rank", sizes.ranks),
        Row=IndexSort("Row", sizes.requests + sizes.padded_rows),
        Length=Length,
        Prefill=integers(0, sizes.prefill_len),
        Drafts=Drafts,
        Row_=Row_,
        StepRecord=MapSort(Request, Row_),
        Result=MapSort(Request, integers(0, sizes.drafts + 1)),
        Position=integers(0, sizes.capacity),
        Bound=integers(0, sizes.length + sizes.budget),
    )


def _scheduler_variables(declared: _Declaration, sizes: Sizes, sorts: _Sorts) -> dict[str, Term]:
    """The scheduler's variables, per request (State fields by name)."""
    request_map = declared.per_request
    return dict(
        status=request_map("scheduler.status", Status, 0),
        computed=request_map("scheduler.num_computed_tokens", sorts.Length, 0),
        placeholders=request_map(
            "scheduler.num_output_placeholders", integers(0, sizes.slack + sizes.batch_queue + sizes.ranks), 0
        ),
        outputs=request_map("scheduler.num_output_tokens", integers(0, sizes.max_tokens), 0),
        spec=request_map("scheduler.spec_token_ids", sorts.Drafts, 0, "len(request.spec_token_ids)"),
        prefill_chunk=request_map("scheduler.is_prefill_chunk", BOOL, False),
    )


def _engine_variables(machine: Machine, sizes: Sizes, sorts: _Sorts) -> dict[str, Term]:
    """The engine's batch queue, the sampled results and how far it has processed them."""
    return dict(
        batch=machine.variable(
            "engine.batch",
            SequenceSort(sorts.StepRecord, sizes.capacity),
            (),
            "scheduler outputs, oldest first, until the scheduler and every rank are done with them",
        ),
        results=machine.variable(
            "engine.results",
            SequenceSort(sorts.Result, sizes.capacity),
            (),
            "num_sampled per request from the last rank, one per sampled record",
        ),
        processed=machine.variable("engine.processed", sorts.Position, 0, "records update_from_output has handled"),
    )


def _runner_variables(declared: _Declaration, sorts: _Sorts) -> dict[str, Term]:
    """The runners' variables, per rank (and request)."""
    rank_map, Length, Prefill = declared.per_rank, sorts.Length, sorts.Prefill
    return dict(
        sampled=declared.of_rank("runner.sampled", sorts.Position, 0, "records the rank has sampled"),
        executed=declared.of_rank("runner.executed", BOOL, False, "execute_model ran, sample_tokens not yet"),
        added=rank_map("runner.added", BOOL, False),
        prefill_len=rank_map("runner.prefill_len", Prefill, 0),
        mirror=rank_map("runner.num_computed_tokens_np", Length, 0, "the CPU mirror"),
        prefill_tokens=rank_map("runner.num_computed_prefill_tokens", Prefill, 0),
        gpu=rank_map("runner.num_computed_tokens", Length, 0, "the GPU tensor"),
    )


def _metadata_variables(declared: _Declaration, sizes: Sizes, sorts: _Sorts) -> dict[str, Term]:
    """The attention metadata each rank built last, per rank (and row or request)."""
    rank_map, row_map, Length, Prefill = declared.per_rank, declared.per_row, sorts.Length, sorts.Prefill
    return dict(
        built=declared.of_rank("metadata.built", BOOL, False, "the rank has built attention metadata"),
        real=row_map("metadata.real", BOOL, "a real row (not padding, request scheduled)"),
        upper=row_map("metadata.seq_lens_cpu_upper_bound", sorts.Bound),
        seq_len=row_map("metadata.seq_lens", sorts.Bound),
        max_seq_len=declared.of_rank("metadata.max_seq_len", sorts.Bound, 0),
        prefilling=rank_map("metadata.is_prefilling", BOOL, False),
        allowed=rank_map("metadata.allowed_slack", integers(0, sizes.slack), 0),
        alone=rank_map("metadata.no_step_in_flight", BOOL, False),
        sent=rank_map("metadata.scheduler_num_computed_tokens", Length, 0),
        seen_mirror=rank_map("metadata.num_computed_tokens_np", Length, 0),
        seen_gpu=rank_map("metadata.gpu_num_computed_tokens", Length, 0),
        seen_prefill_tokens=rank_map("metadata.num_computed_prefill_tokens", Prefill, 0),
        seen_prefill_len=rank_map("metadata.prefill_len", Prefill, 0),
    )


def declare(machine: Machine, parameters: Mapping[str, int]) -> State:
    """Declare the sorts and the state variables of ``machine``: the scheduler's, the engine's, the
    runners' and the attention metadata's, in that order."""
    sizes = sizes_of(parameters)
    sorts = _sorts_of(sizes)
    declared = _Declaration(machine, sorts.Request, sorts.Rank, sorts.Row)
    return State(
        sizes=sizes,
        Request=sorts.Request,
        Rank=sorts.Rank,
        Row=sorts.Row,
        Length=sorts.Length,
        Drafts=sorts.Drafts,
        Position=sorts.Position,
        Row_=sorts.Row_,
        StepRecord=sorts.StepRecord,
        Result=sorts.Result,
        **_scheduler_variables(declared, sizes, sorts),
        **_engine_variables(machine, sizes, sorts),
        **_runner_variables(declared, sorts),
        **_metadata_variables(declared, sizes, sorts),
    )
