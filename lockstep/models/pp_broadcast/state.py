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


@dataclass(frozen=True)
class Sizes:
    """Every bound of the model, from the protocol's parameters."""

    ranks: int  # PP stages; rank ranks-1 is the last stage
    requests: int
    gaps: int  # steps from which the token budget may leave an unfinished request out
    prompts: tuple[int, ...]  # chunks of each request's prompt: request 0 ``chunks``, request 1 one
    lengths: tuple[int, ...]  # pieces (chunks and decodes) of each request
    steps: int  # every step is non-empty; each gap delays one request one step

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
        prompts=prompts,
        lengths=lengths,
        steps=max(lengths) + gaps,
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
    # the CPU thread of each rank (Worker / GPUModelRunner)
    rpc: Term  # RPCs handled: exec(N) is 2N-2, sample(N) 2N-1
    issued: Term  # per step: sample_tokens(N) called torch.distributed.broadcast
    output_length: Term  # per request: len(output_token_ids)
    mapped: Term  # per request: prev_req_id_to_index holds it
    map_step: Term  # the step (1-based) whose rows built a non-empty mapping; 0 when empty
    buffer_step: Term  # the step whose sampled ids prev_sampled_token_ids holds; 0: uninitialised
    # the GPU stream of each rank
    gpu_step: Term  # the step (0-based) of the stream's front
    gpu_phase: Term  # the op of the stream's front
    posted: Term  # the front op is posted on pp
    pp: Communicator  # pp.device_group: send/recv of the intermediate tensors, the broadcast from the last rank


def _table(values: Sequence[int], key: IndexSort, value: Sort) -> Term:
    return lift(tuple(values), MapSort(key, value))


def declare(machine: Machine, parameters: Mapping[str, int]) -> State:
    """Declare the sorts and the state variables of ``machine`` (in the order the model always had)."""
    sizes = sizes_of(parameters)
    count, steps, size = sizes.requests, sizes.steps, sizes.ranks
    Rank, Request, StepIndex = IndexSort("Rank", size), IndexSort("Request", count), IndexSort("Step", steps)
    Pieces, Steps = integers(0, max(sizes.lengths)), integers(0, steps)
    Planned = integers(0, max(sizes.lengths))

    def per_rank(value: object) -> tuple[object, ...]:
        return tuple(value for _ in range(size))

    def rank_map(name: str, sort: Sort, initial: object, description: str) -> Term:
        return machine.variable(name, MapSort(Rank, sort), per_rank(initial), description)

    return State(
        sizes=sizes,
        Rank=Rank,
        Request=Request,
        StepIndex=StepIndex,
        Pieces=Pieces,
        Planned=Planned,
        LeaveOut=integers(-1, count - 1),
        prompt_of=_table(sizes.prompts, Request, Pieces),
        length_of=_table(sizes.lengths, Request, Pieces),
        previous_rank=_table([max(r - 1, 0) for r in range(size)], Rank, Rank),
        scheduled=machine.variable("engine.scheduled", Steps, 0, "steps scheduled (exec and sample RPCs sent)"),
        processed=machine.variable("engine.processed", Steps, 0, "steps whose output the engine processed"),
        computed=machine.variable("scheduler.num_computed_tokens", MapSort(Request, Pieces), (0,) * count),
        plan=machine.variable(
            "scheduler.steps",
            MapSort(StepIndex, MapSort(Request, Planned)),
            tuple((0,) * count for _ in range(steps)),
            "per step and request: 0 absent, k+1 scheduled with num_computed_tokens k",
        ),
        gaps_left=machine.variable("scheduler.gaps_left", integers(0, sizes.gaps), sizes.gaps),
        rpc=rank_map("rank.rpcs", integers(0, 2 * steps), 0, "RPCs handled: exec(N) is 2N-2, sample(N) 2N-1"),
        issued=rank_map(
            "rank.broadcast_issued",
            MapSort(StepIndex, BOOL),
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
            "rank.prev_map_step", Steps, 0, "the step (1-based) whose rows built a non-empty mapping; 0 when empty"
        ),
        buffer_step=rank_map(
            "rank.prev_tokens_step",
            Steps,
            0,
            "the step whose sampled ids prev_sampled_token_ids holds; 0: uninitialised",
        ),
        gpu_step=rank_map("gpu.step", Steps, 0, "the step (0-based) of the stream's front"),
        gpu_phase=machine.variable(
            "gpu.phase",
            MapSort(Rank, Phase),
            tuple(1 if r == 0 else 0 for r in range(size)),
            "the op of the stream's front (rank 0 has no RECV)",
        ),  # FORWARD (1), RECV (0)
        posted=rank_map("gpu.posted", BOOL, False, "the front op is posted on pp"),
        pp=Communicator(
            machine,
            "pp",
            Rank,
            {"broadcast": broadcast(sizes.last)},
            payload=integers(0, 0),
            point_to_point=True,
            interleaved_point_to_point=True,
            description="pp.device_group: intermediate tensors (send/recv) and the sampled-token broadcast",
        ),
    )
