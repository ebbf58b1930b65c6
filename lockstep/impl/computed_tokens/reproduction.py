"""From a computed-tokens model counterexample to a runtime run that takes the same choices (torch-free).

``plan(header, events)`` reads a counterexample written by ``lockstep check`` (or a fuzz run) and
returns a ``Reproduction``: the model's parameters from the header (every one, kept in
``RunConfig.extra["model_parameters"]``), the scenario of the counterexample's instance (``seed``
when the instance is not one of the runtime's scenarios), its ranks, and one scripted choice per
parameter of each ``sample_tokens`` event: the last rank's ``accepted`` (``accepted_Q`` with several
requests) in the model's parameter order. Nothing else needs holding: chunking and draft counts
follow from the scheduler's state (the model's ``schedule`` has no parameters), and which of the
scheduler and the ranks acts first changes no value any actor records, so each actor's events
come out as in the counterexample; past its end the seed decides the acceptances.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lockstep.impl.choices import Choice
from lockstep.impl.protocols import Reproduction
from lockstep.models.computed_tokens.model import PROTOCOL


def accepted_names(requests: int) -> list[str]:
    """The model's ``sample_tokens`` parameters, which are also the runtime's choice points."""
    return ["accepted"] if requests == 1 else [f"accepted_{request}" for request in range(requests)]


def plan(header: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> Reproduction:
    parameters = header["parameters"]
    missing = [parameter.name for parameter in PROTOCOL.parameters if parameter.name not in parameters]
    if missing:
        raise ValueError(f"the header lacks the model parameters {', '.join(missing)}")
    values = {parameter.name: int(parameters[parameter.name]) for parameter in PROTOCOL.parameters}
    ranks = values["ranks"]
    names = accepted_names(values["requests"])
    choices = []
    for event in events:
        if event["action"] != "sample_tokens":
            continue
        for name in names:
            if name not in event["args"]:
                raise ValueError(f"event {event.get('index')}: sample_tokens without its argument {name}")
            choices.append(Choice(f"rank:{ranks - 1}", name, (), str(int(event["args"][name]))))
    scenarios = {instance.name: instance for instance in PROTOCOL.instances}
    scenario = str(header.get("instance"))
    if scenario not in scenarios or scenarios[scenario].parameters.get("ranks", ranks) != ranks:
        scenario = "seed"
    return Reproduction(scenario=scenario, ranks=ranks, choices=choices, extra={"model_parameters": values})
