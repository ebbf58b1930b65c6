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
- ``abort_request``: the client may abort its last request once, at any time after adding it
  (``AsyncLLM.abort`` → ``DPLBAsyncMPClient.abort_requests_async``: ABORT to that request's engine,
  behind its ADD on the same socket); a request already finished is not affected.

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
"""

from __future__ import annotations

from lockstep.models.dp_pause.context import Context, machine_map
from lockstep.spec.machine import Step
from lockstep.spec.sorts import BOOL, enum, integers
from lockstep.spec.terms import Term, all_of, disjunction, if_then_else, sequence_of

ClientPhase = enum("ClientPhase", ["REQUESTS", "PAUSE", "RPC", "RESUME", "DONE"])
PauseMode = enum("PauseMode", ["KEEP", "ABORT", "WAIT"])
PAUSE_KINDS = {"KEEP": "PAUSE", "ABORT": "PAUSE_ABORT", "WAIT": "PAUSE_WAIT"}  # the message of each mode
WINDOW_PHASES = ("PAUSE", "RPC", "RESUME", "DONE")  # bit i of late_window: late requests in that phase


def allowed_modes(parameters: object) -> list[str]:
    """The pause modes the ``pause_modes`` bit mask allows, in PauseMode order."""
    mask = parameters["pause_modes"]  # type: ignore[index]
    return [name for bit, name in enumerate(PauseMode.members) if mask & (1 << bit)]


def add_client(context: Context) -> None:
    """The client's actions (its variables are declared by ``model.build``)."""
    machine, parameters, Rank, size = context.machine, context.parameters, context.rank, context.size
    regular, late = parameters["requests"], parameters["late_requests"]
    total = regular + late
    phase, sent = context.read("client.phase"), context.read("client.requests_sent")
    view_running, view_wave = context.read("client.engines_running"), context.read("client.current_wave")
    delivered, replies = context.read("client.sent_to"), context.read("client.replies")
    from_client, first_requests = context.read("channel.client"), context.read("channel.first_request")
    from_coordinator, reports = context.read("channel.coordinator"), context.read("channel.to_coordinator")
    coordinator_running = context.read("coordinator.engines_running")
    coordinator_wave = context.read("coordinator.current_wave")

    stale, lazy = parameters["stale_publications"], parameters["lazy_first_request"]
    publications = context.read("channel.publication") if stale else None
    queued = context.read("channel.first_request_inproc") if lazy else None
    # The view is read to add requests (and, lazily, to forward their FIRST_REQ), so it is not
    # updated once none are left to add or forward.
    still_read = (sent < total) if queued is None else ((sent < total) | (queued > 0))

    @machine.action(actor="client")
    def client_read_publication() -> Step:
        """The client's stats task applies the coordinator's latest publication (wave, running).

        The coordinator publishes on every change and the client applies the last one it has, so
        reading the coordinator's current values at an arbitrary later moment is the same thing.
        With stale publications, the older ones still in flight are drained with it."""
        differs = (view_running != coordinator_running) | (view_wave != coordinator_wave)
        drained = {} if publications is None else {publications: _emptied(publications)}
        return Step(differs & still_read, {view_running: coordinator_running, view_wave: coordinator_wave, **drained})

    if publications is not None:
        @machine.action(actor="client", index=integers(0, stale - 1))
        def client_read_stale_publication(index: Term) -> Step:
            """The stats task's drain ends at a publication the coordinator has since superseded: it
            applies that one; the older ones are gone (a duplicate of it may still follow)."""
            chosen = publications[index]
            differs = (view_running != chosen.field("running")) | (view_wave != chosen.field("wave"))
            return Step((index < publications.length()) & still_read & differs, {
                view_running: chosen.field("running"),
                view_wave: chosen.field("wave"),
                publications: _dropped(publications, index, stale),
            })

    if queued is not None:
        @machine.action(actor="client")
        def client_forward_first_request() -> Step:
            """The stats task takes a FIRST_REQ from the inproc socket: engines_running = True, and
            FIRST_REQ goes to the coordinator with the view's wave now."""
            return Step(queued > 0, {
                queued: queued - 1,
                view_running: True,
                first_requests: first_requests.append(view_wave),
            })

    rounds = parameters["resumes"]
    resume_round = machine.variable("client.resume_round", integers(0, rounds - 1), 0,
                                    "resume calls already answered") if rounds > 1 else None
    window = [phase == name for bit, name in enumerate(WINDOW_PHASES) if parameters["late_window"] & (1 << bit)]
    if parameters["late_window"] & 16 and resume_round is not None:  # between the first and the second resume call
        window.append((phase == ClientPhase.RESUME) & (resume_round == 1) & all_of(Rank, lambda r: ~delivered[r]))
    late_allowed = disjunction(*window) if late and window else None

    if parameters["abort_request"]:
        last_rank = machine.variable("client.last_request_rank", Rank, 0, "the engine the last request went to")
        aborted = machine.variable("client.aborted", BOOL, False, "the client aborted its last request")

    @machine.action(actor="client", rank=Rank)
    def client_add_request(rank: Term) -> Step:
        """add_request_async: ADD stamped with the client's wave; FIRST_REQ if it believes engines idle."""
        in_order = (phase == ClientPhase.REQUESTS) & (sent < regular)
        if late_allowed is not None:
            in_order = in_order | ((sent >= regular) & (sent < total) & late_allowed)
        last = (phase == ClientPhase.REQUESTS) & (sent + 1 == regular)
        remembered = {last_rank: rank} if parameters["abort_request"] else {}
        return Step(in_order, {
            **remembered,
            from_client: from_client.set(rank, from_client[rank].append(context.message("ADD", view_wave))),
            **({first_requests: if_then_else(view_running, first_requests, first_requests.append(view_wave)), view_running: True}
               if queued is None else {queued: if_then_else(view_running, queued, queued + 1)}),
            sent: sent + 1,
            phase: if_then_else(last, ClientPhase.PAUSE, phase),
        })

    if parameters["abort_request"]:
        @machine.action(actor="client", rank=Rank)
        def client_abort_request(rank: Term) -> Step:
            """AsyncLLM.abort → abort_requests_async: ABORT to the engine the last request went to (once)."""
            return Step((sent > 0) & (last_rank == rank) & ~aborted, {
                from_client: from_client.set(rank, from_client[rank].append(context.message("ABORT"))),
                aborted: True,
            })

    modes = allowed_modes(parameters)
    pause_message: Term = context.message(PAUSE_KINDS[modes[0]])
    if len(modes) > 1:
        pause_mode = machine.variable("client.pause_mode", PauseMode, modes[0], "the mode of the pause call")

        @machine.action(actor="client", mode=PauseMode)
        def client_choose_pause_mode(mode: Term) -> Step:
            """pause_generation(mode=...): the mode is chosen before the first pause is sent."""
            none_sent = all_of(Rank, lambda r: ~delivered[r])
            choosable = disjunction(*[mode == name for name in modes[1:]])
            return Step((phase == ClientPhase.PAUSE) & none_sent & (pause_mode == modes[0]) & choosable, {pause_mode: mode})

        for name in modes[1:]:
            pause_message = if_then_else(pause_mode == name, context.message(PAUSE_KINDS[name]), pause_message)

    # With settle_before_resume, the client sends resume only once every control message already
    # sent (FIRST_REQ, START_DP_WAVE, start_wave/wave_complete) has reached its receiver's queue.
    # With 2, also every message already sent to an engine has been handled (an unhurried client).
    settle = parameters["settle_before_resume"] >= 1
    settled = first_requests.is_empty() & all_of(Rank, lambda r: from_coordinator[r].is_empty() & reports[r].is_empty())
    if queued is not None:  # a FIRST_REQ still on the inproc socket is in flight too
        settled = settled & (queued == 0)
    if parameters["settle_before_resume"] == 2:
        inbox = context.read("input_queue")
        settled = settled & all_of(Rank, lambda r: from_client[r].is_empty() & inbox[r].is_empty())

    def client_call(name: str, this: str, message: Term, following: str) -> None:
        def call(rank: Term) -> Step:
            ready = (phase == this) & ~delivered[rank]
            if this == "RESUME" and settle:
                ready = ready & settled
            return Step(ready, {
                from_client: from_client.set(rank, from_client[rank].append(message)),
                delivered: delivered.set(rank, True),
            })

        def advance() -> Step:
            updates: dict[Term, object] = {
                phase: following,
                delivered: machine_map(Rank, lambda r: False, delivered),
                replies: 0,
            }
            if this == "RESUME" and resume_round is not None:  # call resume_generation again
                again = resume_round < rounds - 1
                updates[phase] = if_then_else(again, ClientPhase.RESUME, ClientPhase.DONE)
                updates[resume_round] = if_then_else(again, resume_round + 1, resume_round)
            return Step((phase == this) & (replies == size), updates)  # type: ignore[arg-type]

        kind = name.upper() if name != "collective_rpc" else "RPC"
        machine.add_action(f"client_{name}", call, actor="client", rank=Rank, description=f"send {kind} to one engine")
        machine.add_action(f"client_{name}_returned", advance, actor="client", description=f"every engine answered {kind}")

    client_call("pause", "PAUSE", pause_message, "RPC")
    if parameters["rpc"] == 1:
        client_call("barrier", "RPC", context.message("BARRIER"), "RESUME")
    else:
        client_call("collective_rpc", "RPC", context.message("RPC"), "RESUME")
    client_call("resume", "RESUME", context.message("RESUME"), "DONE")


def _emptied(sequence: Term) -> Term:
    """The empty sequence of ``sequence``'s sort."""
    return sequence_of(sequence.sort)  # type: ignore[arg-type]


def _dropped(sequence: Term, count: Term, capacity: int) -> Term:
    """``sequence`` without its first ``count`` elements (``count`` < ``capacity``)."""
    result = sequence
    for known in range(capacity - 1, 0, -1):
        shortened = sequence
        for _ in range(known):
            shortened = shortened.tail()
        result = if_then_else(count == known, shortened, result)
    return result
