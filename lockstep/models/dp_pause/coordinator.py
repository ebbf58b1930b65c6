"""The dp-pause DP coordinator (vLLM v0.21.0 ``vllm/v1/engine/coordinator.py``,
``DPCoordinatorProc.process_input_socket`` and ``_send_start_wave``): FIRST_REQ from the client
starts a wave if none runs; ``wave_complete`` from rank 0 ends it; ``start_wave`` from an engine
restarts it, excluding that engine.
"""

from __future__ import annotations

from lockstep.models.dp_pause.context import Context, ReportKind, machine_map
from lockstep.spec.machine import Step
from lockstep.spec.terms import Term, if_then_else


def add_coordinator(context: Context) -> None:
    """The coordinator's actions (its variables are declared by ``model.build``)."""
    machine, Rank, message = context.machine, context.rank, context.message
    from_coordinator, reports = context.read("channel.coordinator"), context.read("channel.to_coordinator")
    first_requests = context.read("channel.first_request")
    coordinator_running, coordinator_wave = context.read("coordinator.engines_running"), context.read("coordinator.current_wave")

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
        })
