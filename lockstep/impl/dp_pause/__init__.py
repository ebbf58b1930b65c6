"""dp-pause in the reference runtime: DP engine cores with the busy loop and real collectives,
the coordinator and the client driver, mirroring ``lockstep/models/dp_pause/model.py`` (vLLM
v0.20.0 pre-fix, v0.21.0 post-fix). ``engine`` (torch), ``coordinator`` and ``client``
(torch-free processes), ``scenario`` (arrival holds), ``parameters`` (trace header), ``rank``.
``RUNTIME`` registers it with ``lockstep.impl.protocols``; this module imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockstep.impl.dp_pause.parameters import SETTINGS, DpPauseConfig
from lockstep.impl.protocols import RuntimeProtocol
from lockstep.models.dp_pause.model import POST_FIX, PRE_FIX

if TYPE_CHECKING:
    from lockstep.impl.runtime import RunConfig


def _problem(run: RunConfig) -> str | None:
    try:
        config = DpPauseConfig.of(run)
    except ValueError as error:
        return str(error)
    if config.scenario == "issue-36594" and config.requests >= config.ranks:
        return "scenario issue-36594 needs a rank without requests: use fewer --requests than --ranks"
    if config.scenario == "counterexample" and "schedule" not in config.extra:
        return "scenario counterexample is made by `lockstep reproduce COUNTEREXAMPLE.jsonl`, not chosen by hand"
    return None


RUNTIME = RuntimeProtocol(
    name="dp-pause",
    package="lockstep.impl.dp_pause",
    variants=(PRE_FIX, POST_FIX),
    scenarios=("issue-36594", "random", "counterexample"),
    ranks=(2, 8),
    default_ranks=2,
    validate=_problem,
    settings=SETTINGS,
    reproduction="lockstep.impl.dp_pause.reproduction",
    fuzz_scenario="random",
    helper_actors=("client", "coordinator"),
    summary="DP engine cores, coordinator and client; engine- and worker-level all-reduces",
)
