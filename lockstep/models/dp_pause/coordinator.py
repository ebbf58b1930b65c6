"""The dp-pause DP coordinator (vLLM v0.21.0 ``vllm/v1/engine/coordinator.py``,
``DPCoordinatorProc.process_input_socket`` and ``_send_start_wave``): FIRST_REQ from the client
starts a wave if none runs; ``wave_complete`` from rank 0 ends it; ``start_wave`` from an engine
restarts it, excluding that engine.

Every change of (current_wave, engines_running) is published to the front-ends at once
(``wave_state_changed``, coordinator.py 444-446), and the poll timeout republishes the current
values (273-285). With ``stale_publications`` = n > 0 the model keeps the last n superseded
values in ``channel.publication``: when the coordinator changes state, its previous values may
still be on their way to the client (a timer republication of them may have been sent at any
time while they were current), so they are pushed there, the oldest dropped when n are kept.
"""

from __future__ import annotations

from lockstep.models.dp_pause.state import MessageKind, ReportKind, State, message
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.terms import Term, TermLike, if_then_else, map_of, record_of


def superseded(model: State, changes: Term) -> dict[Term, Term]:
    """With stale publications: the values the coordinator leaves may still reach the client."""
    stale, publications = model.options.stale_publications, model.publications
    if not stale:
        return {}
    kept = if_then_else(publications.length() == stale, publications.tail(), publications)
    previous = record_of(model.sorts.Publication, wave=model.coordinator_wave, running=model.coordinator_running)
    return {publications: if_then_else(changes, kept.append(previous), publications)}


def start_wave(model: State, wave: Term, exclude: Term | None) -> Term:
    """_send_start_wave: START_DP_WAVE(wave, exclude) appended to every engine's channel."""
    channel = model.from_coordinator
    started = message(model, MessageKind.START_WAVE, wave, exclude)
    return map_of(model.Rank, lambda rank: channel[rank].append(started), model.sorts.FromCoordinator)


@action(actor="coordinator", mirrors="DPCoordinatorProc.process_input_socket (FIRST_REQ) → _send_start_wave")
def coordinator_first_request(model: State) -> Step:
    """FIRST_REQ: if no wave runs, start one (exclusion is ineffective on this path, see module doc)."""
    # v0.29.0 on (first_request_leaves_idle): START_DP_WAVE only; engines_running stays false and nothing is
    # published until an engine reports start_wave (coordinator.py 0.29.0, 361-368)
    running, channel, first_request = model.coordinator_running, model.from_coordinator, model.first_request
    starts = ~running
    updates: dict[Term, TermLike] = {
        first_request: first_request.tail(),
        channel: if_then_else(starts, start_wave(model, model.coordinator_wave, None), channel),
    }
    if not model.release.first_request_leaves_idle:
        updates.update({running: True, **superseded(model, starts)})
    return Step(~first_request.is_empty(), updates)


@action(
    actor="coordinator",
    mirrors="DPCoordinatorProc.process_input_socket (wave_complete / start_wave) → _send_start_wave",
)
def coordinator_report(model: State, rank: Term) -> Step:
    """wave_complete(w) ends the wave; start_wave(w) from an engine restarts it, excluding that engine."""
    running, wave = model.coordinator_running, model.coordinator_wave
    channel, reports = model.from_coordinator, model.to_coordinator
    head = reports[rank].head()
    complete = (head.field("kind") == ReportKind.WAVE_COMPLETE) & (wave <= head.field("wave"))
    restart = (head.field("kind") == ReportKind.START_WAVE) & (
        (head.field("wave") > wave) | ((head.field("wave") == wave) & ~running)
    )
    return Step(
        ~reports[rank].is_empty(),
        {
            reports: reports.set(rank, reports[rank].tail()),
            wave: if_then_else(complete, head.field("wave") + 1, if_then_else(restart, head.field("wave"), wave)),
            running: if_then_else(complete, False, running | restart),
            channel: if_then_else(restart, start_wave(model, head.field("wave"), rank), channel),
            **superseded(model, complete | restart),
        },
    )
