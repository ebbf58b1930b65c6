"""From a pp-broadcast model counterexample to a runtime run that takes the same choices (torch-free).

``plan(header, events)`` reads a counterexample written by ``lockstep check`` (or a fuzz run) and
returns a ``Reproduction``: the counterexample's ranks and workload (``chunks``, ``decodes``,
``requests``, ``gaps`` from the header, kept in ``RunConfig.extra`` so they hold whatever the
instance, ``--set`` overrides included; the scenario is the instance's name when the runtime has
one, else ``seed``) and the engine's scripted choices:

- ``chunk_tokens``: the size in tokens of every prompt chunk, asked when the engine starts. The
  model counts a chunk as one piece, whatever its size, so each chunk gets the setting's mean.
- ``leave_out``: the model's one action parameter, ``schedule(leave_out)``, one choice per
  ``schedule`` event where the runtime's scheduler asks it (a gap left and more than one unfinished
  request, as the model's guard requires for any value but -1). The plan follows the scheduler's
  ``num_computed_tokens`` through the events to know where that is.

A counterexample with an empty step (``schedule_empty``, the model's ``empty_steps``) is refused:
the runtime's engine never schedules a step with no scheduled tokens.

Nothing else needs holding, so the plan needs no scenario of its own. A step's rows follow from
the ``leave_out`` choices alone (``num_computed_tokens`` advances at schedule time, whatever
replies came back), each rank handles the engine's RPCs in the one order the executor sends them
and decides every skip, mask and mapping from its own copy of the rows; the only freedom left is
how the actors interleave, and it changes no value any actor records. So each actor's events come
out as in the counterexample, and the runtime's trace, replayed against the model of the
counterexample's variant, shows the same failure: ``skip-disagree`` hangs for real (one rank in
the broadcast, the other past it), pre-fix rank 0's stream waits on the broadcast of an
all-chunked step (``no_false_dependency``). Past the counterexample's end the seed decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lockstep.impl.choices import Choice
from lockstep.impl.protocols import Reproduction
from lockstep.models.pp_broadcast.model import PROTOCOL

ENGINE = "engine"
WORKLOAD = ("chunks", "decodes", "requests", "gaps")
RUNTIME_SCENARIOS = ("seed", "chunks-then-decode", "decode-gap")  # the runtime's scenarios named after instances


def chunk_tokens() -> str:
    """The token count every chunk gets: the ``chunk_tokens`` setting's default (always an option)."""
    from lockstep.impl.pp_broadcast import RUNTIME

    return str(RUNTIME.settings["chunk_tokens"].default)


def leave_out_choices(values: Mapping[str, int], events: Sequence[Mapping[str, Any]]) -> list[Choice]:
    """One ``leave_out`` choice per ``schedule`` event at which the runtime's scheduler asks it."""
    prompts = [values["chunks"]] + [1] * (values["requests"] - 1)
    lengths = [prompt + values["decodes"] for prompt in prompts]
    computed = [0] * values["requests"]
    gaps_left = values["gaps"]
    choices = []
    for event in events:
        if event["actor"] != ENGINE or event["action"] != "schedule":
            continue
        if "leave_out" not in event.get("args", {}):
            raise ValueError(f"event {event.get('index')}: schedule without its argument leave_out")
        leave_out = int(event["args"]["leave_out"])
        waiting = [request for request in range(values["requests"]) if computed[request] < lengths[request]]
        if gaps_left > 0 and len(waiting) > 1:  # engine.Engine.schedule asks here, and only here
            choices.append(Choice(ENGINE, "leave_out", ("-1", *map(str, waiting)), str(leave_out)))
        elif leave_out >= 0:
            raise ValueError(
                f"event {event.get('index')}: schedule leaves request {leave_out} out with "
                f"{gaps_left} gaps left and unfinished requests {waiting}"
            )
        if leave_out >= 0 and leave_out not in waiting:
            raise ValueError(f"event {event.get('index')}: schedule leaves out request {leave_out}, which is finished")
        for request in waiting:
            computed[request] += request != leave_out
        gaps_left -= leave_out >= 0
    return choices


def plan(header: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> Reproduction:
    parameters = header["parameters"]
    missing = [parameter.name for parameter in PROTOCOL.parameters if parameter.name not in parameters]
    if missing:
        raise ValueError(f"the header lacks the model parameters {', '.join(missing)}")
    values = {parameter.name: int(parameters[parameter.name]) for parameter in PROTOCOL.parameters}
    empty = next((event for event in events if event.get("action") == "schedule_empty"), None)
    if empty is not None:
        raise ValueError(
            f"event {empty.get('index')}: schedule_empty: the runtime's engine schedules no empty steps "
            "(the model's empty_steps), so it cannot take this counterexample's choices"
        )
    prompt_chunks = values["chunks"] + values["requests"] - 1
    choices = [Choice(ENGINE, "chunk_tokens", (), chunk_tokens()) for _ in range(prompt_chunks)]
    choices += leave_out_choices(values, events)
    instance = str(header.get("instance"))
    scenario = instance if instance in RUNTIME_SCENARIOS else "seed"
    return Reproduction(
        scenario=scenario, ranks=values["ranks"], choices=choices, extra={name: values[name] for name in WORKLOAD}
    )
