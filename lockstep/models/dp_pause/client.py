"""The dp-pause front-end client: requests, and the utility calls pause, collective_rpc or
barrier, and resume, each fanned out to every engine (vLLM v0.21.0 ``core_client.py``:
``DPAsyncMPClient.add_request_async`` and its stats task, ``DPLBAsyncMPClient.call_utility_async``;
``async_llm.py``: ``pause_generation``/``resume_generation``).

A call reaches the engines one at a time in any order (one socket per engine); its phase ends
when every engine has answered. What a client can do beyond the seed scenario comes with
parameters (defaults: the seed):
- ``pause_modes``: the modes ``pause_generation`` may be called with (bit 1 keep, 2 abort, 4 wait);
  with more than one the client chooses before it sends the first pause. Every engine gets the
  same mode (the fan-out sends one call).
- ``late_requests`` and ``late_window``: requests added after the first pause was sent, in the
  phases the window names (bit 1 while pausing, 2 while paused, 4 while resuming, 8 after resume,
  16 after the first resume call returned and before the second is sent):
  staggered with the pause deliveries, while paused, during a barrier, around resume.
- ``rpc``: 0 ``collective_rpc`` (its body's collective spans every rank's workers), 1 the test-only
  ``barrier`` utility (``dist.barrier`` on the engines' ``dp_group``).
- ``resumes``: how many times the client calls ``resume_generation``; an error reply (pause still
  in flight) and the no-op reply count as answers like a success.
- ``pause_cycles``: how many times the client pauses, runs the collective_rpc (or barrier) and resumes;
  after a cycle's resume returned it is back in the pausing phase (``client.cycle`` counts the cycles,
  the pause mode is chosen again), and late requests may come in every cycle's phases.
- ``abort_request``: the client may abort its last request once, at any time after adding it
  (``AsyncLLM.abort`` → ``DPLBAsyncMPClient.abort_requests_async``: ABORT to that request's engine,
  behind its ADD on the same socket); a request already finished is not affected. With ``free_client``,
  ``abort_request`` = n is a budget: the client sends up to n ABORTs (``client.aborts`` counts them), each
  at any time after its first add, to any engine (the engine of whichever request it aborts); the engine
  may find that request already finished (``handle_abort``'s choice ``finishes``).
- ``free_client`` = 1: no script. The client adds its ``requests`` + ``late_requests`` at any time and
  makes its calls in any order and number, one call at a time (each awaited, as ``AsyncLLM``'s caller
  does): ``pause_generation`` (or ``sleep``) at most ``pause_cycles`` times in all (``client.cycle``
  counts the calls begun), in any mode ``pause_modes`` allows (chosen anew before any call), also while
  paused; ``resume_generation`` (or ``wake_up``) at most ``resumes`` × ``pause_cycles`` times
  (``client.resume_round``), also when not paused; ``collective_rpc`` (or the barrier) any number of
  times, but only while paused (after a pause returned and before the next resume: its body's
  collective spans every rank, and a rank in a wave would not join it). ``client.phase`` is the call in
  flight, or, between calls, where the client stands: REQUESTS (never paused), RPC (paused), DONE
  (resumed). The budgets keep the waves, and so the state space, bounded; a recording's header
  gives its run's numbers (``lockstep vllm check`` replays every real recording with this client).

How the client sees the coordinator (core_client.py, identical in v0.20.0 and v0.21.0). The
stats task (``_ensure_stats_update_task`` → ``run_engine_stats_update_task``, 1188-1292) owns
``engines_running`` and ``current_wave``: it drains the publications that have arrived on its
XSUB socket and applies the last one (1267-1279), and when it takes a FIRST_REQ from the inproc
socket it sets ``engines_running = True`` and forwards ``(engine, current_wave)`` to the
coordinator (1255-1264). ``add_request_async`` (1296-1310) stamps the request with
``current_wave`` and, if ``not engines_running``, only queues FIRST_REQ on the inproc socket.
- ``stale_publications`` = n: the client may apply any of the last n publications the
  coordinator has superseded (``client_read_stale_publication``), later ones than it applied
  before, in order; 0: it reads the coordinator's current values (``client_read_publication``).
- ``lazy_first_request``: ``client_add_request`` queues FIRST_REQ without setting the view's
  ``engines_running``; ``client_forward_first_request`` (the stats task) sets it and forwards
  FIRST_REQ with the view's wave at that time. Requests added before the stats task runs each
  send a FIRST_REQ. 0: the add does both at once.

The utility calls are pairs of actions: ``client_<call>`` sends the call to one engine,
``client_<call>_returned`` ends the phase once every engine answered.
"""

from __future__ import annotations

from lockstep.models.dp_pause.state import ClientPhase, MessageKind, State, message, pause_modes
from lockstep.spec.actions import action
from lockstep.spec.machine import Step
from lockstep.spec.sorts import BOOL
from lockstep.spec.terms import Term, TermLike, all_of, any_of, disjunction, if_then_else, map_of, sequence_of

# bit i of late_window: late requests may come in that phase (bit 4: see late_allowed)
WINDOW_PHASES = (ClientPhase.PAUSE, ClientPhase.RPC, ClientPhase.RESUME, ClientPhase.DONE)


# ---------------------------------------------------------------------------------- the stats task
def view_still_read(model: State) -> Term:
    """The view is read to add requests (and, lazily, to forward their FIRST_REQ), so it is not
    updated once none are left to add or forward."""
    still = model.requests_sent < model.options.total
    return (still | (model.first_request_inproc > 0)) if model.options.lazy_first_request else still


@action(actor="client", mirrors="DPAsyncMPClient run_engine_stats_update_task (current_wave, engines_running)")
def client_read_publication(model: State) -> Step:
    """The client's stats task applies the coordinator's latest publication (wave, running).

    The coordinator publishes on every change and the client applies the last one it has, so
    reading the coordinator's current values at an arbitrary later moment is the same thing.
    With stale publications, the older ones still in flight are drained with it."""
    running, wave = model.client_running, model.client_wave
    differs = (running != model.coordinator_running) | (wave != model.coordinator_wave)
    drained = {model.publications: sequence_of(model.sorts.Publications)} if model.options.stale_publications else {}
    return Step(
        differs & view_still_read(model), {running: model.coordinator_running, wave: model.coordinator_wave, **drained}
    )


@action(
    actor="client",
    mirrors="DPAsyncMPClient run_engine_stats_update_task: the drained publications end at one "
    "the coordinator has superseded (current_wave, engines_running)",
)
def client_read_stale_publication(model: State, index: Term) -> Step:
    """The stats task's drain ends at a publication the coordinator has since superseded: it
    applies that one; the older ones are gone (a duplicate of it may still follow)."""
    running, wave, publications = model.client_running, model.client_wave, model.publications
    chosen = publications[index]
    differs = (running != chosen.field("running")) | (wave != chosen.field("wave"))
    return Step(
        (index < publications.length()) & view_still_read(model) & differs,
        {
            running: chosen.field("running"),
            wave: chosen.field("wave"),
            publications: dropped(publications, index, model.options.stale_publications),
        },
    )


@action(
    actor="client",
    mirrors="DPAsyncMPClient run_engine_stats_update_task (FIRST_REQ from the inproc socket: "
    "engines_running = True, forward (engine, current_wave) to the coordinator)",
)
def client_forward_first_request(model: State) -> Step:
    """The stats task takes a FIRST_REQ from the inproc socket: engines_running = True, and
    FIRST_REQ goes to the coordinator with the view's wave now."""
    queued = model.first_request_inproc
    return Step(
        queued > 0,
        {
            queued: queued - 1,
            model.client_running: True,
            model.first_request: model.first_request.append(model.client_wave),
        },
    )


# ------------------------------------------------------------------------------------- requests
def late_allowed(model: State) -> Term | None:
    """Whether the client may add a late request now (None: never)."""
    options, phase = model.options, model.client_phase
    window = [phase == name for bit, name in enumerate(WINDOW_PHASES) if options.late_window & (1 << bit)]
    if options.late_window & 16 and options.resumes > 1:  # between the first and the second resume call
        none_sent = all_of(model.Rank, lambda r: ~model.sent_to[r])
        window.append((phase == ClientPhase.RESUME) & (model.resume_round == 1) & none_sent)
    return disjunction(*window) if options.late_requests and window else None


@action(
    actor="client",
    mirrors="AsyncLLM.add_request → DPAsyncMPClient.add_request_async (ADD; FIRST_REQ if not engines_running)",
)
def client_add_request(model: State, rank: Term) -> Step:
    """add_request_async: ADD stamped with the client's wave; FIRST_REQ if it believes engines idle."""
    options, phase, sent, channel = model.options, model.client_phase, model.requests_sent, model.from_client
    view_running, view_wave, first_request = model.client_running, model.client_wave, model.first_request
    in_order = (phase == ClientPhase.REQUESTS) & (sent < options.requests)
    late = late_allowed(model)
    if options.free:  # any time
        in_order = sent < options.total
    elif late is not None:
        in_order = in_order | ((sent >= options.requests) & (sent < options.total) & late)
    last = (phase == ClientPhase.REQUESTS) & (sent + 1 == options.requests)
    phases = {} if options.free else {phase: if_then_else(last, ClientPhase.PAUSE, phase)}
    remembered = {model.last_request_rank: rank} if options.abort_request and not options.free else {}
    if options.lazy_first_request:  # only queued for the stats task
        queued = model.first_request_inproc
        first: dict[Term, TermLike] = {queued: if_then_else(view_running, queued, queued + 1)}
    else:
        first = {
            first_request: if_then_else(view_running, first_request, first_request.append(view_wave)),
            view_running: True,
        }
    return Step(
        in_order,
        {
            **remembered,
            channel: channel.set(rank, channel[rank].append(message(model, MessageKind.ADD, view_wave))),
            **first,
            sent: sent + 1,
            **phases,
        },
    )


@action(
    actor="client", mirrors="AsyncLLM.abort → DPLBAsyncMPClient.abort_requests_async (ABORT to the request's engine)"
)
def client_abort_request(model: State, rank: Term) -> Step:
    """AsyncLLM.abort → abort_requests_async: ABORT to the engine the last request went to (once)."""
    channel, aborted = model.from_client, model.aborted
    if model.options.free:  # any request, any time after the first add, within the budget
        return Step(
            (model.requests_sent > 0) & (aborted < model.options.abort_request),
            {channel: channel.set(rank, channel[rank].append(message(model, MessageKind.ABORT))), aborted: aborted + 1},
        )
    return Step(
        (model.requests_sent > 0) & (model.last_request_rank == rank) & ~aborted,
        {
            channel: channel.set(rank, channel[rank].append(message(model, MessageKind.ABORT))),
            aborted: True,
        },
    )


# -------------------------------------------------------------------------- the utility calls
@action(actor="client", mirrors="AsyncLLM.pause_generation(mode=...)")
def client_choose_pause_mode(model: State, mode: Term) -> Step:
    """pause_generation(mode=...): the mode is chosen before the first pause is sent."""
    modes = [chosen for chosen, _ in pause_modes(model.options)]
    none_sent = all_of(model.Rank, lambda r: ~model.sent_to[r])
    if model.options.free:  # between any two calls, another of the allowed modes
        allowed = disjunction(*[mode == name for name in modes])
        return Step(none_sent & (mode != model.pause_mode) & allowed, {model.pause_mode: mode})
    choosable = disjunction(*[mode == name for name in modes[1:]])
    return Step(
        (model.client_phase == ClientPhase.PAUSE) & none_sent & (model.pause_mode == modes[0]) & choosable,
        {model.pause_mode: mode},
    )


def pause_message(model: State) -> Term:
    """The message of the pause call: that of the chosen mode."""
    modes = pause_modes(model.options)
    result = message(model, modes[0][1])
    for mode, kind in modes[1:]:
        result = if_then_else(model.pause_mode == mode, message(model, kind), result)
    return result


def settled(model: State) -> Term:
    """Every control message already sent (FIRST_REQ, START_DP_WAVE, start_wave/wave_complete)
    has reached its receiver's queue; with settle_before_resume = 2, every message already sent
    to an engine has also been handled (an unhurried client)."""
    Rank = model.Rank
    result = model.first_request.is_empty() & all_of(
        Rank, lambda r: model.from_coordinator[r].is_empty() & model.to_coordinator[r].is_empty()
    )
    if model.options.lazy_first_request:  # a FIRST_REQ still on the inproc socket is in flight too
        result = result & (model.first_request_inproc == 0)
    if model.options.settle_before_resume == 2:
        result = result & all_of(Rank, lambda r: model.from_client[r].is_empty() & model.input_queue[r].is_empty())
    return result


def may_begin(model: State, phase: Term) -> tuple[Term, dict[Term, TermLike]]:
    """The free client may begin a call of ``phase`` now (see the module doc), and the budget counter it
    spends: no call in flight; a pause (or sleep) or a resume (or wake_up) within its budget; a
    collective_rpc (or barrier) only while paused."""
    options, none_sent = model.options, all_of(model.Rank, lambda r: ~model.sent_to[r])
    if phase.expression == ClientPhase.PAUSE.expression:
        return none_sent & (model.cycle < options.cycles), {model.cycle: model.cycle + 1}
    if phase.expression == ClientPhase.RESUME.expression:
        spent = model.resume_round
        return none_sent & (spent < options.resume_calls), {spent: spent + 1}
    return none_sent & (model.client_phase == ClientPhase.RPC), {}


def send_free(model: State, phase: Term, call: Term, rank: Term, ready: Term | None) -> Step:
    """The free client sends ``call`` to ``rank``: the next engine of the call in flight, or the first of a
    call it begins (``may_begin``)."""
    channel, sent_to = model.from_client, model.sent_to
    begin, spent = may_begin(model, phase)
    in_call = (model.client_phase == phase) & any_of(model.Rank, lambda r: sent_to[r]) & ~sent_to[rank]
    guard = in_call | begin
    updates: dict[Term, TermLike] = {
        channel: channel.set(rank, channel[rank].append(call)),
        sent_to: sent_to.set(rank, True),
        model.client_phase: phase,
    }
    updates.update({counter: if_then_else(begin, value, counter) for counter, value in spent.items()})
    return Step(guard if ready is None else guard & ready, updates)


def send(model: State, phase: Term, call: Term, rank: Term, ready: Term | None = None) -> Step:
    """``call_utility_async`` sends this phase's ``call`` to ``rank`` (once)."""
    if model.options.free:
        return send_free(model, phase, call, rank, ready)
    channel, sent_to = model.from_client, model.sent_to
    guard = (model.client_phase == phase) & ~sent_to[rank]
    return Step(
        guard if ready is None else guard & ready,
        {
            channel: channel.set(rank, channel[rank].append(call)),
            sent_to: sent_to.set(rank, True),
        },
    )


def returned(model: State, phase: Term, following: Term) -> Step:
    """Every engine answered this phase's call: the call returns and the next phase begins."""
    updates: dict[Term, TermLike] = {
        model.client_phase: following,
        model.sent_to: map_of(model.Rank, lambda r: False, BOOL),
        model.replies: 0,
    }
    return Step((model.client_phase == phase) & (model.replies == model.options.ranks), updates)


@action(
    actor="client",
    mirrors="AsyncLLM.pause_generation → pause_scheduler_async → DPLBAsyncMPClient.call_utility_async (one engine)",
)
def client_pause(model: State, rank: Term) -> Step:
    """send PAUSE to one engine"""
    return send(model, ClientPhase.PAUSE, pause_message(model), rank)


@action(
    actor="client", mirrors="DPLBAsyncMPClient.call_utility_async: every engine answered → pause_generation returns"
)
def client_pause_returned(model: State) -> Step:
    """every engine answered PAUSE"""
    return returned(model, ClientPhase.PAUSE, ClientPhase.RPC)


@action(actor="client", mirrors="AsyncLLM.collective_rpc → DPLBAsyncMPClient.call_utility_async (one engine)")
def client_collective_rpc(model: State, rank: Term) -> Step:
    """send RPC to one engine"""
    return send(model, ClientPhase.RPC, message(model, MessageKind.RPC), rank)


@action(actor="client", mirrors="DPLBAsyncMPClient.call_utility_async: every engine answered → collective_rpc returns")
def client_collective_rpc_returned(model: State) -> Step:
    """every engine answered RPC"""
    return returned(model, ClientPhase.RPC, ClientPhase.RPC if model.options.free else ClientPhase.RESUME)


@action(
    actor="client", mirrors="DPLBAsyncMPClient.call_utility_async('barrier') (one engine; vLLM's test staggers them)"
)
def client_barrier(model: State, rank: Term) -> Step:
    """send BARRIER to one engine"""
    return send(model, ClientPhase.RPC, message(model, MessageKind.BARRIER), rank)


@action(actor="client", mirrors="DPLBAsyncMPClient.call_utility_async: every engine answered the barrier")
def client_barrier_returned(model: State) -> Step:
    """every engine answered BARRIER"""
    return returned(model, ClientPhase.RPC, ClientPhase.RPC if model.options.free else ClientPhase.RESUME)


@action(
    actor="client",
    mirrors="AsyncLLM.resume_generation → resume_scheduler_async → DPLBAsyncMPClient.call_utility_async (one engine)",
)
def client_resume(model: State, rank: Term) -> Step:
    """send RESUME to one engine"""
    # With settle_before_resume, the client sends resume only once the messages in flight settled.
    return send(
        model,
        ClientPhase.RESUME,
        message(model, MessageKind.RESUME),
        rank,
        settled(model) if model.options.settle_before_resume >= 1 else None,
    )


@action(
    actor="client", mirrors="DPLBAsyncMPClient.call_utility_async: every engine answered → resume_generation returns"
)
def client_resume_returned(model: State) -> Step:
    """every engine answered RESUME"""
    options = model.options
    base = returned(model, ClientPhase.RESUME, ClientPhase.DONE)
    if (options.resumes == 1 and options.cycles == 1) or options.free:  # the free client counts when it begins
        return base
    updates = dict(base.updates)
    again: Term | None = None
    if options.resumes > 1:  # call resume_generation again
        resume_round = model.resume_round
        again = resume_round < options.resumes - 1
        updates[resume_round] = if_then_else(again, resume_round + 1, 0 if options.cycles > 1 else resume_round)
    following: Term = ClientPhase.DONE
    if options.cycles > 1:  # the next pause/resume cycle: the client may add requests, then pauses again
        cycle = model.cycle
        another = cycle < options.cycles - 1
        if again is not None:
            another = another & ~again
        updates[cycle] = if_then_else(another, cycle + 1, cycle)
        following = if_then_else(another, ClientPhase.PAUSE, ClientPhase.DONE)
        modes = pause_modes(options)
        if len(modes) > 1:  # pause_generation(mode=...) is chosen again for the next pause
            updates[model.pause_mode] = if_then_else(another, modes[0][0], model.pause_mode)
    updates[model.client_phase] = following if again is None else if_then_else(again, ClientPhase.RESUME, following)
    return Step(base.guard, updates)


def dropped(sequence: Term, count: Term, capacity: int) -> Term:
    """``sequence`` without its first ``count`` elements (``count`` < ``capacity``)."""
    result = sequence
    for known in range(capacity - 1, 0, -1):
        shortened = sequence
        for _ in range(known):
            shortened = shortened.tail()
        result = if_then_else(count == known, shortened, result)
    return result
