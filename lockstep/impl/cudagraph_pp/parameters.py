"""What a cudagraph-pp rank records in its trace header, and its per-process setup.

``scenario_parameters`` gives every parameter the cudagraph-pp model declares: its defaults, the
scenario's ``cudagraph_mode`` (``seed`` FULL, ``full-and-piecewise``, ``piecewise``,
``full-decode-only``), the run's ranks and its ``--set`` values. ``model_parameters`` adds the
runtime's own (scenario, seed, backend, timeout, hidden size, which graphs run), so replay can
instantiate the model from the header. ``open_process`` opens the recorder, status board and
choice source of the process.
"""

from __future__ import annotations

from typing import Any

from lockstep.impl.cudagraph_pp import SCENARIOS
from lockstep.impl.runtime import RunConfig
from lockstep.models.cudagraph_pp.model import PROTOCOL

RUNTIME_SETTINGS = ("steps", "largest_capture_size", "max_num_reqs", "decode_query_len")


def scenario_parameters(config: RunConfig) -> dict[str, int]:
    values = {parameter.name: parameter.default for parameter in PROTOCOL.parameters}
    values.update(ranks=config.ranks, cudagraph_mode=SCENARIOS[config.scenario])
    for name in RUNTIME_SETTINGS:
        if name in config.extra:
            values[name] = int(config.extra[name])
    max_num_tokens = int(config.extra.get("max_num_tokens", 0))
    values["max_num_tokens"] = max_num_tokens or values["largest_capture_size"]
    return values


def graph_kind(config: RunConfig) -> str:
    """``cuda`` (torch.cuda.CUDAGraph) with --backend nccl, else ``emulated`` (EmulatedGraph on CPU)."""
    return "cuda" if config.backend == "nccl" else "emulated"


def model_parameters(config: RunConfig) -> dict[str, Any]:
    values: dict[str, Any] = dict(scenario_parameters(config))
    values.update(
        scenario=config.scenario,
        seed=config.seed,
        backend=config.backend,
        timeout=config.timeout,
        hidden_size=int(config.extra.get("hidden_size", 16)),
        graphs=graph_kind(config),
    )
    return values
