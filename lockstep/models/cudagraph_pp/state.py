"""The state of the cudagraph-pp model: sizes, the capture and dispatch plan, sorts, constant tables
and every state variable, in one place.

``declare`` turns the protocol's parameters into ``Sizes`` and a ``Plan`` (the descriptors vLLM
captures, in capture order, and its dispatch table: ``descriptors.py`` on plain integers), builds
the sorts (among them the finite sort of buffer identities, ``Address``) and declares the state
variables of the engine's batches, of each rank's capture (its graphs and the manager's output
buffers), of its persistent buffer, and of the last receive, forward and send of each rank. It
returns them as a ``State`` that ``capture.py``, ``engine.py``, ``rank.py`` and ``properties.py``
share. The initial state is after ``load_model`` (the persistent buffer exists, holding garbage).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lockstep.models.cudagraph_pp.descriptors import MODE_NAMES, Descriptor, capture_plan, capture_sizes, dispatch_plan
from lockstep.models.cudagraph_pp.variants import Variant
from lockstep.spec.machine import Machine
from lockstep.spec.sorts import BOOL, EnumSort, IndexSort, IntSort, MapSort, Sort, enum, integers
from lockstep.spec.terms import Term, constant, lift

Key = enum("Key", ["hidden_states", "residual"])
Phase = enum("Phase", ["CAPTURING", "IDLE", "RECEIVED", "INPUTS_READY", "OUTPUT_READY"])
GraphMode = enum("GraphMode", ["NONE", "PIECEWISE", "FULL"])


@dataclass(frozen=True)
class Sizes:
    """Every bound of the model, from the protocol's parameters."""

    ranks: int  # pipeline stages; rank ranks-1 is the last
    steps: int
    max_num_tokens: int  # max_num_batched_tokens: the persistent buffer's rows
    largest: int  # the largest capture size, capped at max_num_batched_tokens
    max_num_reqs: int
    decode_query_len: int  # 1 + num_speculative_tokens
    mode_name: str  # CompilationConfig.cudagraph_mode

    @property
    def last(self) -> int:
        return self.ranks - 1


def sizes_of(parameters: Mapping[str, int]) -> Sizes:
    max_num_tokens = parameters["max_num_tokens"]
    return Sizes(
        ranks=parameters["ranks"],
        steps=parameters["steps"],
        max_num_tokens=max_num_tokens,
        largest=min(parameters["largest_capture_size"], max_num_tokens),
        max_num_reqs=parameters["max_num_reqs"],
        decode_query_len=parameters["decode_query_len"],
        mode_name=MODE_NAMES[parameters["cudagraph_mode"]],
    )


@dataclass(frozen=True)
class Plan:
    """What vLLM decides in Python before any graph runs (CudaGraphManager._init_candidates, dispatch)."""

    order: tuple[Descriptor, ...]  # capture order (v0.18.0 with PP captures nothing)
    descriptors: tuple[Descriptor, ...]  # each descriptor once, in capture order
    table: Mapping[tuple[int, int, bool], Descriptor]  # dispatch: (tokens, requests, uniform decode) -> graph


def plan_of(sizes: Sizes, variant: Variant) -> Plan:
    sizes_captured = capture_sizes(sizes.largest, sizes.decode_query_len)
    by_size, order = capture_plan(sizes.mode_name, sizes_captured, sizes.max_num_reqs, sizes.decode_query_len)
    if variant.eager_only:
        return Plan((), (), {})
    table = dispatch_plan(by_size, sizes.max_num_tokens, sizes.max_num_reqs, sizes.decode_query_len)
    return Plan(tuple(order), tuple(dict.fromkeys(order)), table)


@dataclass(frozen=True)
class State:
    """Sizes, plan, sorts, constant tables and state variables (Terms) of one built machine."""

    sizes: Sizes
    plan: Plan
    Rank: IndexSort
    StepIndex: IndexSort
    Data: IntSort  # step numbers; -1 is the garbage a capture or dummy run leaves
    BatchTokens: IntSort  # tokens of a scheduled batch
    BatchRequests: IntSort  # requests of a scheduled batch
    Desc: EnumSort  # NONE (eager) and every descriptor captured
    Address: EnumSort  # buffer identities: NO_BUFFER, INPUT_BUFFERS, ..., FRESH_k (step k's received tensor)
    previous: Term  # per rank: the stage before it
    fresh: Term  # per step: its fresh receive tensor
    capture_order: Term  # the descriptor captured at each position
    mode_of: Term  # per descriptor: its graph mode
    tokens_of: Term  # per descriptor: num_tokens
    capture_requests_of: Term  # per descriptor: desc.num_reqs or min(num_tokens, max_num_reqs)
    # the engine (EngineCore.step): the batches it scheduled
    scheduled: Term
    batch_tokens: Term
    batch_requests: Term
    batch_decode: Term  # every request has decode_query_len tokens (uniform decode)
    # each stage (rank): where it is, its capture, its persistent buffer
    phase: Term
    step: Term
    captured: Term
    graph_input: Term  # per descriptor: the intermediate-input address the graph recorded at capture
    graph_requests: Term  # per descriptor: requests of its dummy capture batch (0: not captured)
    output_rows: Term  # rows of the manager's output buffers (0: not allocated)
    persistent: Term  # per key: the data in the persistent intermediate-tensor buffer
    descriptor: Term  # this step's dispatched descriptor
    # what each rank's last receive, forward and send saw
    received_keys: Term
    received_data: Term
    received_rows: Term
    forward_step: Term
    forward_descriptor: Term
    forward_given: Term  # the intermediate inputs handed to the model
    forward_data: Term  # per key: the data the forward read
    output_data: Term  # the step whose output the last forward wrote
    send_pending: Term  # an isend not yet received
    send_step: Term
    send_source: Term  # the tensor the pending isend reads
    send_data: Term  # what that tensor holds now
    send_rows: Term

    def term_of(self, descriptor: Descriptor | None) -> Term:
        """The member of ``Desc`` for a descriptor of the plan (None: NONE, eager)."""
        return self.Desc.NONE if descriptor is None else constant(descriptor.label, self.Desc)


def address_sort(steps: int) -> EnumSort:
    """Buffer identities: none, the first stage's input buffers, the capture-time buffer, the persistent
    buffer, the manager's FULL output, a piecewise graph's own output, an eager output, and the fresh
    tensor the receive of step k allocates (FRESH_k)."""
    return EnumSort(
        "Address",
        (
            "NO_BUFFER",
            "INPUT_BUFFERS",
            "CAPTURE_BUFFER",
            "PERSISTENT",
            "MANAGER_OUTPUT",
            "GRAPH_OUTPUT",
            "EAGER_OUTPUT",
            *(f"FRESH_{k}" for k in range(steps)),
        ),
    )


def _table(values: Sequence[object], key: Sort, value: Sort) -> Term:
    return lift(tuple(values), MapSort(key, value))


@dataclass(frozen=True)
class _Sorts:
    """The sorts ``declare`` builds from the sizes and the plan."""

    Rank: IndexSort
    StepIndex: IndexSort
    Steps: IntSort  # 0..steps
    Data: IntSort
    Tokens: IntSort  # 0..max_num_tokens
    Requests: IntSort  # 0..max_num_reqs
    Desc: EnumSort
    Address: EnumSort
    CaptureIndex: IndexSort  # a position in the capture order


def _sorts_of(sizes: Sizes, plan: Plan) -> _Sorts:
    """The sorts of the model's values for these sizes and this plan."""
    steps = sizes.steps
    return _Sorts(
        Rank=IndexSort("Rank", sizes.ranks),
        StepIndex=IndexSort("Step", steps),
        Steps=integers(0, steps),
        Data=integers(-1, steps - 1),
        Tokens=integers(0, sizes.max_num_tokens),
        Requests=integers(0, sizes.max_num_reqs),
        Desc=EnumSort("Descriptor", ("NONE", *(d.label for d in plan.descriptors))),
        Address=address_sort(steps),
        CaptureIndex=IndexSort("CaptureIndex", max(len(plan.order), 1)),
    )


def _tables(sizes: Sizes, plan: Plan, sorts: _Sorts) -> dict[str, Term]:
    """The constant tables (State fields by name): per rank, per step, per capture position and
    per descriptor."""
    descriptors, Rank, Desc, Address = plan.descriptors, sorts.Rank, sorts.Desc, sorts.Address
    nominal_requests = [0] + [d.num_reqs or min(d.num_tokens, sizes.max_num_reqs) for d in descriptors]
    return dict(
        previous=_table([max(r - 1, 0) for r in range(sizes.ranks)], Rank, Rank),
        fresh=_table([Address.index(f"FRESH_{k}") for k in range(sizes.steps)], sorts.StepIndex, Address),
        capture_order=_table([Desc.index(d.label) for d in plan.order] or [0], sorts.CaptureIndex, Desc),
        mode_of=_table([0] + [GraphMode.index(d.mode) for d in descriptors], Desc, GraphMode),
        tokens_of=_table([0] + [d.num_tokens for d in descriptors], Desc, integers(0, sizes.largest)),
        capture_requests_of=_table(nominal_requests, Desc, sorts.Requests),
    )


def _rank_map(machine: Machine, sorts: _Sorts, name: str, sort: Sort, initial: object, description: str = "") -> Term:
    """A per-rank variable: Rank -> sort, every rank starting at ``initial``."""
    initials = tuple(initial for _ in range(sorts.Rank.count))
    return machine.variable(name, MapSort(sorts.Rank, sort), initials, description)


def _engine_variables(machine: Machine, sizes: Sizes, sorts: _Sorts) -> dict[str, Term]:
    """The engine's variables: the steps it scheduled and each step's batch."""

    def step_map(name: str, sort: Sort, initial: object, description: str = "") -> Term:
        initials = tuple(initial for _ in range(sizes.steps))
        return machine.variable(name, MapSort(sorts.StepIndex, sort), initials, description)

    return dict(
        scheduled=machine.variable("engine.scheduled", sorts.Steps, 0, "steps the engine has scheduled"),
        batch_tokens=step_map("batch.tokens", sorts.Tokens, 0),
        batch_requests=step_map("batch.requests", sorts.Requests, 0),
        batch_decode=step_map(
            "batch.decode", BOOL, False, "every request has decode_query_len tokens (uniform decode)"
        ),
    )


def _capture_variables(machine: Machine, sizes: Sizes, plan: Plan, sorts: _Sorts) -> dict[str, Term]:
    """Each rank's phase and step, its capture, its persistent buffer and its dispatched descriptor."""
    Desc, Requests = sorts.Desc, sorts.Requests
    per_descriptor = tuple(0 for _ in Desc.members)
    return dict(
        # CAPTURING (0), or IDLE (1)
        phase=_rank_map(machine, sorts, "phase", Phase, 0 if plan.order else 1, "where each rank is"),
        step=_rank_map(machine, sorts, "step", sorts.Steps, 0, "the step each rank works on"),
        captured=_rank_map(machine, sorts, "captured", integers(0, len(plan.order)), 0, "descriptors captured"),
        graph_input=_rank_map(
            machine,
            sorts,
            "graph.input",
            MapSort(Desc, sorts.Address),
            per_descriptor,
            "intermediate-input address each graph recorded at capture",
        ),
        graph_requests=_rank_map(
            machine,
            sorts,
            "graph.requests",
            MapSort(Desc, Requests),
            per_descriptor,
            "requests of each graph's dummy capture batch (0: not captured)",
        ),
        output_rows=_rank_map(
            machine,
            sorts,
            "manager.output_rows",
            integers(0, sizes.largest),
            0,
            "rows of the manager's output buffers (0: not allocated)",
        ),
        persistent=_rank_map(
            machine,
            sorts,
            "persistent",
            MapSort(Key, sorts.Data),
            (-1, -1),
            "the data in the persistent intermediate-tensor buffer, per key",
        ),
        descriptor=_rank_map(machine, sorts, "descriptor", Desc, 0, "this step's dispatched descriptor"),
    )


def _transfer_variables(machine: Machine, sizes: Sizes, sorts: _Sorts) -> dict[str, Term]:
    """What each rank's last receive, forward and send saw."""
    Data, Desc, Address, Tokens = sorts.Data, sorts.Desc, sorts.Address, sorts.Tokens

    def rank_map(name: str, sort: Sort, initial: object, description: str = "") -> Term:
        return _rank_map(machine, sorts, name, sort, initial, description)

    return dict(
        received_keys=rank_map("received.keys", MapSort(Key, BOOL), (False, False)),
        received_data=rank_map("received.data", Data, -1),
        received_rows=rank_map("received.rows", Tokens, 0),
        forward_step=rank_map("forward.step", integers(-1, sizes.steps - 1), -1, "step of the last forward"),
        forward_descriptor=rank_map("forward.descriptor", Desc, 0, "descriptor of the last forward"),
        forward_given=rank_map("forward.given", Address, 0, "intermediate inputs handed to the model"),
        forward_data=rank_map("forward.data", MapSort(Key, Data), (-1, -1), "data the forward read"),
        output_data=rank_map("output.data", Data, -1, "the step whose output the last forward wrote"),
        send_pending=rank_map("send.pending", BOOL, False, "an isend not yet received"),
        send_step=rank_map("send.step", sorts.StepIndex, 0),
        send_source=rank_map("send.source", Address, 0, "the tensor the pending isend reads"),
        send_data=rank_map("send.data", Data, -1, "what that tensor holds now"),
        send_rows=rank_map("send.rows", Tokens, 0),
    )


def declare(machine: Machine, parameters: Mapping[str, int], variant: Variant) -> State:
    """Declare the sorts and the state variables of ``machine`` (in the order the model always had)."""
    sizes = sizes_of(parameters)
    plan = plan_of(sizes, variant)
    sorts = _sorts_of(sizes, plan)
    return State(
        sizes=sizes,
        plan=plan,
        Rank=sorts.Rank,
        StepIndex=sorts.StepIndex,
        Data=sorts.Data,
        Desc=sorts.Desc,
        Address=sorts.Address,
        BatchTokens=integers(1, sizes.max_num_tokens),
        BatchRequests=integers(1, sizes.max_num_reqs),
        **_tables(sizes, plan, sorts),
        **_engine_variables(machine, sizes, sorts),
        **_capture_variables(machine, sizes, plan, sorts),
        **_transfer_variables(machine, sizes, sorts),
    )
