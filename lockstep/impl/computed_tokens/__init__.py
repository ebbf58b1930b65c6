"""computed-tokens in the reference runtime: the scheduler and every pipeline rank's V2 runner with
its CPU mirror ``num_computed_tokens_np`` and ``seq_lens_cpu_upper_bound``, mirroring
``lockstep/models/computed_tokens/model.py`` (vLLM v0.21.0 pre-fix: the mirror advances by
``num_scheduled``; v0.22.0 post-fix: refreshed from the scheduler). ``scheduler`` (torch-free),
``runner`` (``RequestState`` tensors, the input batch, the tiny draft/target pair), ``engine``
(the engine-core thread and the workers), ``parameters`` (trace header), ``rank``,
``reproduction`` (a model counterexample's acceptances as scripted choices). The scenarios
are the model's instances; ``--ranks`` is the model's ``ranks`` (pipeline stages, each a mirror).
``RUNTIME`` registers it with ``lockstep.impl.protocols``; this module imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockstep.impl.protocols import RuntimeProtocol, Setting
from lockstep.models.computed_tokens.model import POST_FIX, PRE_FIX, PROTOCOL

if TYPE_CHECKING:
    from lockstep.impl.runtime import RunConfig


def _problem(config: RunConfig) -> str | None:
    instance = PROTOCOL.instance_spec(config.scenario)
    wanted = instance.parameters.get("ranks")
    if wanted is not None and wanted != config.ranks:
        return f"scenario {config.scenario} runs {wanted} pipeline ranks: use --ranks {wanted}"
    return None


RUNTIME = RuntimeProtocol(
    name="computed-tokens",
    package="lockstep.impl.computed_tokens",
    variants=(PRE_FIX, POST_FIX),
    scenarios=tuple(instance.name for instance in PROTOCOL.instances),
    ranks=(1, 3),
    default_ranks=1,
    validate=_problem,
    reproduction="lockstep.impl.computed_tokens.reproduction",
    settings={
        "requests": Setting(0, 0, 3, "requests (0: the scenario's)"),
        "prefill_len": Setting(0, 0, 8, "prompt tokens of each request (0: the scenario's)"),
        "budget": Setting(0, 0, 8, "max_num_scheduled_tokens per step (0: the scenario's)"),
        "max_tokens": Setting(0, 0, 8, "output tokens per request (0: the scenario's)"),
    },
    summary="scheduler and V2 runners per PP rank: the CPU mirror and seq_lens_cpu_upper_bound under MTP",
)
