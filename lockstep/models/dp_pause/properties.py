"""The properties of the dp-pause model: protocols.md P2(e) S1–S6 as invariants, L1 and L2 as
bounded responses, and the final states (the built-ins add no_hang and no_collective_mismatch).

- S1 ``quiescent_during_rpc``: no rank is in a forward while a rank runs the collective_rpc or
  barrier issued after every pause returned (P2(e)'s "equivalently" form).
- S2 ``forward_counts_agree``: ranks blocked in the same forward all-reduce have counted the same
  forwards since their last engine all-reduce (with the built-in no_collective_mismatch: the k-th
  op on every communicator is the same op on every rank).
- S3 ``paused_ranks_agree``, ``sync_decisions_agree`` (two-phase variants): ranks blocked in the
  same engine all-reduce, and idle ranks, agree on ``ignore_start_dp_wave``.
- S4 ``resume_after_consensus`` (two-phase variants): no rank enters the resume barrier while any
  rank still has a pause in flight.
- S5 ``pause_mode_semantics``: keep never runs a real forward on a PAUSED_ALL rank; once every
  pause returned (abort, wait) no rank holds a running request.
- S6 ``coordinator_idle_when_quiet``: when everything has settled, the coordinator does not think
  a wave runs.
- L1 ``pause_resolves``: once every rank has handled its pause, every pause future resolves within
  ``response_bound`` steps. L2 ``resume_serves``: once every rank has handled resume, every
  request an engine holds is served within ``response_bound`` steps. Steps are the model's steps
  (every actor's), so the bound covers the interleaving. They are checked with
  ``bounded_liveness = 1``; ``response_bound`` defaults to ``model.response_bound_default``
  ((2·ranks + 1)·(2·sync_interval + 1) + 8 + 2·(requests + late_requests): 25 at the seed's sizes);
  a later release adds ``releases.response_steps`` (its extra actors' steps, none of them a wait).
- L1 ``pause_returns`` and L2 ``resume_eventually_serves`` (with ``fair_liveness = 1``): the same
  responses as ``leads_to`` under weak fairness of every engine, coordinator and communicator
  action (message delivery and stepping; the client may stop at any time). L1 is triggered once
  the client has sent pause to every rank (delivery is fair, so "handled" follows), L2 once it has
  sent resume to every rank and an engine holds a request. A violation is a lasso: a fair cycle
  (or a dead end) on which the pause call never returns, or a request is never served.
"""

from __future__ import annotations

from lockstep.models.dp_pause.engine import has_work
from lockstep.models.dp_pause.releases import response_steps
from lockstep.models.dp_pause.state import ClientPhase, Mode, PauseState, State, Variant
from lockstep.spec.machine import Machine
from lockstep.spec.terms import Term, all_of, any_of, conjunction


def add_properties(machine: Machine, model: State, variant: Variant) -> None:
    """The final states, S1–S6, the witness ``resumed`` and (as the options ask) L1 and L2."""
    machine.set_final(client_may_stop(model) & no_first_request(model) & quiet(model))
    add_safety(machine, model, variant)
    machine.sometimes("resumed", (model.client_phase == ClientPhase.DONE), "the scenario can run to its end")
    if model.options.bounded_liveness:
        add_bounded_liveness(machine, model)
    if model.options.fair_liveness:
        add_fair_liveness(machine, model)


def client_may_stop(model: State) -> Term:
    """The client's script has run to its end (resume returned); the free client may stop between any two
    calls."""
    if model.options.free:
        return all_of(model.Rank, lambda r: ~model.sent_to[r])
    return model.client_phase == ClientPhase.DONE


def no_first_request(model: State) -> Term:
    """No FIRST_REQ in flight to the coordinator (lazy_first_request: none queued for the stats task either)."""
    result = model.first_request.is_empty()
    if model.options.lazy_first_request:
        result = result & (model.first_request_inproc == 0)
    return result


def in_forward(model: State, rank: Term) -> Term:
    return (model.mode[rank] == Mode.FORWARD_REAL) | (model.mode[rank] == Mode.FORWARD_DUMMY)


def quiet(model: State) -> Term:
    """Every engine idle at the top of its loop with no message on its way to or from it."""
    second = model.second  # clients = 2: the second client's socket too
    return all_of(
        model.Rank,
        lambda r: conjunction(
            model.mode[r] == Mode.TOP,
            model.input_queue[r].is_empty(),
            model.from_client[r].is_empty(),
            *(() if second is None else (second.channel[r].is_empty(),)),
            model.from_coordinator[r].is_empty(),
            model.to_coordinator[r].is_empty(),
            ~has_work(model, r),
        ),
    )


def add_safety(machine: Machine, model: State, variant: Variant) -> None:
    """S1–S6 as invariants."""
    Rank, mode, counter = model.Rank, model.mode, model.step_counter
    worker_queue, phase = model.worker_dp.queue, model.client_phase
    machine.always(
        "quiescent_during_rpc",
        all_of(
            Rank,
            lambda r: ((mode[r] == Mode.RPC) | (mode[r] == Mode.BARRIER)).implies(
                all_of(Rank, lambda other: ~in_forward(model, other))
            ),
        ),
        "S1: no rank is in a forward while a rank runs the collective_rpc (or barrier) issued after every pause "
        "returned",
    )
    machine.always(
        "forward_counts_agree",
        all_of(
            Rank,
            lambda r: all_of(
                Rank,
                lambda other: (
                    in_forward(model, r)
                    & in_forward(model, other)
                    & ~worker_queue[r].is_empty()
                    & ~worker_queue[other].is_empty()
                ).implies(counter[r] == counter[other]),
            ),
        ),
        "S2: ranks in the same forward all-reduce have run the same forwards since the last engine all-reduce",
    )
    if variant.fixed:
        add_two_phase_safety(machine, model)
    machine.always(
        "pause_mode_semantics",
        pause_mode_semantics(model),
        "S5: keep runs no request while paused; abort and wait leave no running request once every pause returned",
    )
    machine.always(
        "coordinator_idle_when_quiet",
        (
            quiet(model)
            & no_first_request(model)
            & (phase == ClientPhase.DONE)
            & (model.requests_sent < model.options.total)
            & bool(model.options.late_window & 8)
        ).implies(~model.coordinator_running),
        "S6: once everything has settled, while the client may still add a request, the coordinator does not "
        "believe a wave runs (it would send no START_DP_WAVE for that request)",
    )


def add_two_phase_safety(machine: Machine, model: State) -> None:
    """S3 and S4, about the two-phase pause's ignore_start_dp_wave and pending_pause."""
    Rank, mode, counter, running = model.Rank, model.mode, model.step_counter, model.engines_running
    ignore, pending, engine_queue = model.ignore_start_dp_wave, model.pending_pause, model.engine_dp.queue
    machine.always(
        "paused_ranks_agree",
        all_of(
            Rank,
            lambda r: all_of(
                Rank,
                lambda other: (
                    (mode[r] == Mode.TOP)
                    & (mode[other] == Mode.TOP)
                    & (counter[r] == 0)
                    & (counter[other] == 0)
                    & ~running[r]
                    & ~running[other]
                ).implies(ignore[r] == ignore[other]),
            ),
        ),
        "S3: idle ranks agree on ignore_start_dp_wave",
    )
    machine.always(
        "sync_decisions_agree",
        all_of(
            Rank,
            lambda r: all_of(
                Rank,
                lambda other: (
                    (mode[r] == Mode.SYNC)
                    & (mode[other] == Mode.SYNC)
                    & ~engine_queue[r].is_empty()
                    & ~engine_queue[other].is_empty()
                ).implies(ignore[r] == ignore[other]),
            ),
        ),
        "S3: ranks in the same engine all-reduce entered it with the same ignore_start_dp_wave",
    )
    machine.always(
        "resume_after_consensus",
        all_of(Rank, lambda r: (mode[r] == Mode.RESUME_BARRIER).implies(all_of(Rank, lambda other: ~pending[other]))),
        "S4: no rank resumes while a pause is still in flight on any rank",
    )


def pause_mode_semantics(model: State) -> Term:
    """S5: keep never runs a real forward on a PAUSED_ALL rank; once every pause returned, no
    PAUSED_NEW rank holds a running request (request_steps = 2)."""
    Rank, pause_state = model.Rank, model.pause_state
    terms = []
    if model.options.two_step:
        admitted = model.running_requests
        terms.append(
            (model.client_phase == ClientPhase.RPC).implies(
                all_of(Rank, lambda r: (pause_state[r] != PauseState.PAUSED_NEW) | (admitted[r] == 0))
            )
        )
    terms.append(
        all_of(Rank, lambda r: (model.mode[r] == Mode.FORWARD_REAL).implies(pause_state[r] != PauseState.PAUSED_ALL))
    )
    return conjunction(*terms)


def add_bounded_liveness(machine: Machine, model: State) -> None:
    """L1 and L2 as responses within ``response_bound`` steps."""
    Rank, phase, pause_state, requests = model.Rank, model.client_phase, model.pause_state, model.requests
    bound = model.options.response_bound + response_steps(model.release, model.options.ranks)  # later releases
    machine.respond_within(
        "pause_resolves",
        (phase == ClientPhase.PAUSE) & all_of(Rank, lambda r: pause_state[r] != PauseState.UNPAUSED),
        phase != ClientPhase.PAUSE,
        bound,
        "L1: once every rank has handled pause, every pause future resolves",
    )
    machine.respond_within(
        "resume_serves",
        ((phase == ClientPhase.RESUME) | (phase == ClientPhase.DONE))
        & all_of(Rank, lambda r: pause_state[r] == PauseState.UNPAUSED)
        & any_of(Rank, lambda r: requests[r] > 0),
        all_of(Rank, lambda r: requests[r] == 0),
        bound,
        "L2: once every rank has handled resume, every request an engine holds is served",
    )


def add_fair_liveness(machine: Machine, model: State) -> None:
    """L1 and L2 as ``leads_to`` under weak fairness of every action but the client's."""
    Rank, phase, sent_to, requests = model.Rank, model.client_phase, model.sent_to, model.requests
    fair = tuple(action.name for action in machine.actions if not action.actor.startswith("client")) + tuple(
        f"{group.name}.complete" for group in machine.communicators if hasattr(group, "name")
    )
    sent_everywhere = all_of(Rank, lambda r: sent_to[r])
    machine.leads_to(
        "pause_returns",
        (phase == ClientPhase.PAUSE) & sent_everywhere,
        (phase != ClientPhase.PAUSE) | (model.replies == model.options.ranks),
        "L1 (fair): once pause was sent to every rank, every rank answers it",
        fair=fair,
    )
    machine.leads_to(
        "resume_eventually_serves",
        (((phase == ClientPhase.RESUME) & sent_everywhere) | (phase == ClientPhase.DONE))
        & any_of(Rank, lambda r: requests[r] > 0),
        all_of(Rank, lambda r: requests[r] == 0),
        "L2 (fair): once resume was sent to every rank, every request an engine holds is served",
        fair=fair,
    )
