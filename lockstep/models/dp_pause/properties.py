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
  ((2·ranks + 1)·(2·sync_interval + 1) + 8 + 2·(requests + late_requests): 25 at the seed's sizes).
- L1 ``pause_returns`` and L2 ``resume_eventually_serves`` (with ``fair_liveness = 1``): the same
  responses as ``leads_to`` under weak fairness of every engine, coordinator and communicator
  action (message delivery and stepping; the client may stop at any time). L1 is triggered once
  the client has sent pause to every rank (delivery is fair, so "handled" follows), L2 once it has
  sent resume to every rank and an engine holds a request. A violation is a lasso: a fair cycle
  (or a dead end) on which the pause call never returns, or a request is never served.
"""

from __future__ import annotations

from lockstep.models.dp_pause.client import ClientPhase
from lockstep.models.dp_pause.context import Context
from lockstep.spec.terms import Term, all_of, any_of, conjunction


def add_properties(context: Context) -> None:
    machine, Rank, parameters = context.machine, context.rank, context.parameters
    mode, inbox, requests = context.read("mode"), context.read("input_queue"), context.read("requests")
    from_client, from_coordinator = context.read("channel.client"), context.read("channel.coordinator")
    reports, first_requests = context.read("channel.to_coordinator"), context.read("channel.first_request")
    phase, counter, pause_state = context.read("client.phase"), context.read("step_counter"), context.read("pause_state")
    running, worker_queue = context.read("engines_running"), context.read("worker_dp.queue")
    engine_queue = context.read("engine_dp.queue")
    total = parameters["requests"] + parameters["late_requests"]
    no_first_request = first_requests.is_empty()  # none in flight to the coordinator
    if context.has("channel.first_request_inproc"):  # lazy_first_request: none queued for the stats task either
        no_first_request = no_first_request & (context.read("channel.first_request_inproc") == 0)

    def in_forward(rank: Term) -> Term:
        return (mode[rank] == "FORWARD_REAL") | (mode[rank] == "FORWARD_DUMMY")

    quiet = all_of(Rank, lambda r: conjunction(
        mode[r] == "TOP", inbox[r].is_empty(), from_client[r].is_empty(), from_coordinator[r].is_empty(),
        reports[r].is_empty(), ~context.has_work(r)))
    machine.set_final((phase == ClientPhase.DONE) & no_first_request & quiet)

    # S1
    machine.always(
        "quiescent_during_rpc",
        all_of(Rank, lambda r: ((mode[r] == "RPC") | (mode[r] == "BARRIER")).implies(all_of(Rank, lambda other: ~in_forward(other)))),
        "S1: no rank is in a forward while a rank runs the collective_rpc (or barrier) issued after every pause returned",
    )
    # S2
    machine.always(
        "forward_counts_agree",
        all_of(Rank, lambda r: all_of(Rank, lambda other: (in_forward(r) & in_forward(other) & ~worker_queue[r].is_empty()
               & ~worker_queue[other].is_empty()).implies(counter[r] == counter[other]))),
        "S2: ranks in the same forward all-reduce have run the same forwards since the last engine all-reduce",
    )
    if context.fixed:
        ignore, pending = context.read("ignore_start_dp_wave"), context.read("pending_pause")
        # S3
        machine.always(
            "paused_ranks_agree",
            all_of(Rank, lambda r: all_of(Rank, lambda other: ((mode[r] == "TOP") & (mode[other] == "TOP")
                   & (counter[r] == 0) & (counter[other] == 0) & ~running[r] & ~running[other]).implies(ignore[r] == ignore[other]))),
            "S3: idle ranks agree on ignore_start_dp_wave",
        )
        machine.always(
            "sync_decisions_agree",
            all_of(Rank, lambda r: all_of(Rank, lambda other: ((mode[r] == "SYNC") & (mode[other] == "SYNC")
                   & ~engine_queue[r].is_empty() & ~engine_queue[other].is_empty()).implies(ignore[r] == ignore[other]))),
            "S3: ranks in the same engine all-reduce entered it with the same ignore_start_dp_wave",
        )
        # S4
        machine.always(
            "resume_after_consensus",
            all_of(Rank, lambda r: (mode[r] == "RESUME_BARRIER").implies(all_of(Rank, lambda other: ~pending[other]))),
            "S4: no rank resumes while a pause is still in flight on any rank",
        )
    # S5
    mode_terms = []
    if context.has("running_requests"):
        admitted = context.read("running_requests")
        mode_terms.append((phase == ClientPhase.RPC).implies(all_of(Rank, lambda r: (pause_state[r] != "PAUSED_NEW")
                          | (admitted[r] == 0))))
    mode_terms.append(all_of(Rank, lambda r: (mode[r] == "FORWARD_REAL").implies(pause_state[r] != "PAUSED_ALL")))
    machine.always(
        "pause_mode_semantics",
        conjunction(*mode_terms),
        "S5: keep runs no request while paused; abort and wait leave no running request once every pause returned",
    )
    # S6
    machine.always(
        "coordinator_idle_when_quiet",
        (quiet & no_first_request & (phase == ClientPhase.DONE) & (context.read("client.requests_sent") < total) & bool(parameters["late_window"] & 8))
        .implies(~context.read("coordinator.engines_running")),
        "S6: once everything has settled, while the client may still add a request, the coordinator does not "
        "believe a wave runs (it would send no START_DP_WAVE for that request)",
    )
    machine.sometimes("resumed", (phase == ClientPhase.DONE), "the scenario can run to its end")

    bound = parameters["response_bound"]
    if parameters["bounded_liveness"]:
        machine.respond_within(
            "pause_resolves",
            (phase == ClientPhase.PAUSE) & all_of(Rank, lambda r: pause_state[r] != "UNPAUSED"),
            phase != ClientPhase.PAUSE,
            bound,
            "L1: once every rank has handled pause, every pause future resolves",
        )
        machine.respond_within(
            "resume_serves",
            ((phase == ClientPhase.RESUME) | (phase == ClientPhase.DONE)) & all_of(Rank, lambda r: pause_state[r] == "UNPAUSED")
            & any_of(Rank, lambda r: requests[r] > 0),
            all_of(Rank, lambda r: requests[r] == 0),
            bound,
            "L2: once every rank has handled resume, every request an engine holds is served",
        )
    if parameters["fair_liveness"]:
        add_fair_liveness(context)


def add_fair_liveness(context: Context) -> None:
    """L1 and L2 as ``leads_to`` under weak fairness of every action but the client's."""
    machine, Rank, size = context.machine, context.rank, context.size
    phase, sent_to, replies = context.read("client.phase"), context.read("client.sent_to"), context.read("client.replies")
    requests = context.read("requests")
    fair = tuple(action.name for action in machine.actions if not action.actor.startswith("client")) + tuple(
        f"{group.name}.complete" for group in machine.communicators if hasattr(group, "name"))
    sent_everywhere = all_of(Rank, lambda r: sent_to[r])
    machine.leads_to(
        "pause_returns",
        (phase == ClientPhase.PAUSE) & sent_everywhere,
        (phase != ClientPhase.PAUSE) | (replies == size),
        "L1 (fair): once pause was sent to every rank, every rank answers it",
        fair=fair,
    )
    machine.leads_to(
        "resume_eventually_serves",
        (((phase == ClientPhase.RESUME) & sent_everywhere) | (phase == ClientPhase.DONE)) & any_of(Rank, lambda r: requests[r] > 0),
        all_of(Rank, lambda r: requests[r] == 0),
        "L2 (fair): once resume was sent to every rank, every request an engine holds is served",
        fair=fair,
    )
