"""The prefill instance (P) of pd-kv-transfer: its scheduler and its NIXL worker.

Mirrors vLLM v0.33.0: ``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule`` allocating the
prompt's blocks; ``update_from_output`` finishing a ``max_tokens=1`` prefill, whose
``_free_request`` asks the connector and keeps the blocks when it answers
``delay_free_blocks``; ``finish_requests`` for an abort; ``_update_from_kv_xfer_finished``
freeing the blocks on ``finished_sending``) and the NIXL connector of
``vllm/distributed/kv_transfer/kv_connector/v1/nixl/`` (``NixlConnectorScheduler.update_state_after_alloc``
and ``request_finished`` in ``pull_scheduler.py``; the worker's ``start_load_kv`` and
``_get_new_notifs`` in ``pull_worker.py``, ``_reap_expired_send_leases`` and
``get_transfer_results`` in ``base_worker.py``).

One request uses one block. The worker's ``_reqs_to_process`` (set when the request enters a
batch) and ``_reqs_to_send`` (set with the lease when it finishes) are one flag, ``tracked``:
a notification is honoured while either holds the request, and both are cleared together
(``_get_new_notifs``), so the lag between P's scheduler and worker that ``_reqs_to_process``
exists for (async scheduling) needs no state of its own. The lease is a timer and the model has
no clock. ``lease_expiry`` = 1 is vLLM's timing assumption: D's heartbeats
(``_send_heartbeats``) renew the lease while the request waits on D and the lease
(``kv_lease_duration``, 30 s) outlasts a read, so it expires only once D no longer needs the
blocks (the notification was lost, the read failed, D aborted). ``lease_expiry`` = 2 drops the
assumption: the lease may expire at any step, a read or a hand-off in flight included.
"""

from __future__ import annotations

from lockstep.models.pd_kv_transfer.state import NOBODY, DecodePhase, Job, PrefillPhase, State, released
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.terms import Term, conjunction, if_then_else

_SCHEDULER = "vllm/v1/core/sched/scheduler.py"
_NIXL = "vllm/distributed/kv_transfer/kv_connector/v1/nixl/"


def _freed(state: State, request: Term) -> Term:
    """P's pool after ``_free_blocks`` of ``request``."""
    return released(state.prefill_owner, state.PrefillBlock, state.Owner, request)


@action(
    actor="prefill-scheduler",
    mirrors=f"{_SCHEDULER} Scheduler.schedule (allocate_slots); {_NIXL}pull_scheduler.py "
    "update_state_after_alloc (do_remote_decode: _reqs_in_batch); pull_worker.py start_load_kv (_reqs_to_process.add)",
)
def prefill_schedule(state: State, request: Term, block: Term) -> Step:
    """P schedules the request's prefill on a free block; its worker starts tracking it."""
    return Step(
        (state.prefill_phase[request] == PrefillPhase.WAITING) & (state.prefill_owner[block] == NOBODY),
        {
            state.prefill_phase: state.prefill_phase.set(request, PrefillPhase.RUNNING),
            state.prefill_block: state.prefill_block.set(request, block),
            state.prefill_owner: state.prefill_owner.set(block, request),
            state.prefill_tracked: state.prefill_tracked.set(request, True),
        },
    )


@action(
    actor="prefill-scheduler",
    mirrors=f"{_SCHEDULER} Scheduler.update_from_output -> _free_request (delay_free_blocks); {_NIXL}"
    "pull_scheduler.py request_finished (FINISHED_LENGTH_CAPPED: _reqs_need_send with the lease, "
    "kv_transfer_params with remote_block_ids)",
)
def prefill_finish(state: State, request: Term) -> Step:
    """The prefill finishes: P keeps the blocks for D and hands the block ids to D."""
    return Step(
        state.prefill_phase[request] == PrefillPhase.RUNNING,
        {
            state.prefill_phase: state.prefill_phase.set(request, PrefillPhase.HELD),
            state.handoff: state.handoff.set(request, state.handoff[request].append(True)),
        },
    )


@action(
    actor="prefill-scheduler",
    mirrors=f"{_SCHEDULER} Scheduler.finish_requests(FINISHED_ABORTED) -> _free_request -> _free_blocks; "
    f"{_NIXL}pull_scheduler.py request_finished (aborted: _reqs_not_processed, no delay); pull_worker.py "
    "start_load_kv (_reqs_to_process.discard)",
)
def prefill_abort(state: State, request: Term) -> Step:
    """An abort on P before the prefill finished: blocks freed at once, nothing handed off.
    (An abort after it finished is a no-op: finish_requests skips finished requests.)"""
    phase = state.prefill_phase[request]
    return Step(
        conjunction(state.aborts_left > 0, (phase == PrefillPhase.WAITING) | (phase == PrefillPhase.RUNNING)),
        {
            state.prefill_phase: state.prefill_phase.set(request, PrefillPhase.DONE),
            state.prefill_owner: _freed(state, request),
            state.prefill_tracked: state.prefill_tracked.set(request, False),
            state.aborts_left: state.aborts_left - 1,
            state.aborted: state.aborted.set(request, True),
        },
    )


@action(
    actor="prefill-worker",
    mirrors=f"{_NIXL}pull_worker.py NixlConnectorWorker._get_new_notifs (unrecognized request: logged, "
    "dropped) <- base_worker.py get_transfer_results",
)
def prefill_receive_notification(state: State, request: Term) -> Step:
    """P's worker takes D's notification: a tracked request is done sending; any other is dropped."""
    tracked = state.prefill_tracked[request]
    return Step(
        ~state.notifications[request].is_empty(),
        {
            state.notifications: state.notifications.set(request, state.notifications[request].tail()),
            state.prefill_tracked: state.prefill_tracked.set(request, False),
            state.finished_sending: if_then_else(
                tracked,
                state.finished_sending.set(request, state.finished_sending[request] + 1),
                state.finished_sending,
            ),
        },
    )


@action(
    actor="prefill-worker",
    mirrors=f"{_NIXL}base_worker.py NixlConnectorWorker._reap_expired_send_leases (done_sending)",
)
def prefill_lease_expires(state: State, request: Term) -> Step:
    """The lease of a finished request's blocks expires: P's worker reports it done sending."""
    guard = (state.prefill_phase[request] == PrefillPhase.HELD) & state.prefill_tracked[request]
    if state.sizes.lease_expiry == 1:  # timely: heartbeats and the lease's length cover D's wait and read
        guard = conjunction(
            guard,
            state.handoff[request].is_empty(),
            state.decode_phase[request] != DecodePhase.WAITING,
            state.job[request] != Job.READ,
        )
    return Step(
        guard,
        {
            state.prefill_tracked: state.prefill_tracked.set(request, False),
            state.finished_sending: state.finished_sending.set(request, state.finished_sending[request] + 1),
        },
    )


@action(
    actor="prefill-scheduler",
    mirrors=f"{_SCHEDULER} Scheduler._update_from_kv_xfer_finished (finished_sending: "
    "assert req_id in self.requests; _free_blocks)",
)
def prefill_finished_sending(state: State, request: Term) -> Step:
    """P's scheduler frees the held blocks of a request its worker reports done sending."""
    present = state.prefill_phase[request] == PrefillPhase.HELD
    return Step(
        state.finished_sending[request] > 0,
        {
            state.finished_sending: state.finished_sending.set(request, state.finished_sending[request] - 1),
            state.prefill_phase: if_then_else(
                present, state.prefill_phase.set(request, PrefillPhase.DONE), state.prefill_phase
            ),
            state.prefill_owner: if_then_else(present, _freed(state, request), state.prefill_owner),
            state.engine_assert: state.engine_assert | ~present,
        },
    )
