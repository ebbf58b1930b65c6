"""The state of the pp-broadcast model: sizes, sorts, constant tables and every state variable, in one place.

``declare`` turns the protocol's parameters into ``Sizes``, builds the sorts and declares the
state variables of the engine and its scheduler, of each rank's CPU thread (the RPCs it has
handled and its runner's local state), of each rank's GPU stream, and the PP communicator ``pp``
(NCCL ``device_group``). It returns them as a ``State`` that ``engine.py``, ``worker.py``,
``handler.py``, ``stream.py`` and ``properties.py`` share.

The features beyond the seed model add their variables only where an instance turns them on, so a
machine without them keeps exactly its variables: ``drafts`` > 0 on the V1 runner (the step whose
``sample_tokens`` failed ``_pp_broadcast_prev_sampled_token_ids``' shape assert), ``runner=2`` (per rank
the step whose sampled token of each request its ``req_states`` hold) and the V2 ``PPHandler`` (the
side stream of each rank and the ``pp_broadcast`` communicator ``ppb``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from lockstep.models.pp_broadcast.variants import Release
from lockstep.spec.collectives import Communicator, OpSpec, broadcast
from lockstep.spec.machine import Machine
from lockstep.spec.sorts import BOOL, IndexSort, IntSort, MapSort, Sort, enum, integers
from lockstep.spec.terms import Term, lift

Phase = enum("Phase", ["RECV", "FORWARD", "SEND", "SAMPLE", "BROADCAST"])
"""The op at the front of a rank's GPU stream: per step [RECV] FORWARD [SEND] [SAMPLE] [BROADCAST]."""

Path = enum("Path", ["NONE", "SAMPLE", "RECEIVE", "RETURN"])
"""The path the last ``sample_tokens`` of a rank took: none yet; ``execute_model_state`` set (sample and
broadcast); no state and the release's guard true (``_pp_receive_prev_sampled_token_ids_to_input_batch``);
no state and the guard false (return None)."""


@dataclass(frozen=True)
class Sizes:
    """Every bound of the model, from the protocol's parameters."""

    ranks: int  # PP stages; rank ranks-1 is the last stage
    requests: int
    gaps: int  # steps from which the token budget may leave an unfinished request out
    failures: int  # 1: the last rank's execute_model may raise once (execute_model_state stays None)
    empty_steps: int  # steps the scheduler may leave empty (total_num_scheduled_tokens == 0)
    prompts: tuple[int, ...]  # chunks of each request's prompt: request 0 ``chunks``, request 1 one
    lengths: tuple[int, ...]  # pieces (chunks and decodes) of each request
    steps: int  # each gap delays one request one step; each empty step schedules no request
    async_scheduling: bool = True  # 0: the Scheduler sends the sampled tokens; no broadcast on the V1 runner
    drafts: int = 0  # speculative decoding: draft tokens scheduled with every decode
    runner: int = 1  # 1: the V1 GPUModelRunner; 2: the V2 runner (vllm/v1/worker/gpu/)
    structured: bool = False  # the last request uses structured output (a grammar)
    release: Release = Release()  # noqa: RUF009 (a frozen dataclass: one shared value is safe)

    @property
    def last(self) -> int:
        return self.ranks - 1

    @property
    def shape_asserts(self) -> bool:
        """Speculative decoding on the V1 runner's broadcast path: the last rank's shape assert can fire."""
        return self.runner == 1 and bool(self.drafts) and self.async_scheduling

    @property
    def cadence_empties(self) -> int:
        """The empty steps the V2 decode cadence forces: up to pp_size - 1 before each decode, when no request
        is eligible (``Scheduler.schedule`` returns no tokens while ``has_requests()``)."""
        return (self.ranks - 1) * (sum(self.lengths) - sum(self.prompts)) if self.handler else 0

    @property
    def empties(self) -> bool:
        """The instance has steps with no scheduled tokens (chosen with ``empty_steps``, or forced by the cadence)."""
        return bool(self.empty_steps or self.cadence_empties)

    @property
    def handler(self) -> bool:
        """The V2 runner's PPHandler (v0.23.0 on): side stream, ``ppb``, ring, decode cadence."""
        return self.runner == 2 and self.release.handler

    @property
    def queue_size(self) -> int:
        """``max_concurrent_batches``: pp_size, or pp_size + 1 for the V2 runner with async scheduling (v0.23.0)."""
        return self.ranks + 1 if self.handler and self.async_scheduling else self.ranks


NO_SWITCHES = Release()  # vLLM v0.19.0's code


def sizes_of(parameters: Mapping[str, int], release: Release = NO_SWITCHES) -> Sizes:
    count, gaps = parameters["requests"], parameters["gaps"]
    prompts = (parameters["chunks"],) + (1,) * (count - 1)
    lengths = tuple(prompt + parameters["decodes"] for prompt in prompts)
    sizes = Sizes(
        ranks=parameters["ranks"],
        requests=count,
        gaps=gaps,
        failures=parameters["failures"],
        empty_steps=parameters["empty_steps"],
        prompts=prompts,
        lengths=lengths,
        steps=max(lengths) + gaps + parameters["empty_steps"],
        # from v0.31.0 VllmConfig turns async scheduling off for the V1 runner with PP (a request for it is refused)
        async_scheduling=bool(parameters.get("async_scheduling", 1))
        and not (parameters.get("runner", 1) == 1 and release.refuses_v1_async),
        drafts=parameters.get("drafts", 0),
        runner=parameters.get("runner", 1),
        structured=bool(parameters.get("structured_output", 0)),
        release=release,
    )
    if not sizes.async_scheduling or sizes.handler:
        # A request may also sit out a step while its last token is in flight (sync scheduling) or before its
        # decode is eligible (the V2 cadence), so a step may schedule one piece: sum(lengths) non-empty steps,
        # plus the empty steps (chosen, and forced by the cadence).
        sizes = replace(sizes, steps=sum(lengths) + parameters["empty_steps"] + sizes.cadence_empties)
    return sizes


@dataclass(frozen=True)
class State:
    """Sorts, constant tables and state variables (Terms) of one built machine."""

    sizes: Sizes
    Rank: IndexSort
    Request: IndexSort
    StepIndex: IndexSort  # 0-based: step N of the story is index N-1
    Pieces: IntSort  # a request's chunks and decodes so far
    Steps: IntSort  # 0..steps: a step count, or a 1-based step with 0 for none
    Planned: IntSort  # 0: not in the step; k+1: in it with num_computed_tokens k
    LeaveOut: IntSort  # the request the token budget leaves out of a step; -1: nobody
    prompt_of: Term  # per request: chunks of its prompt
    length_of: Term  # per request: chunks and decodes
    previous_rank: Term  # per rank: the stage before it (rank 0: itself)
    # the engine and its scheduler (EngineCore.step_with_batch_queue, Scheduler / AsyncScheduler)
    scheduled: Term
    processed: Term
    computed: Term  # num_computed_tokens per request
    plan: Term  # per step and request: 0 absent, k+1 scheduled with num_computed_tokens k
    gaps_left: Term
    failed: Term  # the step (1-based) whose execute_model raised on the last rank; 0: none
    dead: Term  # the engine raised the failed step's exception: the engine is gone
    empties_left: Term  # empty steps the scheduler may still produce (a constant 0 without ``empty_steps``)
    # the CPU thread of each rank (Worker / GPUModelRunner)
    rpc: Term  # RPCs handled: exec(N) is 2N-2, sample(N) 2N-1
    issued: Term  # per step: sample_tokens(N) called torch.distributed.broadcast
    output_length: Term  # per request: len(output_token_ids)
    mapped: Term  # per request: prev_req_id_to_index holds it
    map_step: Term  # the step (1-based) whose rows built a non-empty mapping; 0 when empty
    buffer_step: Term  # the step whose sampled ids prev_sampled_token_ids holds; 0: uninitialised
    path: Term  # the path the rank's last sample_tokens took (``Path``)
    sample_failed: Term  # V1 with drafts: the step whose sample_tokens failed the shape assert; 0: none
    applied: Term  # V2: per rank and request, the step whose sampled token req_states hold; 0: none
    samples_sent: Term  # structured output: the steps whose sample_tokens RPC the engine has sent
    defer_until: Term  # structured output: the processed count at which the deferred sample_tokens is sent
    stale_bitmask: Term  # structured output: a grammar bitmask was computed before the grammar saw a token
    # the GPU stream of each rank
    gpu_step: Term  # the step (0-based) of the stream's front
    gpu_phase: Term  # the op of the stream's front
    posted: Term  # the front op is posted on pp
    pp: Communicator  # pp.device_group: send/recv of the intermediate tensors, the broadcast from the last rank
    side_step: Term  # V2 PPHandler: the step of the side stream's front
    side_posted: Term  # V2 PPHandler: the side stream's front op is posted on ppb
    ppb: Communicator | None  # V2 PPHandler: the pp_broadcast group (a sibling of pp.device_group)


def _table(values: Sequence[int], key: IndexSort, value: Sort) -> Term:
    return lift(tuple(values), MapSort(key, value))


@dataclass(frozen=True)
class _Sorts:
    """The sorts ``declare`` builds from the sizes."""

    Rank: IndexSort
    Request: IndexSort
    StepIndex: IndexSort
    Pieces: IntSort
    Steps: IntSort  # 0..steps
    Planned: IntSort


def _sorts_of(sizes: Sizes) -> _Sorts:
    """The sorts of the model's values for these sizes."""
    return _Sorts(
        Rank=IndexSort("Rank", sizes.ranks),
        Request=IndexSort("Request", sizes.requests),
        StepIndex=IndexSort("Step", sizes.steps),
        Pieces=integers(0, max(sizes.lengths)),
        Steps=integers(0, sizes.steps),
        Planned=integers(0, max(sizes.lengths)),
    )


def _rank_map(machine: Machine, sorts: _Sorts, name: str, sort: Sort, initial: object, description: str) -> Term:
    """A per-rank variable: Rank -> sort, every rank starting at ``initial``."""
    return machine.variable(
        name, MapSort(sorts.Rank, sort), tuple(initial for _ in range(sorts.Rank.count)), description
    )


def _engine_variables(machine: Machine, sizes: Sizes, sorts: _Sorts) -> dict[str, Term]:
    """The engine's and its scheduler's variables (State fields by name)."""
    count, steps = sizes.requests, sizes.steps
    return dict(
        scheduled=machine.variable("engine.scheduled", sorts.Steps, 0, "steps scheduled (exec and sample RPCs sent)"),
        processed=machine.variable("engine.processed", sorts.Steps, 0, "steps whose output the engine processed"),
        computed=machine.variable("scheduler.num_computed_tokens", MapSort(sorts.Request, sorts.Pieces), (0,) * count),
        plan=machine.variable(
            "scheduler.steps",
            MapSort(sorts.StepIndex, MapSort(sorts.Request, sorts.Planned)),
            tuple((0,) * count for _ in range(steps)),
            "per step and request: 0 absent, k+1 scheduled with num_computed_tokens k",
        ),
        gaps_left=machine.variable("scheduler.gaps_left", integers(0, sizes.gaps), sizes.gaps),
        failed=machine.variable(
            "engine.failed_step", sorts.Steps, 0, "the step whose execute_model raised on the last rank; 0: none"
        ),
        dead=machine.variable("engine.dead", BOOL, False, "the engine raised the failed step's exception"),
        empties_left=_empties_left(machine, sizes),
    )


def _empties_left(machine: Machine, sizes: Sizes) -> Term:
    """The empty steps left to the scheduler: a variable only where ``empty_steps`` > 0, so that the machines
    without empty steps keep exactly their variables."""
    sort = integers(0, sizes.empty_steps)
    if not sizes.empty_steps:
        return lift(0, sort)
    return machine.variable(
        "scheduler.empty_steps_left", sort, sizes.empty_steps, "empty steps the scheduler may still produce"
    )


def _rank_variables(machine: Machine, sizes: Sizes, sorts: _Sorts) -> dict[str, Term]:
    """The variables of each rank's CPU thread (Worker / GPUModelRunner)."""
    count, steps, Request, Pieces = sizes.requests, sizes.steps, sorts.Request, sorts.Pieces

    def rank_map(name: str, sort: Sort, initial: object, description: str) -> Term:
        return _rank_map(machine, sorts, name, sort, initial, description)

    return dict(
        rpc=rank_map("rank.rpcs", integers(0, 2 * steps), 0, "RPCs handled: exec(N) is 2N-2, sample(N) 2N-1"),
        issued=rank_map(
            "rank.broadcast_issued",
            MapSort(sorts.StepIndex, BOOL),
            (False,) * steps,
            "sample_tokens(N) called torch.distributed.broadcast",
        ),
        output_length=rank_map(
            "rank.output_token_ids", MapSort(Request, Pieces), (0,) * count, "len(requests[q].output_token_ids)"
        ),
        mapped=rank_map(
            "rank.prev_req_id_to_index", MapSort(Request, BOOL), (False,) * count, "the requests the mapping holds"
        ),
        map_step=rank_map(
            "rank.prev_map_step",
            sorts.Steps,
            0,
            "the step (1-based) whose rows built a non-empty mapping; 0 when empty",
        ),
        buffer_step=rank_map(
            "rank.prev_tokens_step",
            sorts.Steps,
            0,
            "the step whose sampled ids prev_sampled_token_ids holds; 0: uninitialised",
        ),
        path=rank_map("rank.sample_path", Path, 0, "the path of the rank's last sample_tokens"),
    )


def _gpu_variables(machine: Machine, sizes: Sizes, sorts: _Sorts) -> dict[str, Term]:
    """The variables of each rank's GPU stream."""
    return dict(
        gpu_step=_rank_map(machine, sorts, "gpu.step", sorts.Steps, 0, "the step (0-based) of the stream's front"),
        gpu_phase=machine.variable(
            "gpu.phase",
            MapSort(sorts.Rank, Phase),
            tuple(1 if r == 0 else 0 for r in range(sizes.ranks)),
            "the op of the stream's front (rank 0 has no RECV)",
        ),  # FORWARD (1), RECV (0)
        posted=_rank_map(machine, sorts, "gpu.posted", BOOL, False, "the front op is posted on pp"),
    )


def _feature_variables(machine: Machine, sizes: Sizes, sorts: _Sorts) -> dict[str, Term]:
    """The variables of the features an instance turns on (constants where it does not)."""
    count, size = sizes.requests, sizes.ranks
    no_step = tuple((0,) * count for _ in range(size))
    applied_sort = MapSort(sorts.Rank, MapSort(sorts.Request, sorts.Steps))
    if sizes.shape_asserts:
        sample_failed = machine.variable(
            "rank.sample_failed_step",
            sorts.Steps,
            0,
            "the step whose sample_tokens failed the last rank's shape assert (spec decode); 0: none",
        )
    else:
        sample_failed = lift(0, sorts.Steps)
    if sizes.runner == 2:
        applied = machine.variable(
            "rank.req_states_sampled_step",
            applied_sort,
            no_step,
            "per request: the step whose sampled token req_states.last_sampled_tokens holds; 0: none",
        )
    else:
        applied = lift(no_step, applied_sort)
    if sizes.handler:
        side_step = _rank_map(machine, sorts, "side.step", sorts.Steps, 0, "the step of the side stream's front")
        side_posted = _rank_map(machine, sorts, "side.posted", BOOL, False, "the side stream's front op is posted")
    else:
        side_step = lift(tuple(0 for _ in range(size)), MapSort(sorts.Rank, sorts.Steps))
        side_posted = lift(tuple(False for _ in range(size)), MapSort(sorts.Rank, BOOL))
    return dict(
        sample_failed=sample_failed,
        applied=applied,
        side_step=side_step,
        side_posted=side_posted,
        **_structured_variables(machine, sizes, sorts),
    )


def _structured_variables(machine: Machine, sizes: Sizes, sorts: _Sorts) -> dict[str, Term]:
    """The engine's deferred sample_tokens for structured output (constants without it)."""
    if not sizes.structured:
        return dict(samples_sent=lift(0, sorts.Steps), defer_until=lift(0, sorts.Steps), stale_bitmask=lift(False))
    return dict(
        samples_sent=machine.variable(
            "engine.samples_sent", sorts.Steps, 0, "steps whose sample_tokens RPC the engine has sent"
        ),
        defer_until=machine.variable(
            "engine.defer_until", sorts.Steps, 0, "the processed count at which the deferred sample_tokens is sent"
        ),
        stale_bitmask=machine.variable(
            "engine.stale_bitmask",
            BOOL,
            False,
            "a grammar bitmask was computed while the grammar had not yet accepted a token of its request",
        ),
    )


# The broadcasts of one step on a rank, named by what they carry: the sampled ids one or 1 + k wide
# (``wide``), then (``drafts``) the draft tokens. A rank posting another name than its peers is a
# count or sequence mismatch of NCCL broadcasts (a hang, NCCL does not check counts).
SAMPLED_OPS = ("broadcast", "broadcast_wide")
SIDE_OPS = ("sampled", "sampled_wide", "sampled_drafts", "sampled_wide_drafts")


def sampled_op(wide: bool, drafts: bool) -> str:
    """The name of a step's broadcasts on the side group ``ppb``."""
    return "sampled" + ("_wide" if wide else "") + ("_drafts" if drafts else "")


def _pp_group(machine: Machine, sizes: Sizes, sorts: _Sorts) -> Communicator:
    """pp.device_group: the intermediate tensors (send/recv) and the sampled-token broadcast."""
    operations: dict[str, OpSpec] = {"broadcast": broadcast(sizes.last)}
    if sizes.runner == 2 and sizes.drafts:  # the V2 runner's pp_broadcast of [num_reqs, 1 + k] (v0.19.0-v0.22.x)
        operations["broadcast_wide"] = broadcast(sizes.last)
    return Communicator(
        machine,
        "pp",
        sorts.Rank,
        operations,
        payload=integers(0, 0),
        point_to_point=True,
        interleaved_point_to_point=True,
        description="pp.device_group: intermediate tensors (send/recv) and the sampled-token broadcast",
    )


def _side_group(machine: Machine, sizes: Sizes, sorts: _Sorts) -> Communicator | None:
    """PPHandler.broadcast_group: ``make_sibling_device_group(group_desc="pp_broadcast")`` (v0.23.0 on)."""
    if not sizes.handler:
        return None
    return Communicator(
        machine,
        "ppb",
        sorts.Rank,
        {name: broadcast(sizes.last) for name in SIDE_OPS},
        payload=integers(0, 0),
        description="PPHandler.broadcast_group: the sampled ids, (num_sampled, num_rejected) and drafts",
    )


def declare(machine: Machine, parameters: Mapping[str, int], release: Release = NO_SWITCHES) -> State:
    """Declare the sorts and the state variables of ``machine`` (in the order the model always had; the
    features' variables after them)."""
    sizes = sizes_of(parameters, release)
    sorts = _sorts_of(sizes)
    count, size = sizes.requests, sizes.ranks
    return State(
        sizes=sizes,
        Rank=sorts.Rank,
        Request=sorts.Request,
        StepIndex=sorts.StepIndex,
        Pieces=sorts.Pieces,
        Steps=sorts.Steps,
        Planned=sorts.Planned,
        LeaveOut=integers(-1, count - 1),
        prompt_of=_table(sizes.prompts, sorts.Request, sorts.Pieces),
        length_of=_table(sizes.lengths, sorts.Request, sorts.Pieces),
        previous_rank=_table([max(r - 1, 0) for r in range(size)], sorts.Rank, sorts.Rank),
        **_engine_variables(machine, sizes, sorts),
        **_rank_variables(machine, sizes, sorts),
        **_gpu_variables(machine, sizes, sorts),
        pp=_pp_group(machine, sizes, sorts),
        **_feature_variables(machine, sizes, sorts),
        ppb=_side_group(machine, sizes, sorts),
    )
