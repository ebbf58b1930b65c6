"""The dp-pause front-end of the releases after v0.21.0 (``releases.py``): v0.33.0's
``add_request_async`` without the FIRST_REQ path, the ``sleep`` and ``wake_up`` calls that take
the place of pause and resume when ``sleep_level`` = 1, and the properties that hold when
``AsyncLLM.wait_for_requests_to_drain`` returns or a pause has completed.

``wait_for_requests_to_drain`` (``async_llm.py``) polls ``engine_core.dp_engines_running()``, the
client's view of the coordinator's published ``engines_running``, and returns as soon as it is
false. The model does not add the call as a step: a drain that starts in a state returns there iff
the view is false, so the drain-time property is an invariant over the states where the engines
are not paused (the client is adding requests, has not sent its first pause yet, or resume
returned). It is a race, not a lasting state: the view lags the engines until the coordinator
hears from them. ``wave_seen_before_complete`` says whether the coordinator hears at all: every
wave that serves a request is marked running there before its wave_complete is taken.
"""

from __future__ import annotations

from lockstep.models.dp_pause import client
from lockstep.models.dp_pause.client import send, settled
from lockstep.models.dp_pause.state import ClientPhase, MessageKind, Mode, ReportKind, State, message
from lockstep.spec.actions import action
from lockstep.spec.machine import Machine, Step
from lockstep.spec.sorts import integers
from lockstep.spec.terms import Term, TermLike, all_of, any_of


@action(
    actor="client",
    mirrors="AsyncLLM.add_request → DPAsyncMPClient.add_request_async (ADD stamped with the current wave; v0.33.0)",
)
def client_submit_request(model: State, rank: Term) -> Step:
    """v0.33.0 add_request_async: ADD stamped with the client's view of the wave, nothing else (the
    engine that receives it wakes the others)."""
    base = client.client_add_request.function(model, rank)
    first_request_updates = (model.first_request, model.client_running, model.first_request_inproc)
    updates: dict[Term, TermLike] = {
        variable: value
        for variable, value in base.updates.items()
        if not any(variable is dropped for dropped in first_request_updates)
    }
    return Step(base.guard, updates)


@action(actor="client", mirrors="DPAsyncMPClient run_engine_stats_update_task (current_wave, engines_running)")
def client_read_view(model: State) -> Step:
    """The stats task applies the coordinator's latest publication, at any time: unlike
    ``client.client_read_publication`` also once the client adds no more requests, since
    ``wait_for_requests_to_drain`` reads the view."""
    base = client.client_read_publication.function(model)
    running, wave = model.client_running, model.client_wave
    return Step((running != model.coordinator_running) | (wave != model.coordinator_wave), base.updates)


@action(actor="client", mirrors="AsyncLLM.sleep(level=1) → sleep_async → call_utility_async('sleep') (one engine)")
def client_sleep(model: State, rank: Term) -> Step:
    """send SLEEP(level=1, mode='abort') to one engine"""
    return send(model, ClientPhase.PAUSE, message(model, MessageKind.SLEEP), rank)


@action(actor="client", mirrors="AsyncLLM.wake_up → wake_up_async → call_utility_async('wake_up') (one engine)")
def client_wake_up(model: State, rank: Term) -> Step:
    """send WAKE (every tag) to one engine"""
    ready = settled(model) if model.options.settle_before_resume >= 1 else None
    return send(model, ClientPhase.RESUME, message(model, MessageKind.WAKE), rank, ready)


@action(
    actor="client",
    mirrors="AsyncLLM.sleep(level=1) after pause_generation returned → call_utility_async('sleep') (one engine)",
)
def client_sleep_while_paused(model: State, rank: Term) -> Step:
    """sleep_with_pause = 1: send SLEEP(level=1, mode='abort') to one engine of the paused group"""
    return send(model, ClientPhase.RPC, message(model, MessageKind.SLEEP), rank)


@action(
    actor="client",
    mirrors="AsyncLLM.pause_generation after sleep returned → pause_scheduler_async (one engine)",
)
def client_pause_while_asleep(model: State, rank: Term) -> Step:
    """sleep_with_pause = 2: send PAUSE (the chosen mode) to one engine of the sleeping group"""
    return send(model, ClientPhase.RPC, client.pause_message(model), rank)


def unfinished_anywhere(model: State) -> Term:
    """A request the client added is unfinished: on its way to an engine, or held by one."""

    def carries_add(queue: Term) -> Term:
        positions = integers(0, queue.sort.capacity - 1)  # type: ignore[attr-defined]
        return any_of(
            positions, lambda index: (index < queue.length()) & (queue[index].field("kind") == MessageKind.ADD)
        )

    def holds(rank: Term) -> Term:
        return (model.requests[rank] > 0) | carries_add(model.from_client[rank]) | carries_add(model.input_queue[rank])

    return any_of(model.Rank, holds)


WAVE_SEEN = (
    "D3: every wave that serves a request is seen running by the coordinator (and so published to the "
    "client's view) before the coordinator takes rank 0's wave_complete for it"
)


def wave_seen(model: State) -> Term:
    """D3 at the moment the coordinator takes rank 0's wave_complete(w) for a wave in which a rank ran
    a real forward: it has marked w running (or already moved past it). Only the latest served wave
    is tracked (``wave.last_served``), so this never fires for a wave that served nothing."""
    reports = model.to_coordinator[0]
    head = reports.head()
    wave, coordinator_wave = head.field("wave"), model.coordinator_wave
    completing = ~reports.is_empty() & (head.field("kind") == ReportKind.WAVE_COMPLETE)
    seen = (coordinator_wave > wave) | ((coordinator_wave == wave) & model.coordinator_running)
    return (completing & (model.last_served == wave)).implies(seen)


def add_release_properties(machine: Machine, model: State) -> None:
    """The drain-time, device, rejection and sleep properties of the later releases."""
    phase, release, Rank = model.client_phase, model.release, model.Rank
    none_sent = all_of(Rank, lambda r: ~model.sent_to[r])
    adding = (phase == ClientPhase.REQUESTS) | ((phase == ClientPhase.PAUSE) & none_sent)
    # D1/D1a: wait_for_requests_to_drain runs only with one API server (elastic EP caps
    # api_server_count at 1; clients.py), so they are not declared with clients = 2
    if model.options.clients == 1:
        machine.always(
            "drained_when_idle",
            ((phase == ClientPhase.DONE) & ~model.client_running).implies(~unfinished_anywhere(model)),
            "D1 (a race: the view lags the engines): when wait_for_requests_to_drain returns (the client's view says "
            "the engines are idle) after resume returned, no request the client added is unfinished or on its way",
        )
        machine.always(
            "drained_while_adding",
            (adding & ~model.client_running).implies(~unfinished_anywhere(model)),
            "D1a (a race): the same while the client adds requests, before it sends its first pause",
        )
    machine.always("wave_seen_before_complete", wave_seen(model), WAVE_SEEN)
    returned = phase == ClientPhase.RPC
    if model.options.sleep_with_pause:  # the second call kicks the engines again: D2 holds between the calls
        returned = ((phase == ClientPhase.RPC) | (phase == ClientPhase.RESUME)) & none_sent
    machine.always(
        "device_idle_after_pause",
        returned.implies(all_of(Rank, lambda r: ~model.device_busy[r])),
        "D2: once the pause (or sleep) call returned, no rank's device still runs a forward's kernels",
    )
    if release.rejects_while_paused:
        machine.always(
            "rejection_cleared_after_resume",
            (phase == ClientPhase.DONE).implies(all_of(Rank, lambda r: ~model.reject_new_requests[r])),
            "R1: once resume returned, no engine rejects new requests",
        )
        late = model.options.late_requests or model.options.clients > 1  # a request that can come while paused
        if late and model.options.pause_modes & 6:  # abort or wait
            machine.sometimes("request_rejected", model.rejected, "a request sent while paused is rejected")
    if model.options.sleep_level:
        machine.sometimes(
            "slept", any_of(Rank, lambda r: model.executor_sleep[r] == 2), "an engine's executor falls asleep"
        )
        machine.always(
            "awake_after_wake_up",
            (phase == ClientPhase.DONE).implies(all_of(Rank, lambda r: model.executor_sleep[r] == 0)),
            "W1: once wake_up returned on every engine, no executor sleeps",
        )
    if model.options.partial_wake:
        machine.always(
            "forward_only_awake",
            all_of(Rank, lambda r: (model.mode[r] == Mode.FORWARD_REAL).implies(model.executor_sleep[r] <= 1)),
            "W2: an engine runs a scheduled request's forward only with all its memory awake (weights and kv_cache)",
        )
