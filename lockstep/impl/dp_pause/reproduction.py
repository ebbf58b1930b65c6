"""From a dp-pause model counterexample to a runtime run that takes the same choices (torch-free).

``plan(header, events)`` reads a counterexample written by ``lockstep check`` (or a fuzz run) and
returns a ``Reproduction``: the run's bounds (ranks, requests, sync_interval from the header), the
scripted choices, and per rank the schedule of ``ScheduledArrivals`` (scenario
``counterexample``):

- the client's program: its events in order (requests with their ranks, late ones included, each
  call sent to one engine, a call returning after every answer, a publication read; resume as
  many times as the counterexample calls it), which the runtime client takes one by one;
- the coordinator's: whose message it handles next (the client's FIRST_REQ or a rank's report),
  as its ``coordinator_first_request``/``coordinator_report`` events have it;
- each rank's arrivals: which source (``client`` or ``coordinator``) each ``arrive_from_*`` event
  takes, with no delay;
- each rank's schedule: how many of its core events (every rank event but arrivals) precede each
  arrival, and how many arrivals precede each core event. The runtime holds arrivals and the core
  thread to that order, so each rank sees its queue as the counterexample's rank did; what ranks
  do to each other travels through real messages and collectives. Past the counterexample's end
  nothing is held and the seed decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lockstep.impl.choices import Choice
from lockstep.impl.protocols import Reproduction

ARRIVALS = {"arrive_from_client": "client", "arrive_from_coordinator": "coordinator"}
RUNTIME_CLIENT = {"request_steps": 1, "pause_modes": 1, "rpc": 0, "clients": 1}
CLIENT_EVENTS = (
    "client_add_request",
    "client_read_publication",
    "client_pause",
    "client_pause_returned",
    "client_collective_rpc",
    "client_collective_rpc_returned",
    "client_resume",
    "client_resume_returned",
)


def plan(header: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> Reproduction:
    parameters = header["parameters"]
    ranks, requests = int(parameters["ranks"]), int(parameters["requests"])
    unsupported = [
        f"{name}={parameters[name]}"
        for name, value in RUNTIME_CLIENT.items()
        if name in parameters and int(parameters[name]) != value
    ]
    if unsupported:
        raise ValueError(
            "the dp-pause runtime has one front-end client, its requests take one forward each, its client pauses with "
            "mode keep and runs collective_rpc (not the test-only barrier); this counterexample's "
            "instance has " + ", ".join(unsupported)
        )
    choices: list[Choice] = []
    program = [
        {"action": event["action"], "args": dict(event.get("args", {}))}
        for event in events
        if event["actor"] == "client" and event["action"] in CLIENT_EVENTS
    ]
    before_arrival: dict[int, list[int]] = {rank: [] for rank in range(ranks)}
    before_event: dict[int, list[int]] = {rank: [] for rank in range(ranks)}
    for event in events:
        actor, action, args = str(event["actor"]), str(event["action"]), event.get("args", {})
        if action == "coordinator_first_request":
            choices.append(Choice("coordinator", "arrival", (), "client"))
        elif action == "coordinator_report":
            choices.append(Choice("coordinator", "arrival", (), f"rank:{args['rank']}"))
        elif actor.startswith("rank:") and action in ARRIVALS:
            rank = int(actor.partition(":")[2])
            choices.append(Choice(actor, "arrival", (), ARRIVALS[action]))
            choices.append(Choice(actor, "delay", (), "0"))
            before_arrival[rank].append(len(before_event[rank]))
        elif actor.startswith("rank:") and action not in ("enter", "complete"):
            rank = int(actor.partition(":")[2])
            before_event[rank].append(len(before_arrival[rank]))
    schedule = {
        f"rank:{rank}": {"before_arrival": before_arrival[rank], "before_event": before_event[rank]}
        for rank in range(ranks)
    }
    model = {name: value for name, value in parameters.items() if name != "property"}
    model["settle_before_resume"] = 0  # the runtime's client never waits for messages to settle
    return Reproduction(
        scenario="counterexample",
        ranks=ranks,
        choices=choices,
        extra={
            "requests": requests,
            "sync_interval": int(parameters["sync_interval"]),
            "schedule": schedule,
            "client_program": program,
            "model_parameters": model,
            "late_requests": int(parameters.get("late_requests", 0)),
            "resumes": int(parameters.get("resumes", 1)),
        },
    )
