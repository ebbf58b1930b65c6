"""What every pp-broadcast process shares: the trace header's parameters and the per-process setup.

``model_parameters`` gives the header every parameter the pp-broadcast model declares (the run's
ranks and workload, ``hang_bound`` at its largest) plus the runtime's own settings (scenario,
seed, backend, timeout, chunk tokens, model sizes), so replay can instantiate the model from the
header. ``open_process`` opens one process's trace recorder, status board and choice source.
"""

from __future__ import annotations

from typing import Any

from lockstep.impl.pp_broadcast.scenario import setting, workload
from lockstep.impl.runtime import RunConfig
from lockstep.models.pp_broadcast.model import PROTOCOL


def model_parameters(config: RunConfig) -> dict[str, Any]:
    shape = workload(config)
    values: dict[str, Any] = {parameter.name: parameter.default for parameter in PROTOCOL.parameters}
    values.update(
        ranks=config.ranks,
        chunks=shape.chunks,
        decodes=shape.decodes,
        requests=shape.requests,
        gaps=shape.gaps,
        hang_bound=64,
    )
    values.update(
        scenario=config.scenario,
        seed=config.seed,
        backend=config.backend,
        timeout=config.timeout,
        **{name: setting(config, name) for name in ("chunk_tokens", "hidden", "layers")},
    )
    return values
