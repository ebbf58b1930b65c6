"""The decode instance (D) of pd-kv-transfer: its scheduler and its NIXL worker (pull mode).

Mirrors vLLM v0.33.0: ``vllm/v1/core/sched/scheduler.py`` (``add_request``; ``schedule``, which
allocates the blocks of a ``do_remote_prefill`` request and parks it in
``WAITING_FOR_REMOTE_KVS``; ``_handle_blocked_waiting_request`` and
``_update_waiting_for_remote_kv``, which promote it once ``finished_recving`` arrived;
``finish_requests``, which keeps the blocks of a request aborted in ``WAITING_FOR_REMOTE_KVS``
(``delay_free_blocks``); ``_update_from_kv_xfer_finished`` with its two asserts) and the NIXL
connector's ``request_finished`` (``pull_scheduler.py``: an abort before allocation queues a
notify-only read with empty block ids so P frees its blocks), ``start_load_kv`` and
``_read_blocks_for_req`` (``pull_worker.py``) and ``get_transfer_results`` (``base_worker.py``:
reads done or failed become ``finished_recving``; after a good read D notifies P).

The pre-fix variant is v0.29.0, where ``start_load_kv`` registers ``_recving_metadata`` for every
request, the notify-only read of an aborted request included, and ``get_finished`` reports every
failed request as done receiving; v0.30.0 registers only reads D awaits, and drops failures of
requests it does not track (v0.33.0 the same).

A failed read (``transfer_failures``) is reported in ``finished_recving`` too (with
``failed_recving``); D recomputes the prompt locally and sends P no notification, so P frees on
the lease. Deferred loads (``defer_async_loads``), the host buffer, heterogeneous TP/DCP
(several consumers per request), push mode and the turn-2 read-back are left out (see
docs/models/pd-kv-transfer.md).
"""

from __future__ import annotations

from lockstep.models.pd_kv_transfer.state import NOBODY, DecodePhase, Job, State, released
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.protocol import PRE_FIX
from lockstep.spec.terms import Term, TermLike, conjunction, if_then_else

_SCHEDULER = "vllm/v1/core/sched/scheduler.py"
_NIXL = "vllm/distributed/kv_transfer/kv_connector/v1/nixl/"


def _freed(state: State, request: Term) -> Term:
    """D's pool after ``_free_blocks`` of ``request``."""
    return released(state.decode_owner, state.DecodeBlock, state.Owner, request)


@action(
    actor="decode-scheduler",
    mirrors=f"{_SCHEDULER} Scheduler.add_request (kv_transfer_params: do_remote_prefill, remote_block_ids)",
)
def decode_admit(state: State, request: Term) -> Step:
    """P's block ids reach D with the request: D queues it, still to pull its KV."""
    handoff = state.handoff[request]
    return Step(
        ~handoff.is_empty(),
        {
            state.handoff: state.handoff.set(request, handoff.tail()),
            state.decode_phase: state.decode_phase.set(request, DecodePhase.WAITING),
            state.remote_block: state.remote_block.set(request, state.prefill_block[request]),
        },
    )


@action(
    actor="decode-scheduler",
    mirrors=f"{_SCHEDULER} Scheduler.schedule (load_kv_async: WAITING_FOR_REMOTE_KVS); {_NIXL}pull_scheduler.py "
    "update_state_after_alloc (_reqs_need_recv), build_connector_meta; pull_worker.py start_load_kv -> "
    "_read_blocks_for_req",
)
def decode_schedule(state: State, request: Term, block: Term) -> Step:
    """D allocates a free block, parks the request in WAITING_FOR_REMOTE_KVS, and its worker starts
    reading P's block into it."""
    return Step(
        (state.decode_phase[request] == DecodePhase.WAITING) & (state.decode_owner[block] == NOBODY),
        {
            state.decode_phase: state.decode_phase.set(request, DecodePhase.REMOTE),
            state.decode_block: state.decode_block.set(request, block),
            state.decode_owner: state.decode_owner.set(block, request),
            state.job: state.job.set(request, Job.READ),
            state.recving_metadata: state.recving_metadata.set(request, True),
        },
    )


@action(
    actor="decode-worker",
    mirrors=f"{_NIXL}base_worker.py get_transfer_results (_pop_done_transfers; _recv_failures -> "
    "failed_recving; _send_pending_recv_notifs after a good read)",
)
def decode_read_done(state: State, request: Term, ok: Term) -> Step:
    """D's read completes (``ok``: D notifies P) or fails (no notification); either way the worker
    reports the request in finished_recving."""
    return Step(
        conjunction(state.job[request] == Job.READ, ok | (state.failures_left > 0)),
        {
            state.job: state.job.set(request, Job.NONE),
            state.recving_metadata: state.recving_metadata.set(request, False),
            state.finished_recving: state.finished_recving.set(request, state.finished_recving[request] + 1),
            state.notifications: if_then_else(
                ok,
                state.notifications.set(request, state.notifications[request].append(True)),
                state.notifications,
            ),
            state.failures_left: if_then_else(ok, state.failures_left, state.failures_left - 1),
            state.transferred: if_then_else(ok, state.transferred.set(request, True), state.transferred),
        },
    )


@action(
    actor="decode-worker",
    mirrors=f"{_NIXL}pull_worker.py start_load_kv -> _read_blocks_for_req (empty local blocks: notify only; "
    "a failed handshake or notification -> _handle_failed_transfer); base_worker.py get_transfer_results",
)
def decode_notify_only(state: State, variant: str, request: Term, ok: Term) -> Step:
    """D's worker tells P to free the blocks of a request D aborted before allocating; if that
    fails, pre-fix (v0.29.0) reports the request, which it registered in _recving_metadata, as
    done receiving; post-fix drops the failure of a request it does not track."""
    reported = ~ok & state.recving_metadata[request] if variant == PRE_FIX else False
    return Step(
        conjunction(state.job[request] == Job.NOTIFY, ok | (state.failures_left > 0)),
        {
            state.job: state.job.set(request, Job.NONE),
            state.recving_metadata: state.recving_metadata.set(request, False),
            state.finished_recving: if_then_else(
                reported,
                state.finished_recving.set(request, state.finished_recving[request] + 1),
                state.finished_recving,
            ),
            state.notifications: if_then_else(
                ok,
                state.notifications.set(request, state.notifications[request].append(True)),
                state.notifications,
            ),
            state.failures_left: if_then_else(ok, state.failures_left, state.failures_left - 1),
        },
    )


@action(
    actor="decode-scheduler",
    mirrors=f"{_SCHEDULER} Scheduler._update_from_kv_xfer_finished (finished_recving: assert req_id in "
    "self.requests; WAITING_FOR_REMOTE_KVS -> finished_recving_kv_req_ids; else assert is_finished, _free_blocks)",
)
def decode_finished_recving(state: State, request: Term) -> Step:
    """D's scheduler handles a finished_recving report: a parked request becomes ready; an aborted
    one whose blocks were held is freed; any other request trips an assert."""
    phase = state.decode_phase[request]
    parked, held = phase == DecodePhase.REMOTE, phase == DecodePhase.HELD
    return Step(
        state.finished_recving[request] > 0,
        {
            state.finished_recving: state.finished_recving.set(request, state.finished_recving[request] - 1),
            state.decode_phase: if_then_else(
                parked,
                state.decode_phase.set(request, DecodePhase.READY),
                if_then_else(held, state.decode_phase.set(request, DecodePhase.DONE), state.decode_phase),
            ),
            state.decode_owner: if_then_else(held, _freed(state, request), state.decode_owner),
            state.engine_assert: state.engine_assert | ~(parked | held),
        },
    )


@action(
    actor="decode-scheduler",
    mirrors=f"{_SCHEDULER} Scheduler._handle_blocked_waiting_request -> _update_waiting_for_remote_kv; schedule",
)
def decode_run(state: State, request: Term) -> Step:
    """A request whose KV arrived (or failed: recomputed locally) is promoted and decodes."""
    return Step(
        state.decode_phase[request] == DecodePhase.READY,
        {state.decode_phase: state.decode_phase.set(request, DecodePhase.RUNNING)},
    )


@action(
    actor="decode-scheduler",
    mirrors=f"{_SCHEDULER} Scheduler.update_from_output -> _free_request ({_NIXL}pull_scheduler.py "
    "request_finished: D side, no delay) -> _free_blocks",
)
def decode_finish(state: State, request: Term) -> Step:
    """The request finishes decoding on D: its blocks are freed."""
    return Step(
        state.decode_phase[request] == DecodePhase.RUNNING,
        {
            state.decode_phase: state.decode_phase.set(request, DecodePhase.DONE),
            state.decode_owner: _freed(state, request),
        },
    )


@action(
    actor="decode-scheduler",
    mirrors=f"{_SCHEDULER} Scheduler.finish_requests (WAITING_FOR_REMOTE_KVS and not in "
    f"finished_recving_kv_req_ids: delay_free_blocks) -> _free_request; {_NIXL}pull_scheduler.py "
    "request_finished (do_remote_prefill still set: _reqs_need_recv with empty block ids)",
)
def decode_abort(state: State, variant: str, request: Term) -> Step:
    """An abort on D at any point: before allocation, a notify-only read is queued for P; while
    the read may be in flight the blocks are held; after it, they are freed at once."""
    phase = state.decode_phase[request]
    waiting, parked = phase == DecodePhase.WAITING, phase == DecodePhase.REMOTE
    active = waiting | parked | (phase == DecodePhase.READY) | (phase == DecodePhase.RUNNING)
    updates: dict[Term, TermLike] = {
        state.decode_phase: state.decode_phase.set(request, if_then_else(parked, DecodePhase.HELD, DecodePhase.DONE)),
        state.decode_owner: if_then_else(parked, state.decode_owner, _freed(state, request)),
        state.job: if_then_else(waiting, state.job.set(request, Job.NOTIFY), state.job),
        state.aborts_left: state.aborts_left - 1,
        state.aborted: state.aborted.set(request, True),
    }
    if variant == PRE_FIX:  # v0.29.0's start_load_kv registers the notify-only read in _recving_metadata too
        updates[state.recving_metadata] = if_then_else(
            waiting, state.recving_metadata.set(request, True), state.recving_metadata
        )
    return Step(conjunction(state.aborts_left > 0, active), updates)


@action(actor="network", mirrors=f"{_NIXL}pull_worker.py nixl_wrapper.send_notif (a notification lost)")
def lose_notification(state: State, request: Term) -> Step:
    """A fault: one notification from D to P is lost."""
    return Step(
        (state.lost_left > 0) & ~state.notifications[request].is_empty(),
        {
            state.notifications: state.notifications.set(request, state.notifications[request].tail()),
            state.lost_left: state.lost_left - 1,
        },
    )


@action(actor="network", mirrors=f"{_NIXL}pull_worker.py nixl_wrapper.send_notif (a notification delivered twice)")
def duplicate_notification(state: State, request: Term) -> Step:
    """A fault: one notification from D to P arrives twice."""
    queue = state.notifications[request]
    return Step(
        (state.duplicated_left > 0) & (queue.length() == 1),
        {
            state.notifications: state.notifications.set(request, queue.append(True)),
            state.duplicated_left: state.duplicated_left - 1,
        },
    )
