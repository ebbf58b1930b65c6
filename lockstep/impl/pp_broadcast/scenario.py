"""pp-broadcast workloads: which requests a run schedules, by scenario, with ``--set`` overrides.

The scenarios mirror the model's instances (``lockstep/models/pp_broadcast/model.py``): request 0
has a prompt of ``chunks`` chunks, request 1 (``requests=2``) a one-chunk prompt, each then decodes
``decodes`` tokens; ``gaps`` steps may leave an unfinished request out (the token budget).
``chunked-prefill`` is the benchmark's workload: one long prompt in many chunks, no decode.
Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockstep.models.pp_broadcast.variants import POST_FIX, PRE_FIX, SKIP_DISAGREE, SKIP_WHOLE_RECEIVE

if TYPE_CHECKING:
    from lockstep.impl.runtime import RunConfig

VARIANTS = (PRE_FIX, POST_FIX, SKIP_DISAGREE, SKIP_WHOLE_RECEIVE)
VOCABULARY = 512  # token ids of the tiny model


@dataclass(frozen=True)
class Workload:
    chunks: int
    decodes: int
    requests: int
    gaps: int

    @property
    def prompt_pieces(self) -> list[int]:
        """Each request's prompt in chunks (the model's pieces)."""
        return [self.chunks] + [1] * (self.requests - 1)

    @property
    def lengths(self) -> list[int]:
        """Each request's pieces: prompt chunks then one per decoded token."""
        return [prompt + self.decodes for prompt in self.prompt_pieces]


SCENARIOS: dict[str, Workload] = {
    "seed": Workload(chunks=2, decodes=0, requests=1, gaps=0),
    "chunks-then-decode": Workload(chunks=3, decodes=1, requests=1, gaps=0),
    "decode-gap": Workload(chunks=3, decodes=1, requests=2, gaps=1),
    "chunked-prefill": Workload(chunks=8, decodes=0, requests=1, gaps=0),
}


def workload(config: RunConfig) -> Workload:
    """The scenario's workload with the run's ``chunks`` / ``decodes`` settings applied, and
    ``requests`` / ``gaps`` where ``RunConfig.extra`` has them (``lockstep reproduce`` sets them from
    a counterexample's header; they are no ``--set`` settings)."""
    base = SCENARIOS[config.scenario]
    chunks = int(config.extra.get("chunks", 0)) or base.chunks
    decodes = int(config.extra.get("decodes", -1))
    requests, gaps = int(config.extra.get("requests", base.requests)), int(config.extra.get("gaps", base.gaps))
    return Workload(chunks, base.decodes if decodes < 0 else decodes, requests, gaps)


def setting(config: RunConfig, name: str) -> int:
    """A ``--set`` value (the runtime protocol's default when not given)."""
    from lockstep.impl.pp_broadcast import RUNTIME

    return int(config.extra.get(name, RUNTIME.settings[name].default))
