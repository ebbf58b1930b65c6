"""From a cudagraph-pp model path to a runtime run that takes the same choices (torch-free).

``plan(header, events)`` reads a counterexample (or a ``test-runtime`` goal path) and returns a
``Reproduction``: the runtime scenario of the header's ``cudagraph_mode`` (the runtime's scenarios
are the four modes), its ranks, the model's sizes as protocol settings (``steps``,
``largest_capture_size``, ``max_num_tokens``, ``max_num_reqs``, ``decode_query_len``, kept in
``RunConfig.extra``), and the engine's scripted choices: per ``schedule(tokens, requests, decode)``
event, ``schedule.tokens`` and ``schedule.requests``, and ``schedule.decode`` where the runtime asks
it (``decode_query_len`` 2; with 1 a batch is a uniform decode exactly when tokens equal requests,
as the model's guard requires). Rank 0 draws every step's batch before the first step and
broadcasts them, so the path's schedules fix the whole run; what the stages do with a batch
(capture sizes, padding, copies, p2p) follows from it. Steps the path does not reach are drawn
from the seed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lockstep.impl.choices import Choice
from lockstep.impl.protocols import Reproduction
from lockstep.models.cudagraph_pp.model import PROTOCOL

ENGINE = "engine"
SIZES = ("steps", "largest_capture_size", "max_num_tokens", "max_num_reqs", "decode_query_len")


def plan(header: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> Reproduction:
    from lockstep.impl.cudagraph_pp import SCENARIOS

    parameters = header["parameters"]
    values = {
        parameter.name: int(parameters.get(parameter.name, parameter.default)) for parameter in PROTOCOL.parameters
    }
    if "max_num_tokens" not in parameters:
        values["max_num_tokens"] = values["largest_capture_size"]
    scenario = {mode: name for name, mode in SCENARIOS.items()}.get(values["cudagraph_mode"])
    if scenario is None:
        raise ValueError(f"the runtime has no scenario for cudagraph_mode={values['cudagraph_mode']}")
    choices = []
    for event in events:
        if event["actor"] != ENGINE or event["action"] != "schedule":
            continue
        args = event.get("args", {})
        missing = [name for name in ("tokens", "requests", "decode") if name not in args]
        if missing:
            raise ValueError(f"event {event.get('index')}: schedule without its arguments {', '.join(missing)}")
        tokens, requests, decode = int(args["tokens"]), int(args["requests"]), bool(args["decode"])
        choices.append(Choice(ENGINE, "schedule.tokens", (), str(tokens)))
        choices.append(Choice(ENGINE, "schedule.requests", (), str(requests)))
        if values["decode_query_len"] != 1:
            choices.append(Choice(ENGINE, "schedule.decode", (), "true" if decode else "false"))
        elif decode != (tokens == requests):
            raise ValueError(
                f"event {event.get('index')}: schedule(tokens={tokens}, requests={requests}, decode={decode}): "
                "with decode_query_len 1 the runtime's batch is a uniform decode exactly when tokens == requests"
            )
    return Reproduction(
        scenario=scenario, ranks=values["ranks"], choices=choices, extra={name: values[name] for name in SIZES}
    )
