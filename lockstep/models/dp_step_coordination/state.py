"""The state of the dp-step-coordination model: sizes, sorts, the three communicators and every
state variable, in one place.

``declare`` turns the protocol's parameters into ``Sizes`` and declares, per DP rank, where its
engine core's busy loop is (``phase``), the collectives its current iteration still has to post
in order (``program``: the sequence its local decisions chose), whether that iteration ends in the
DP-wide unfinished-requests all-reduce (``syncs``), its scheduler's remaining work, its step
counter and ``engines_running``; the fault budgets; and the communicators the ranks post on:
``worker_dp`` (``coordinate_batch_across_dp``'s all-reduce on the workers' DP group),
``worker_ep`` (the MoE layers' expert-parallel all-to-alls) and ``engine_dp`` (the engine cores'
gloo ``dp_group`` that ``_has_global_unfinished_reqs`` all-reduces on). ``engine.py``,
``worker.py`` and ``properties.py`` share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lockstep.spec.collectives import Communicator, all_reduce_max, all_reduce_sum, barrier
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import POST_FIX as POST_FIX  # the variant names, defined once in spec
from lockstep.spec.protocol import PRE_FIX as PRE_FIX
from lockstep.spec.sorts import BOOL, IndexSort, MapSort, SequenceSort, enum, integers
from lockstep.spec.terms import Term

V0_29_0 = "v0.29.0"
"""vLLM v0.25.0-v0.29.0: the drafter's dummy_run for an overlong batch (as post-fix), the sync every 32nd
step (as pre-fix)."""


def skips_drafter(variant: str) -> bool:
    """``sample_tokens`` posts no drafter collective for a batch that does not fit the drafter (v0.24.0 and
    before); from v0.25.0 it runs ``drafter.dummy_run(num_tokens=1)`` under DP."""
    return variant == PRE_FIX


def syncs_at_step_one(variant: str) -> bool:
    """``_has_global_unfinished_reqs`` all-reduces at step 1 of a wave too (v0.30.0 on)."""
    return variant == POST_FIX


Phase = enum("Phase", ["LOOP", "STEPPING", "STOPPED"])
"""An engine core's place in ``DPEngineCoreProc.run_busy_loop``: at the loop head
(``_process_input_queue``, deciding the next iteration); inside an iteration, posting its
collectives in order and blocking in each; stopped (its process died or left the loop)."""

Op = enum("Op", ["COORDINATE", "MOE_TARGET", "MOE_DRAFT", "SYNC"])
"""One collective a rank posts: ``coordinate_batch_across_dp``'s all-reduce (``worker_dp``); the
MoE collectives of one target-model forward, or of one drafter forward (``worker_ep``); the
unfinished-requests all-reduce (``engine_dp``)."""


@dataclass(frozen=True)
class Sizes:
    """Every bound and switch of the model, from the protocol's parameters."""

    ranks: int
    requests: int  # requests the clients add, to any rank, while the wave runs
    steps: int  # forward steps a request needs
    sync_interval: int  # dp_sync_interval (v0.30.0 on; 32 before)
    drafts: int  # num_speculative_tokens (0: no drafter)
    moe_drafter: bool  # the drafter's layers are MoE (MTP): its forwards post EP collectives
    overlong: bool  # a real step's batch may not fit the drafter's max_model_len
    stops: int  # ranks that may stop

    @property
    def draft_length(self) -> int:
        """The collectives of one drafter propose (or dummy_run): an all-reduce and a forward, then
        for more than one draft an all-reduce and ``drafts - 1`` forwards (a dense drafter's
        forwards post none)."""
        if not self.drafts:
            return 0
        forwards = self.drafts if self.moe_drafter else 0
        return (2 if self.drafts > 1 else 1) + forwards

    @property
    def program_length(self) -> int:
        """The longest iteration: the target forward (2), the drafter, the sync."""
        return 2 + self.draft_length + 1


def sizes_of(parameters: Mapping[str, int]) -> Sizes:
    return Sizes(
        ranks=parameters["ranks"],
        requests=parameters["requests"],
        steps=parameters["steps"],
        sync_interval=parameters["dp_sync_interval"],
        drafts=parameters["drafts"],
        moe_drafter=bool(parameters["moe_drafter"]),
        overlong=bool(parameters["overlong"]),
        stops=parameters["stops"],
    )


@dataclass(frozen=True)
class State:
    """Sorts, communicators and state variables (Terms) of one built machine."""

    sizes: Sizes
    Rank: IndexSort
    Program: SequenceSort
    worker_dp: Communicator
    worker_ep: Communicator
    engine_dp: Communicator
    phase: Term
    program: Term
    syncs: Term
    work: Term
    step_counter: Term
    engines_running: Term
    requests_left: Term
    stops_left: Term
    dummy_ran: Term
    draft_skipped: Term


def _per_rank(count: int, value: object) -> tuple[object, ...]:
    return tuple(value for _ in range(count))


def declare(machine: Machine, parameters: Mapping[str, int]) -> State:
    """The state, initially: a wave has started (every rank's ``engines_running``), no request yet,
    every rank at its loop head with its step counter at 0."""
    sizes = sizes_of(parameters)
    count = sizes.ranks
    Rank = IndexSort("Rank", count)
    Program = SequenceSort(Op, sizes.program_length)
    variable = machine.variable
    worker_dp = Communicator(
        machine,
        "worker_dp",
        Rank,
        {"coordinate": all_reduce_sum()},
        payload=integers(0, 0),
        description="the workers' DP group: coordinate_batch_across_dp's [4, dp_size] all-reduce",
    )
    worker_ep = Communicator(
        machine,
        "worker_ep",
        Rank,
        {"moe_target": barrier(), "moe_draft": barrier()},
        payload=integers(0, 0),
        description="the EP group: the MoE dispatch/combine all-to-alls of one forward (target or drafter)",
    )
    engine_dp = Communicator(
        machine,
        "engine_dp",
        Rank,
        {"sync": all_reduce_max()},
        payload=integers(0, 1),
        description="the engine cores' gloo dp_group: the unfinished-requests all-reduce",
    )
    return State(
        sizes=sizes,
        Rank=Rank,
        Program=Program,
        worker_dp=worker_dp,
        worker_ep=worker_ep,
        engine_dp=engine_dp,
        phase=variable("engine.phase", MapSort(Rank, Phase), _per_rank(count, Phase.LOOP), "where the busy loop is"),
        program=variable(
            "engine.program",
            MapSort(Rank, Program),
            _per_rank(count, ()),
            "the collectives this iteration still posts, in order (its local decisions chose them)",
        ),
        syncs=variable(
            "engine.syncs",
            MapSort(Rank, BOOL),
            _per_rank(count, False),
            "this iteration ends in _has_global_unfinished_reqs' all-reduce",
        ),
        work=variable(
            "scheduler.work",
            MapSort(Rank, integers(0, sizes.steps)),
            _per_rank(count, 0),
            "forward steps the rank's unfinished requests still need (they share a batch)",
        ),
        step_counter=variable(
            "engine.step_counter",
            MapSort(Rank, integers(0, sizes.sync_interval)),
            _per_rank(count, 0),
            "DPEngineCoreProc.step_counter modulo dp_sync_interval (0: a fresh wave)",
        ),
        engines_running=variable(
            "engine.engines_running", MapSort(Rank, BOOL), _per_rank(count, True), "DPEngineCoreProc.engines_running"
        ),
        requests_left=variable(
            "client.requests_left", integers(0, sizes.requests), sizes.requests, "requests still to add"
        ),
        stops_left=variable("fault.stops", integers(0, sizes.stops), sizes.stops, "ranks still to stop"),
        dummy_ran=variable("ghost.dummy_ran", BOOL, False, "some rank ran execute_dummy_batch"),
        draft_skipped=variable(
            "ghost.draft_skipped", BOOL, False, "some rank's batch did not fit the drafter (no propose)"
        ),
    )
