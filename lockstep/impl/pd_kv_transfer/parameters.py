"""What every pd-kv-transfer process records in its trace header.

``instance_parameters`` gives every parameter the model declares: the model instance the
scenario names, or, for a reproduced counterexample (``lockstep reproduce``, ``test-runtime``),
all of its parameters from ``RunConfig.extra["model_parameters"]``. ``model_parameters`` adds the
runtime's own bounds (scenario, seed, backend, timeout). Imports no torch.
"""

from __future__ import annotations

from typing import Any

from lockstep.impl.runtime import RunConfig
from lockstep.models.pd_kv_transfer.model import PROTOCOL


def instance_parameters(config: RunConfig) -> dict[str, int]:
    overrides = dict(config.extra.get("model_parameters", {}))
    instance = PROTOCOL.instance(config.variant, config.scenario, overrides)
    return dict(instance.parameters)


def model_parameters(config: RunConfig) -> dict[str, Any]:
    values: dict[str, Any] = dict(instance_parameters(config))
    values.update(scenario=config.scenario, seed=config.seed, backend=config.backend, timeout=config.timeout)
    return values
