"""The state of the pp-broadcast model: sizes, sorts, constant tables and every state variable, in one place.

``declare`` turns the protocol's parameters into ``Sizes``, builds the sorts and declares the
state variables of the engine and its scheduler, of each rank's CPU thread (the RPCs it has
handled and its runner's local state), of each rank's GPU stream, and the PP communicator ``pp``
(NCCL ``device_group``). It returns them as a ``State`` that ``engine.py``, ``worker.py``,
``stream.py`` and ``properties.py`` share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lockstep.spec.collectives import Communicator, broadcast
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

    @property
    def last(self) -> int:
        return self.ranks - 1


def sizes_of(parameters: Mapping[str, int]) -> Sizes:
    count, gaps = parameters["requests"], parameters["gaps"]
    prompts = (parameters["chunks"],) + (1,) * (count - 1)
    lengths = tuple(prompt + parameters["decodes"] for prompt in prompts)
    return Sizes(
        ranks=parameters["ranks"],
        requests=count,
        gaps=gaps,
        failures=parameters["failures"],
        empty_steps=parameters["empty_steps"],
        prompts=prompts,
        lengths=lengths,
        steps=max(lengths) + gaps + parameters["empty_steps"],
    )


@dataclass(frozen=True)
class State:
    """Sorts, constant tables and state variables (Terms) of one built machine."""

    sizes: Sizes
    Rank: IndexSort
    Request: IndexSort
    StepIndex: IndexSort  # 0-based: step N of the story is index N-1
    Pieces: IntSort  # a request's chunks and decodes so far
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
    # the GPU stream of each rank
    gpu_step: Term  # the step (0-based) of the stream's front
    gpu_phase: Term  # the op of the stream's front
    posted: Term  # the front op is posted on pp
    pp: Communicator  # pp.device_group: send/recv of the intermediate tensors, the broadcast from the last rank


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


def _pp_group(machine: Machine, sizes: Sizes, sorts: _Sorts) -> Communicator:
    """pp.device_group: the intermediate tensors (send/recv) and the sampled-token broadcast."""
    return Communicator(
        machine,
        "pp",
        sorts.Rank,
        {"broadcast": broadcast(sizes.last)},
        payload=integers(0, 0),
        point_to_point=True,
        interleaved_point_to_point=True,
        description="pp.device_group: intermediate tensors (send/recv) and the sampled-token broadcast",
    )


def declare(machine: Machine, parameters: Mapping[str, int]) -> State:
    """Declare the sorts and the state variables of ``machine`` (in the order the model always had)."""
    sizes = sizes_of(parameters)
    sorts = _sorts_of(sizes)
    count, size = sizes.requests, sizes.ranks
    return State(
        sizes=sizes,
        Rank=sorts.Rank,
        Request=sorts.Request,
        StepIndex=sorts.StepIndex,
        Pieces=sorts.Pieces,
        Planned=sorts.Planned,
        LeaveOut=integers(-1, count - 1),
        prompt_of=_table(sizes.prompts, sorts.Request, sorts.Pieces),
        length_of=_table(sizes.lengths, sorts.Request, sorts.Pieces),
        previous_rank=_table([max(r - 1, 0) for r in range(size)], sorts.Rank, sorts.Rank),
        **_engine_variables(machine, sizes, sorts),
        **_rank_variables(machine, sizes, sorts),
        **_gpu_variables(machine, sizes, sorts),
        pp=_pp_group(machine, sizes, sorts),
    )
