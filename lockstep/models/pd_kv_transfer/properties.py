"""The properties of pd-kv-transfer, each with the source lines it comes from, and the final states.

- ``no_foreign_read``: while D's read of a request is in flight, the P block it reads and the D
  block it writes belong to that request (a block freed and given to another request while the
  read runs is corruption). ``pull_worker.py`` ``_read_blocks_for_req`` reads
  ``remote_block_ids`` into ``local_block_ids``; ``scheduler.py`` ``_free_blocks`` returns them.
- ``no_free_under_transfer``: while the read is in flight, neither side has freed the request's
  blocks (``request_finished`` returns ``delay_free_blocks`` on P; ``finish_requests`` sets it on D
  for a request in ``WAITING_FOR_REMOTE_KVS`` not yet in ``finished_recving_kv_req_ids``).
- ``no_engine_assert``: neither assert of ``Scheduler._update_from_kv_xfer_finished`` fires
  (``assert req_id in self.requests`` for finished_recving and finished_sending;
  ``assert RequestStatus.is_finished(req.status)`` for a finished_recving of a request not
  parked): either kills EngineCore.
- ``no_block_leak``: where nothing can move any more, every block of both pools is free (a block
  held for ever once its request finished or was aborted is a leak).
- ``no_stuck_request``: where nothing can move any more, no request is still alive on either side
  (a request parked in ``WAITING_FOR_REMOTE_KVS`` for ever, or a prefill never finished, is a hang).
- witnesses: ``transfer_completes`` (a request's KV read by D, decoded, and freed on both sides)
  and ``abort_recovered`` (an aborted request's blocks freed on both sides).
"""

from __future__ import annotations

from lockstep.models.pd_kv_transfer.state import NOBODY, DecodePhase, Job, PrefillPhase, State
from lockstep.spec.machine import Machine
from lockstep.spec.terms import Term, all_of, any_of, conjunction, maximum


def _settled(state: State, request: Term) -> Term:
    """The request is over on both sides and nothing about it is in flight."""
    decode = state.decode_phase[request]
    return conjunction(
        state.prefill_phase[request] == PrefillPhase.DONE,
        (decode == DecodePhase.NONE) | (decode == DecodePhase.DONE),
        state.handoff[request].is_empty(),
        state.notifications[request].is_empty(),
        state.job[request] == Job.NONE,
        state.finished_sending[request] == 0,
        state.finished_recving[request] == 0,
    )


def _pools_free(state: State) -> Term:
    return conjunction(
        all_of(state.PrefillBlock, lambda block: state.prefill_owner[block] == NOBODY),
        all_of(state.DecodeBlock, lambda block: state.decode_owner[block] == NOBODY),
    )


def set_final(machine: Machine, state: State) -> None:
    """A run ends when every request is over on both sides and both pools are free."""
    machine.set_final(conjunction(all_of(state.Request, lambda request: _settled(state, request)), _pools_free(state)))


def add_invariants(machine: Machine, state: State) -> None:
    """The safety properties (see the module docstring for their sources)."""
    machine.always(
        "no_foreign_read",
        all_of(
            state.Request,
            lambda request: (state.job[request] == Job.READ).implies(
                (state.prefill_owner[maximum(state.remote_block[request], 0)] == request)
                & (state.decode_owner[maximum(state.decode_block[request], 0)] == request)
            ),
        ),
        "D's read only touches blocks its request owns on P and on D",
    )
    machine.always(
        "no_free_under_transfer",
        all_of(
            state.Request,
            lambda request: (state.job[request] == Job.READ).implies(
                (state.prefill_phase[request] == PrefillPhase.HELD)
                & (
                    (state.decode_phase[request] == DecodePhase.REMOTE)
                    | (state.decode_phase[request] == DecodePhase.HELD)
                )
            ),
        ),
        "no block is freed while a transfer may still touch it",
    )
    machine.always(
        "no_engine_assert",
        ~state.engine_assert,
        "no assert of Scheduler._update_from_kv_xfer_finished fires (EngineCore would die)",
    )
    machine.always(
        "no_block_leak",
        True,
        "no block is held for ever once its request finished or was aborted",
        at_deadlock=_pools_free(state),
    )
    machine.always(
        "no_stuck_request",
        True,
        "no request waits for ever (for its KV, its prefill, or its blocks)",
        at_deadlock=all_of(state.Request, lambda request: _settled(state, request)),
    )


def add_witnesses(machine: Machine, state: State) -> None:
    """A transfer can complete; an abort can be recovered from."""
    machine.sometimes(
        "transfer_completes",
        any_of(
            state.Request,
            lambda request: state.transferred[request] & _settled(state, request),
        ),
        "a request's KV is read by D and both sides free it",
    )
    if not state.sizes.aborts:
        return
    machine.sometimes(
        "abort_recovered",
        any_of(
            state.Request,
            lambda request: conjunction(
                state.aborted[request],
                _settled(state, request),
                all_of(state.PrefillBlock, lambda block: state.prefill_owner[block] != request),
                all_of(state.DecodeBlock, lambda block: state.decode_owner[block] != request),
            ),
        ),
        "an aborted request's blocks are freed on both sides",
    )
