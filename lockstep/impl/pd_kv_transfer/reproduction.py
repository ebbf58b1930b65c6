"""From a pd-kv-transfer model counterexample to a runtime run that takes the same steps in the
same order (torch-free).

``plan(header, events)`` reads a counterexample written by ``lockstep check`` (or a goal path of
``test-runtime``) and returns a ``Reproduction``: the model's parameters from the header (every
one, in ``RunConfig.extra["model_parameters"]``), the scenario of its instance (``seed`` when the
instance is not one of the runtime's scenarios), and one scripted choice per event, made by the
engine whose actor took it (``prefill-*`` and ``network``: rank 0; ``decode-*``: rank 1), whose
option is the event's action and arguments (``option``). ``extra["order"]`` lists the rank of
each event: the engines take their scripted steps in that global order (``link.Link``), so every
interleaving of the model's path, a lease expiring under a read included, happens for real. The
first choice of rank 0 is the abort split (point ``prefill_aborts``: the path's aborts on P; D
may inject the rest). Past the script the seed decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lockstep.impl.choices import Choice
from lockstep.impl.pd_kv_transfer.scenario import SCENARIOS
from lockstep.impl.protocols import Reproduction
from lockstep.models.pd_kv_transfer.model import PROTOCOL

PREFILL, DECODE = 0, 1
ACTION = "action"  # the choice point of every engine step
SPLIT = "prefill_aborts"  # the choice point of the abort split (rank 0, before the first step)


def option(action: str, **arguments: object) -> str:
    """An engine step as a choice option: ``decode_read_done request=0 ok=true``."""
    words = [action]
    for name, value in arguments.items():
        words.append(f"{name}={str(value).lower() if isinstance(value, bool) else value}")
    return " ".join(words)


def rank_of(actor: str) -> int:
    """The engine that takes the steps of a model actor."""
    if actor.startswith("prefill-") or actor == "network":
        return PREFILL
    if actor.startswith("decode-"):
        return DECODE
    raise ValueError(f"no engine takes the steps of actor {actor!r}")


def plan(header: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> Reproduction:
    parameters = header["parameters"]
    missing = [parameter.name for parameter in PROTOCOL.parameters if parameter.name not in parameters]
    if missing:
        raise ValueError(f"the header lacks the model parameters {', '.join(missing)}")
    values = {parameter.name: int(parameters[parameter.name]) for parameter in PROTOCOL.parameters}
    order: list[int] = []
    steps: list[Choice] = []
    for event in events:
        rank = rank_of(str(event["actor"]))
        order.append(rank)
        steps.append(Choice(f"rank:{rank}", ACTION, (), option(str(event["action"]), **dict(event["args"]))))
    choices = []
    if values["aborts"]:
        on_prefill = sum(event["action"] == "prefill_abort" for event in events)
        choices.append(Choice(f"rank:{PREFILL}", SPLIT, (), str(on_prefill)))
    choices.extend(steps)
    scenario = str(header.get("instance"))
    if scenario not in SCENARIOS:
        scenario = "seed"
    return Reproduction(scenario=scenario, ranks=2, choices=choices, extra={"model_parameters": values, "order": order})
