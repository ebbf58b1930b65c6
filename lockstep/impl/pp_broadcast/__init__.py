"""pp-broadcast in the reference runtime: P pipeline stages with real forward compute, real p2p
transfers of the intermediate tensors and the sampled-token broadcast from the last stage,
mirroring ``lockstep/models/pp_broadcast/model.py`` (vLLM v0.19.0 pre-fix, v0.20.0 post-fix, PR
#38726). ``engine`` (the scheduler and batch queue, a torch-free process), ``worker`` (a rank's
RPC loop and runner state), ``stage`` (the tiny seeded model split into stages), ``scenario``
(workloads), ``parameters`` (trace header), ``causality`` (happens-before over a run's traces),
``rank``, ``reproduction`` (a model counterexample as the engine's scripted choices). ``RUNTIME``
registers it with ``lockstep.impl.protocols``; this module imports no torch.
"""

from __future__ import annotations

from lockstep.impl.pp_broadcast.scenario import SCENARIOS, VARIANTS
from lockstep.impl.protocols import RuntimeProtocol, Setting

RUNTIME = RuntimeProtocol(
    name="pp-broadcast",
    package="lockstep.impl.pp_broadcast",
    variants=VARIANTS,
    scenarios=tuple(SCENARIOS),
    ranks=(2, 4),
    default_ranks=2,
    reproduction="lockstep.impl.pp_broadcast.reproduction",
    choice_actors=("engine",),  # the engine process; the stages choose nothing
    settings={
        "chunks": Setting(0, 0, 256, "chunks of request 0's prompt (0: the scenario's)"),
        "decodes": Setting(-1, -1, 64, "tokens each request decodes after its prompt (-1: the scenario's)"),
        "chunk_tokens": Setting(128, 1, 4096, "mean tokens per prefill chunk (each chunk's size is a choice)"),
        "hidden": Setting(512, 8, 4096, "hidden size of the tiny model"),
        "layers": Setting(4, 1, 64, "layers per pipeline stage"),
    },
    summary=(
        "P pipeline stages, engine with a batch queue of P steps; p2p intermediate tensors, sampled-token broadcast"
    ),
)
