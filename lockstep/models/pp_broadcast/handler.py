"""The V2 model runner's PP path (``runner=2``): its ``sample_tokens``, the ``PPHandler``'s ring and side stream.

Mirrors ``vllm/v1/worker/gpu/model_runner.py`` (``GPUModelRunner.sample_tokens``, ``execute_model`` →
``update_pp_decode_requests``, ``postprocess_sampled``) and ``vllm/v1/worker/gpu/pp_utils.py``:

- v0.19.0 to v0.22.x (``pp_broadcast`` / ``pp_receive``): every step, the last rank broadcasts its
  sampled ids ``[num_reqs, 1 + k]`` (as the sampler made them: one column without drafts) and
  ``(num_sampled, num_rejected)`` on ``pp.device_group`` from the compute stream; every other rank
  receives ``[num_reqs, max_sample_len]`` (``max_sample_len = num_speculative_steps + 1``) and applies
  them at once (``postprocess``). The broadcast sits on the rank's stream as in V1 (``stream.py``).
- v0.23.0 on (``PPHandler``, PR #42187): ``broadcast`` / ``receive`` skip a step where no row needs its
  sample (``compute_need_sampled_mask``: ``engine.needs_sample``) and run on a side stream
  (``broadcast_stream.wait_stream(main_stream)``) over a sibling communicator (``ppb``:
  ``make_sibling_device_group(group_desc="pp_broadcast")``). A non-last rank keeps a FIFO of ``pp_size``
  slots: ``receive`` of step T fills the slot ``execute_model`` reserved, and ``execute_model(T + pp_size)``
  pops it (``get_prev_sampled_outputs``), makes the main stream wait for its event and applies the tokens
  to ``req_states`` (``postprocess_sampled``). The last rank applies its own at once. The widths:
  the receiver allocates ``max_sample_len`` columns (v0.33.0: ``_sample_len``, one column unless the step
  schedules drafts); the sender sends the sampler's ids (v0.30.0-v0.32.0: padded to ``max_sample_len``;
  v0.33.0: asserting ``_sample_len``). v0.30.0 adds the draft tokens (``broadcast_drafts``) after the
  sampled ids on both sides; the receiver applies them with the slot.

One side-group op per step and rank stands for that step's broadcasts (sampled ids, counts, drafts),
named by their widths and whether drafts follow (``state.sampled_op``): NCCL does not compare counts,
so peers posting different names is the mismatch that hangs them. The op of step T waits for the
main stream's work before it (the forward of T; on the last rank its sampling and drafting); the main
stream's forward of T + pp_size on a non-last rank waits for it.
"""

from __future__ import annotations

from lockstep.models.pp_broadcast.engine import (
    clamp,
    has_drafts,
    needs_sample,
    non_final_chunk,
    present,
)
from lockstep.models.pp_broadcast.state import SIDE_OPS, Path, Phase, State, sampled_op
from lockstep.models.pp_broadcast.stream import first_phase
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.terms import Term, any_of, conjunction, if_then_else, lift, map_of


def has_state(state: State, rank: Term, step: Term) -> Term:
    """``execute_model_state`` after execute_model(step): the V2 runner sets it on every rank (a non-last rank
    keeps its input batch for the receive), except where the last rank's execute_model raised."""
    return (rank != state.sizes.last) | (state.failed != step + 1)


def sampled_rows(state: State, step: Term, request: Term) -> Term:
    """The row of ``request`` samples a token (``num_sampled`` > 0): a final chunk or a decode."""
    return present(state, step, request) & ~non_final_chunk(state, step, request)


def issues(state: State, rank: Term, step: Term) -> Term:
    """The rank's sample_tokens(step) broadcasts or receives: every step before the PPHandler; where some row
    needs its sample with it. (A last rank without ``execute_model_state`` returns None first.)"""
    if state.sizes.handler:
        return has_state(state, rank, step) & any_of(state.Request, lambda q: needs_sample(state, step, q))
    return has_state(state, rank, step)


def applied_now(state: State, rank: Term, step: Term) -> Term:
    """The requests whose sampled token sample_tokens(step) applies to the rank's req_states: the last rank's
    own (``postprocess_sampled``); before the PPHandler also every other rank's (``postprocess`` after
    ``pp_receive``). With the PPHandler a non-last rank applies them pp_size steps later (``ring``)."""
    if state.sizes.handler:
        return rank == state.sizes.last
    return lift(True)


def sample_tokens(state: State, variant: str, rank: Term) -> Step:
    """V2 GPUModelRunner.sample_tokens(N): without ``execute_model_state`` return None (the prior execute_model
    failed); on a non-last rank receive (``pp_receive``; ``PPHandler.receive``), on the last rank sample, then
    broadcast (``pp_broadcast``; ``PPHandler.broadcast`` and ``broadcast_drafts``)."""
    del variant  # the V2 variants differ in release switches only (state.sizes.release)
    rpc, applied, last = state.rpc, state.applied, state.sizes.last
    step = rpc[rank] // 2
    present_state = has_state(state, rank, step)
    sampling = present_state & (rank == last)
    issuing = issues(state, rank, step)
    now = present_state & applied_now(state, rank, step)
    at_broadcast = (state.gpu_step[rank] == step) & (state.gpu_phase[rank] == Phase.BROADCAST)
    on_main_stream = lift(not state.sizes.handler)
    moves = at_broadcast & ~(issuing & on_main_stream)
    sent = [step < state.samples_sent] if state.sizes.structured else []
    return Step(
        conjunction((rpc[rank] % 2 == 1) & ~state.dead, *sent),
        {
            rpc: rpc.set(rank, rpc[rank] + 1),
            state.issued: state.issued.set(rank, state.issued[rank].set(clamp(state, step), issuing)),
            state.path: state.path.set(
                rank, if_then_else(sampling, Path.SAMPLE, if_then_else(present_state, Path.RECEIVE, Path.RETURN))
            ),
            applied: applied.set(
                rank,
                map_of(
                    state.Request,
                    lambda q: if_then_else(now & sampled_rows(state, step, q), step + 1, applied[rank][q]),
                    state.Steps,
                ),
            ),
            state.gpu_step: state.gpu_step.set(rank, if_then_else(moves, step + 1, state.gpu_step[rank])),
            state.gpu_phase: state.gpu_phase.set(rank, if_then_else(moves, first_phase(rank), state.gpu_phase[rank])),
        },
    )


def ring(state: State, rank: Term, step: Term) -> dict[Term, Term]:
    """``update_pp_decode_requests`` at the top of execute_model(N), empty steps included: a non-last rank pops
    the slot of step N - pp_size and applies its tokens (and, from v0.30.0, drafts) to req_states for the rows
    that needed them (``get_prev_sampled_outputs`` excludes the rest). Nothing elsewhere."""
    if not state.sizes.handler:
        return {}
    applied, size = state.applied, state.sizes.ranks
    source = step - size
    filled = (rank != state.sizes.last) & (step >= size) & state.issued[rank][clamp(state, source)]
    return {
        applied: applied.set(
            rank,
            map_of(
                state.Request,
                lambda q: if_then_else(
                    filled & needs_sample(state, clamp(state, source), q), source + 1, applied[rank][q]
                ),
                state.Steps,
            ),
        )
    }


def wide(state: State, rank: Term, step: Term) -> Term:
    """The rank's sampled-ids tensor of ``step`` has 1 + k columns."""
    sizes, release = state.sizes, state.sizes.release
    if not sizes.drafts:
        return lift(False)
    sender = lift(True) if release.pads_sampled else has_drafts(state, step)  # padded, or as the sampler made it
    receiver = has_drafts(state, step) if release.sample_len_by_drafts else lift(True)  # max_sample_len
    return if_then_else(rank == sizes.last, sender, receiver)


def carries_drafts(state: State) -> bool:
    """The step's broadcasts end with the draft tokens (v0.30.0 on, with drafts; v0.33.0: num_spec_tokens > 0,
    which the model's scheduler always schedules)."""
    return bool(state.sizes.release.broadcasts_drafts and state.sizes.drafts)


def main_stream_done(state: State, rank: Term, step: Term) -> Term:
    """The rank's main stream has run the work the side stream waits for before step's broadcasts: the forward
    (and, on the last rank, the sampling and drafting) of ``step``."""
    gpu_step, phase = state.gpu_step[rank], state.gpu_phase[rank]
    past_forward = (gpu_step == step) & (phase != Phase.RECV) & (phase != Phase.FORWARD)
    return (gpu_step > step) | ((rank != state.sizes.last) & past_forward)


@action(actor="rank:{rank}")
def side_post(state: State, rank: Term) -> Step:
    """PPHandler.receive / broadcast (and broadcast_drafts) of the side stream's front step: the side stream waits
    for the main stream (``broadcast_stream.wait_stream(main_stream)``), then posts the step's broadcasts on
    the pp_broadcast group."""
    assert state.ppb is not None
    ppb, front = state.ppb, state.side_step[rank]
    drafts = carries_drafts(state)
    posts = {name: ppb.post(rank, name)[ppb.queue] for name in SIDE_OPS}
    is_wide = wide(state, rank, front)
    queue = if_then_else(is_wide, posts[sampled_op(True, drafts)], posts[sampled_op(False, drafts)])
    return Step(
        conjunction(
            ~state.dead,
            ~state.side_posted[rank],
            front < state.sizes.steps,
            state.rpc[rank] >= 2 * front + 2,
            state.issued[rank][clamp(state, front)],
            main_stream_done(state, rank, front),
        ),
        {state.side_posted: state.side_posted.set(rank, True), ppb.queue: queue},
    )


@action(actor="rank:{rank}")
def side_complete(state: State, rank: Term) -> Step:
    """The step's broadcasts completed on the side stream; its event is recorded; the side stream moves on."""
    assert state.ppb is not None
    return Step(
        state.side_posted[rank] & state.ppb.done(rank) & ~state.dead,
        {
            state.side_posted: state.side_posted.set(rank, False),
            state.side_step: state.side_step.set(rank, state.side_step[rank] + 1),
        },
    )


@action(actor="rank:{rank}")
def side_pass(state: State, rank: Term) -> Step:
    """The CPU handled the side stream's front step without a broadcast (no row needed its sample, no
    execute_model_state, or an empty step): nothing was enqueued on the side stream for it."""
    front = state.side_step[rank]
    return Step(
        conjunction(
            ~state.dead,
            ~state.side_posted[rank],
            front < state.sizes.steps,
            state.rpc[rank] >= 2 * front + 2,
            ~state.issued[rank][clamp(state, front)],
        ),
        {state.side_step: state.side_step.set(rank, front + 1)},
    )
