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

from lockstep.models.dp_pause.context import Context, ReportKind, machine_map
from lockstep.spec.machine import Step
from lockstep.spec.sorts import RecordSort, SequenceSort
from lockstep.spec.terms import Term, if_then_else, record_of


def add_coordinator(context: Context) -> None:
    """The coordinator's actions (its variables are declared by ``model.build``)."""
    machine, Rank, message = context.machine, context.rank, context.message
    from_coordinator, reports = context.read("channel.coordinator"), context.read("channel.to_coordinator")
    first_requests = context.read("channel.first_request")
    coordinator_running, coordinator_wave = context.read("coordinator.engines_running"), context.read("coordinator.current_wave")
    stale = context.parameters["stale_publications"]
    publications = context.read("channel.publication") if stale else None

    def superseded(changes: Term) -> dict[Term, Term]:
        """With stale publications: the values the coordinator leaves may still reach the client."""
        if publications is None:
            return {}
        assert isinstance(publications.sort, SequenceSort) and isinstance(publications.sort.element, RecordSort)
        kept = if_then_else(publications.length() == stale, publications.tail(), publications)
        previous = record_of(publications.sort.element, wave=coordinator_wave, running=coordinator_running)
        return {publications: if_then_else(changes, kept.append(previous), publications)}

    def broadcast(wave_value: Term, exclude: Term | None) -> dict[Term, Term]:
        return {from_coordinator: machine_map(Rank, lambda r: from_coordinator[r].append(message("START_WAVE", wave_value, exclude)), from_coordinator)}

    @machine.action(actor="coordinator")
    def coordinator_first_request() -> Step:
        """FIRST_REQ: if no wave runs, start one (exclusion is ineffective on this path, see module doc)."""
        starts = ~coordinator_running
        started = broadcast(coordinator_wave, None)[from_coordinator]
        return Step(~first_requests.is_empty(), {
            first_requests: first_requests.tail(),
            coordinator_running: True,
            from_coordinator: if_then_else(starts, started, from_coordinator),
            **superseded(starts),
        })

    @machine.action(actor="coordinator", rank=Rank)
    def coordinator_report(rank: Term) -> Step:
        """wave_complete(w) ends the wave; start_wave(w) from an engine restarts it, excluding that engine."""
        head = reports[rank].head()
        complete = (head.field("kind") == ReportKind.WAVE_COMPLETE) & (coordinator_wave <= head.field("wave"))
        restart = (head.field("kind") == ReportKind.START_WAVE) & (
            (head.field("wave") > coordinator_wave) | ((head.field("wave") == coordinator_wave) & ~coordinator_running))
        started = broadcast(head.field("wave"), rank)[from_coordinator]
        return Step(~reports[rank].is_empty(), {
            reports: reports.set(rank, reports[rank].tail()),
            coordinator_wave: if_then_else(complete, head.field("wave") + 1, if_then_else(restart, head.field("wave"), coordinator_wave)),
            coordinator_running: if_then_else(complete, False, coordinator_running | restart),
            from_coordinator: if_then_else(restart, started, from_coordinator),
            **superseded(complete | restart),
        })
