"""The GPU stream of a rank: ``gpu_compute``, ``gpu_post``, ``gpu_complete``, and the stream's position.

Per step the stream of rank r runs [recv (r > 0)] forward [send (r < P-1)] [sample (last)]
[broadcast (if this rank issued it)]; an op behind a pending collective waits for it. These
actions are not Python functions: they name the kernel or NCCL call the stream runs
(``GPUModelRunner._model_forward`` / ``_sample``, ``isend_tensor_dict`` / ``irecv_tensor_dict`` and
``torch.distributed.broadcast`` on ``pp.device_group``). Why one FIFO stream per rank is faithful
is the first of the faithfulness notes in ``model.py``.

The V2 runner (``runner=2``) keeps its broadcast on this stream up to v0.22.x; from v0.23.0 the
PPHandler moves it to a side stream (``handler.py``), so the stream passes every broadcast phase, and
a non-last rank's forward of step N waits for the side stream's broadcasts of step N - pp_size where
its ring slot holds them (``main_stream.wait_event(slot.event)``).
"""

from __future__ import annotations

from lockstep.models.pp_broadcast.engine import clamp, empty, forward_pass, has_drafts
from lockstep.models.pp_broadcast.state import Phase, State
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.terms import Term, TermLike, conjunction, disjunction, if_then_else, lift, minimum


def first_phase(rank: Term) -> Term:
    """The first op of a step on ``rank``'s stream (rank 0 has no RECV)."""
    return if_then_else(rank > 0, Phase.RECV, Phase.FORWARD)


def front_is(state: State, rank: TermLike, *phases: Term) -> Term:
    return disjunction(*[state.gpu_phase[rank] == phase for phase in phases])


def advanced(state: State, rank: Term, skip_known: Term) -> tuple[Term, Term]:
    """The stream position after its front op; a broadcast the CPU left out is passed at once."""
    step, phase = state.gpu_step[rank], state.gpu_phase[rank]
    after_forward = if_then_else(rank == state.sizes.last, Phase.SAMPLE, Phase.SEND)
    next_phase = if_then_else(
        phase == Phase.RECV, Phase.FORWARD, if_then_else(phase == Phase.FORWARD, after_forward, Phase.BROADCAST)
    )
    wrapped = phase == Phase.BROADCAST
    passes = ~wrapped & (next_phase == Phase.BROADCAST) & skip_known
    # the last rank's execute_model raised after posting its irecv: nothing else of the step was enqueued
    aborted = (phase == Phase.RECV) & (rank == state.sizes.last) & (state.failed == step + 1)
    to_next = wrapped | passes | aborted
    return if_then_else(to_next, step + 1, step), if_then_else(to_next, first_phase(rank), next_phase)


def on_stream(state: State, rank: Term, step: Term) -> Term:
    """sample_tokens(step) issued a broadcast on this stream (the V2 PPHandler issues its own on a side stream)."""
    if state.sizes.handler:
        return lift(False)
    return state.issued[rank][clamp(state, step)]


def left_out(state: State, rank: Term, step: Term) -> Term:
    """The CPU has run sample_tokens(step) and issued no broadcast."""
    return (state.rpc[rank] >= 2 * step + 2) & ~on_stream(state, rank, step)


def waits_for_slot(state: State, rank: Term) -> Term:
    """The forward at the stream's front may run: on a non-last rank with the PPHandler, the side-stream
    broadcasts of step N - pp_size completed where its ring slot holds them."""
    if not state.sizes.handler:
        return lift(True)
    step, size = state.gpu_step[rank], state.sizes.ranks
    source = step - size
    holds = (rank != state.sizes.last) & (step >= size) & state.issued[rank][clamp(state, source)]
    return holds.implies(state.side_step[rank] > source)


def enqueued(state: State, rank: Term) -> Term:
    """The CPU has enqueued the stream's front op."""
    step, phase, rpc = state.gpu_step[rank], state.gpu_phase[rank], state.rpc
    by_exec = disjunction(phase == Phase.RECV, phase == Phase.FORWARD, phase == Phase.SEND)
    # once the engine has raised, the executor shuts the workers down: nothing more runs
    return if_then_else(by_exec, rpc[rank] >= 2 * step + 1, rpc[rank] >= 2 * step + 2) & ~state.dead


def moved(state: State, rank: Term) -> dict[Term, Term]:
    """The updates that move ``rank``'s stream past its front op."""
    step, phase = advanced(state, rank, left_out(state, rank, state.gpu_step[rank]))
    return {state.gpu_step: state.gpu_step.set(rank, step), state.gpu_phase: state.gpu_phase.set(rank, phase)}


def slot_wait(state: State, rank: Term) -> list[Term]:
    """The guard that a forward waits for its ring slot's broadcasts, where there is a PPHandler."""
    if not state.sizes.handler:
        return []
    return [front_is(state, rank, Phase.FORWARD).implies(waits_for_slot(state, rank))]


@action(actor="rank:{rank}")
def gpu_compute(state: State, rank: Term) -> Step:
    """The stream runs its front kernel: forward(N) or (last rank) sampling(N)."""
    step = state.gpu_step[rank]
    return Step(
        conjunction(
            front_is(state, rank, Phase.FORWARD, Phase.SAMPLE) & enqueued(state, rank),
            *forward_pass(state, step),
            *slot_wait(state, rank),
        ),
        moved(state, rank),
    )


@action(actor="rank:{rank}")
def gpu_post(state: State, rank: Term) -> Step:
    """The stream reaches its front NCCL op and posts it on the PP group."""
    step, phase, pp = state.gpu_step[rank], state.gpu_phase[rank], state.pp
    is_send, is_recv = phase == Phase.SEND, phase == Phase.RECV
    send = pp.send(rank, minimum(rank + 1, state.sizes.last))[pp.queue]
    recv = pp.recv(rank, state.previous_rank[rank])[pp.queue]
    bcast = pp.post(rank, "broadcast")[pp.queue]
    if "broadcast_wide" in pp.specs:  # the V2 runner's pp_broadcast / pp_receive of [num_reqs, 1 + k] ids
        wide = if_then_else(rank == state.sizes.last, has_drafts(state, step), lift(True))  # max_sample_len
        bcast = if_then_else(wide, pp.post(rank, "broadcast_wide")[pp.queue], bcast)
    wanted = ~front_is(state, rank, Phase.BROADCAST) | on_stream(state, rank, step)
    front_is_nccl = front_is(state, rank, Phase.RECV, Phase.SEND, Phase.BROADCAST)
    return Step(
        conjunction(front_is_nccl, enqueued(state, rank), wanted, ~state.posted[rank], *forward_pass(state, step)),
        {
            state.posted: state.posted.set(rank, True),
            pp.queue: if_then_else(is_send, send, if_then_else(is_recv, recv, bcast)),
        },
    )


@action(actor="rank:{rank}")
def gpu_pass(state: State, rank: Term) -> Step:
    """The stream's front is a step with no scheduled tokens whose execute_model the CPU has run: it enqueued
    no forward and no NCCL op (no irecv, isend, sample or broadcast), so the stream goes on to the next step."""
    step = state.gpu_step[rank]
    return Step(
        conjunction(
            empty(state, step),
            state.gpu_phase[rank] == first_phase(rank),
            enqueued(state, rank),
            ~state.posted[rank],
        ),
        {state.gpu_step: state.gpu_step.set(rank, step + 1)},
    )


@action(actor="rank:{rank}")
def gpu_complete(state: State, rank: Term) -> Step:
    """The posted op completed; the stream moves on."""
    posted = state.posted
    return Step(
        posted[rank] & state.pp.done(rank) & ~state.dead, {posted: posted.set(rank, False), **moved(state, rank)}
    )
