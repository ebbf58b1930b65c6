"""What a conformance replay is asked and what it answers: ``ReplayOptions``, ``ReplayResult``
(verdict, event, failed property, explanation, figures; ``to_json`` is ``lockstep replay
--json``'s object) and ``default_unrecorded`` (which actions a recording leaves to the replay).
``lockstep.checkers.conformance.replay`` runs the replay and re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lockstep.spec.collectives import Communicator
from lockstep.spec.semantics import TransitionSystem

CONFORMS, VIOLATED, DIVERGES, INCONCLUSIVE = "conforms", "violated", "diverges", "inconclusive"
EXIT_CODES = {CONFORMS: 0, VIOLATED: 1, DIVERGES: 1, INCONCLUSIVE: 3}


@dataclass(frozen=True)
class ReplayOptions:
    max_candidates: int = 100_000
    closure_depth: int = 16
    unrecorded: frozenset[str] = frozenset()  # action names, actors ("coordinator") or kinds ("group:*")
    strict: bool = True  # False: names and values the model does not know diverge instead of being input errors


@dataclass
class ReplayResult:
    verdict: str
    event: int | None  # the divergence, the first violation, or where the candidate limit was hit
    failed_property: str | None
    explanation: dict[str, Any] | None
    longest_conforming_prefix: int  # events the model can take, from the start
    candidate_states_max: int
    events: int  # events read
    witnessed: dict[str, int] = field(default_factory=dict)  # sometimes-property -> first event index
    unrecorded_actions: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "event": self.event,
            "property": self.failed_property,
            "explanation": self.explanation,
            "longest_conforming_prefix": self.longest_conforming_prefix,
            "candidate_states_max": self.candidate_states_max,
            "events": self.events,
            "witnessed": self.witnessed,
            "unrecorded_actions": list(self.unrecorded_actions),
        }


def default_unrecorded(system: TransitionSystem, source_kind: str) -> frozenset[str]:
    """None for a model counterexample; every communicator's completion action for a runtime recording."""
    if source_kind == "model":
        return frozenset()
    return frozenset(
        name
        for library in system.machine.communicators
        if isinstance(library, Communicator)
        for name in library.completion_actions
    )
