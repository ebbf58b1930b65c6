"""What every computed-tokens process records in its trace header, and its per-process setup.

``instance_parameters`` gives every parameter the model declares: the model instance the scenario
names (``seed``, ``sync-scheduling``, ``chunked-prefill``, ``pipeline``, ``context-limit``,
``sync-pipeline-early-drafts``) with the run's ``--ranks`` (pipeline stages, each rank a mirror)
and ``--set`` overrides (0 keeps the scenario's value). ``model_parameters`` adds the runtime's own
bounds (scenario, seed, backend, timeout), so replay can instantiate the model from the header. A
reproduced counterexample (``lockstep reproduce``) brings all its parameters in
``RunConfig.extra["model_parameters"]``.
``open_process`` opens one process's recorder, status board and choice source.
"""

from __future__ import annotations

from typing import Any

from lockstep.impl.computed_tokens.scheduler import Bounds
from lockstep.impl.runtime import RunConfig
from lockstep.models.computed_tokens.model import PROTOCOL

OVERRIDABLE = ("requests", "prefill_len", "budget", "max_tokens")


def instance_parameters(config: RunConfig) -> dict[str, int]:
    overrides = {name: int(config.extra[name]) for name in OVERRIDABLE if int(config.extra.get(name, 0)) > 0}
    overrides.update(config.extra.get("model_parameters", {}))  # a reproduced counterexample's, every one
    instance = PROTOCOL.instance(config.variant, config.scenario, overrides, ranks=config.ranks)
    return dict(instance.parameters)


def bounds_of(config: RunConfig) -> Bounds:
    values = instance_parameters(config)
    return Bounds(
        requests=values["requests"],
        prefill_len=values["prefill_len"],
        budget=values["budget"],
        drafts=values["drafts"],
        max_tokens=values["max_tokens"],
        max_model_len=values["max_model_len"],
        asynchronous=values["async_scheduling"] == 1,
        padded_rows=values["padded_rows"],
        ranks=values["ranks"],
    )


def model_parameters(config: RunConfig) -> dict[str, Any]:
    values: dict[str, Any] = dict(instance_parameters(config))
    values.update(scenario=config.scenario, seed=config.seed, backend=config.backend, timeout=config.timeout)
    return values
