"""The state of the pd-kv-transfer model: sizes, sorts and every state variable, in one place.

``declare`` turns the protocol's parameters into ``Sizes``, builds the sorts and declares the
state of the prefill instance (P: its scheduler's requests and block pool, its NIXL worker's
``_reqs_to_process``/``_reqs_to_send`` and the ``finished_sending`` it reports), of the decode
instance (D: its scheduler's requests and block pool, its worker's reads and the
``finished_recving`` it reports), of the two channels between them (the hand-off of P's
``kv_transfer_params`` through the proxy, and D's NIXL notifications back to P), the fault
budgets and the ghosts the properties read. ``prefill.py``, ``decode.py`` and ``properties.py``
share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lockstep.spec.machine import Machine
from lockstep.spec.protocol import POST_FIX as POST_FIX  # the variant names, defined once in spec
from lockstep.spec.protocol import PRE_FIX as PRE_FIX
from lockstep.spec.sorts import BOOL, IndexSort, IntSort, MapSort, SequenceSort, enum, integers
from lockstep.spec.terms import Term, if_then_else, map_of

NOBODY = -1
"""The owner of a free block, and the block of a request that holds none."""

PrefillPhase = enum("PrefillPhase", ["WAITING", "RUNNING", "HELD", "DONE"])
"""A request on P: waiting; prefilling (blocks allocated); finished with ``delay_free_blocks``
(its blocks held for D's read); freed and deleted from ``Scheduler.requests`` (or aborted)."""

DecodePhase = enum("DecodePhase", ["NONE", "WAITING", "REMOTE", "HELD", "READY", "RUNNING", "DONE"])
"""A request on D: not arrived; waiting with ``do_remote_prefill`` (no blocks yet);
``WAITING_FOR_REMOTE_KVS`` (blocks allocated, the read started); aborted there, its blocks held
until ``finished_recving`` (``delay_free_blocks``); in ``finished_recving_kv_req_ids``; decoding;
freed and deleted."""

Job = enum("Job", ["NONE", "READ", "NOTIFY"])
"""D worker's work for a request: none; a read of P's blocks in flight (``_recving_transfers``);
a notify-only read queued for a request aborted before allocation (``_reqs_need_recv`` with
empty block ids)."""


@dataclass(frozen=True)
class Sizes:
    """Every bound and switch of the model, from the protocol's parameters."""

    requests: int
    prefill_blocks: int
    decode_blocks: int
    aborts: int  # aborts injected, on either side, at any point
    lost: int  # D->P notifications lost
    duplicated: int  # D->P notifications delivered twice
    failures: int  # reads (or notify-only reads) that fail on D's worker
    lease_expiry: int  # 0: never; 1: only once D no longer needs the blocks; 2: at any moment


def sizes_of(parameters: Mapping[str, int]) -> Sizes:
    return Sizes(
        requests=parameters["requests"],
        prefill_blocks=parameters["blocks"],
        decode_blocks=parameters["blocks"],
        aborts=parameters["aborts"],
        lost=parameters["lost_notifications"],
        duplicated=parameters["duplicated_notifications"],
        failures=parameters["transfer_failures"],
        lease_expiry=parameters["lease_expiry"],
    )


@dataclass(frozen=True)
class State:
    """Sorts and state variables (Terms) of one built machine."""

    sizes: Sizes
    Request: IndexSort
    PrefillBlock: IndexSort
    DecodeBlock: IndexSort
    Owner: IntSort
    # P: scheduler (vllm/v1/core/sched/scheduler.py) and NIXL worker (nixl/base_worker.py, pull_worker.py)
    prefill_phase: Term
    prefill_block: Term
    prefill_owner: Term
    prefill_tracked: Term
    finished_sending: Term
    # the channels
    handoff: Term
    notifications: Term
    # D: scheduler and NIXL worker
    decode_phase: Term
    decode_block: Term
    decode_owner: Term
    remote_block: Term
    job: Term
    recving_metadata: Term
    finished_recving: Term
    # faults and ghosts
    aborts_left: Term
    lost_left: Term
    duplicated_left: Term
    failures_left: Term
    aborted: Term
    transferred: Term
    engine_assert: Term


def _per_request(count: int, value: object) -> tuple[object, ...]:
    return tuple(value for _ in range(count))


def declare(machine: Machine, parameters: Mapping[str, int]) -> State:
    """The state variables, initially: every request waiting on P, every block free, channels empty."""
    sizes = sizes_of(parameters)
    count = sizes.requests
    Request = IndexSort("Request", count)
    PrefillBlock = IndexSort("PrefillBlock", sizes.prefill_blocks)
    DecodeBlock = IndexSort("DecodeBlock", sizes.decode_blocks)
    Owner = integers(NOBODY, count - 1)
    variable = machine.variable
    return State(
        sizes=sizes,
        Request=Request,
        PrefillBlock=PrefillBlock,
        DecodeBlock=DecodeBlock,
        Owner=Owner,
        prefill_phase=variable(
            "prefill.phase",
            MapSort(Request, PrefillPhase),
            _per_request(count, PrefillPhase.WAITING),
            "P's request status",
        ),
        prefill_block=variable(
            "prefill.block",
            MapSort(Request, integers(NOBODY, sizes.prefill_blocks - 1)),
            _per_request(count, NOBODY),
            "the P block the request was given (its remote_block_ids)",
        ),
        prefill_owner=variable(
            "prefill.owner",
            MapSort(PrefillBlock, Owner),
            tuple(NOBODY for _ in range(sizes.prefill_blocks)),
            "P's block pool: the request that owns each block (-1: free)",
        ),
        prefill_tracked=variable(
            "prefill.tracked",
            MapSort(Request, BOOL),
            _per_request(count, False),
            "P worker: the request is in _reqs_to_process (and, once finished, _reqs_to_send with its lease)",
        ),
        finished_sending=variable(
            "prefill.finished_sending",
            MapSort(Request, integers(0, 2)),
            _per_request(count, 0),
            "finished_sending reports of P's worker not yet handled by P's scheduler",
        ),
        handoff=variable(
            "channel.handoff",
            MapSort(Request, SequenceSort(BOOL, 1)),
            _per_request(count, ()),
            "P's kv_transfer_params on their way to D (through the proxy)",
        ),
        notifications=variable(
            "channel.notifications",
            MapSort(Request, SequenceSort(BOOL, 2)),
            _per_request(count, ()),
            "D's NIXL notifications to P ('done reading request r')",
        ),
        decode_phase=variable(
            "decode.phase", MapSort(Request, DecodePhase), _per_request(count, DecodePhase.NONE), "D's request status"
        ),
        decode_block=variable(
            "decode.block",
            MapSort(Request, integers(NOBODY, sizes.decode_blocks - 1)),
            _per_request(count, NOBODY),
            "the D block the request was given",
        ),
        decode_owner=variable(
            "decode.owner",
            MapSort(DecodeBlock, Owner),
            tuple(NOBODY for _ in range(sizes.decode_blocks)),
            "D's block pool: the request that owns each block (-1: free)",
        ),
        remote_block=variable(
            "decode.remote_block",
            MapSort(Request, integers(NOBODY, sizes.prefill_blocks - 1)),
            _per_request(count, NOBODY),
            "the P block id D read from kv_transfer_params (remote_block_ids)",
        ),
        job=variable(
            "decode.job", MapSort(Request, Job), _per_request(count, Job.NONE), "D worker's work for the request"
        ),
        recving_metadata=variable(
            "decode.recving_metadata",
            MapSort(Request, BOOL),
            _per_request(count, False),
            "D worker: the request is in _recving_metadata",
        ),
        finished_recving=variable(
            "decode.finished_recving",
            MapSort(Request, integers(0, 2)),
            _per_request(count, 0),
            "finished_recving reports of D's worker not yet handled by D's scheduler",
        ),
        aborts_left=variable("fault.aborts", integers(0, sizes.aborts), sizes.aborts, "aborts still to inject"),
        lost_left=variable("fault.lost", integers(0, sizes.lost), sizes.lost, "notifications still to lose"),
        duplicated_left=variable(
            "fault.duplicated", integers(0, sizes.duplicated), sizes.duplicated, "notifications still to duplicate"
        ),
        failures_left=variable("fault.failures", integers(0, sizes.failures), sizes.failures, "reads still to fail"),
        aborted=variable(
            "ghost.aborted", MapSort(Request, BOOL), _per_request(count, False), "the request was aborted"
        ),
        transferred=variable(
            "ghost.transferred", MapSort(Request, BOOL), _per_request(count, False), "D read the request's KV from P"
        ),
        engine_assert=variable(
            "ghost.engine_assert", BOOL, False, "an assert of _update_from_kv_xfer_finished fired (EngineCore dies)"
        ),
    )


def released(owner: Term, blocks: IndexSort, owners: IntSort, request: Term) -> Term:
    """The block pool ``owner`` with every block of ``request`` returned to the free pool."""
    return map_of(blocks, lambda block: if_then_else(owner[block] == request, NOBODY, owner[block]), owners)
