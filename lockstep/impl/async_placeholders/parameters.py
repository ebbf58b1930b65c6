"""What the async-placeholders process records in its trace header, and its per-process setup.

``scenario_parameters`` gives every parameter the model declares: the defaults, the model
instance the scenario names (``seed``, ``spec-decode``, ``kv-load-failure``, ``preemption``,
``all-operations``, ``history-toggle``) and the run's ``--set max_tokens``. ``model_parameters``
adds the runtime's own bounds (scenario, seed, backend, timeout, the other requests of the batch,
the non-producing steps allowed, the batch queue), so replay can instantiate the model from the
header. ``open_process`` opens the process's recorder, status board and choice source.
"""

from __future__ import annotations

from typing import Any

from lockstep.impl.async_placeholders.scheduler import ScenarioBounds
from lockstep.impl.runtime import RunConfig
from lockstep.models.async_placeholders.model import PROTOCOL


def scenario_parameters(config: RunConfig) -> dict[str, int]:
    values = {parameter.name: parameter.default for parameter in PROTOCOL.parameters}
    instance = next(instance for instance in PROTOCOL.instances if instance.name == config.scenario)
    values.update(instance.parameters)
    values["max_tokens"] = int(config.extra.get("max_tokens", values["max_tokens"]))
    return values


def bounds_of(config: RunConfig) -> ScenarioBounds:
    values = scenario_parameters(config)
    return ScenarioBounds(
        max_tokens=values["max_tokens"],
        num_spec_tokens=values["num_spec_tokens"],
        history_toggles=values["history_toggles"] == 1,
        preemptions=values["preemptions"] == 1,
        chunked_prefill=values["chunked_prefill"] == 1,
        kv_load_failures=values["kv_load_failures"],
        interruptions=int(config.extra.get("interruptions", 2)),
    )


def model_parameters(config: RunConfig) -> dict[str, Any]:
    values: dict[str, Any] = dict(scenario_parameters(config))
    values.update(
        scenario=config.scenario,
        seed=config.seed,
        backend=config.backend,
        timeout=config.timeout,
        background_requests=int(config.extra.get("background", 2)),
        interruptions=int(config.extra.get("interruptions", 2)),
        batch_queue=2,
    )
    return values
