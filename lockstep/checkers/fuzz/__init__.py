"""Hypothesis-driven random exploration of a model: ``fuzz(instance) -> FuzzResult``.

Reaches instances too large for exhaustive search (8 ranks, ``sync_interval`` 32) by running many
random interleavings of bounded length. ``state_machine`` turns a model into a Hypothesis
``RuleBasedStateMachine`` (a rule per action, an invariant per safety property), ``engine`` runs
it and returns the result, ``minimise`` shortens a failing run by BFS over the states it visited.
Importing this package imports Hypothesis; ``lockstep.checkers`` does not import it.
"""

from lockstep.checkers.fuzz.engine import (
    DEFAULT_EXAMPLES,
    DEFAULT_SHRINK_SECONDS,
    DEFAULT_STEPS,
    EXIT_CODES,
    FuzzOutcome,
    FuzzResult,
    fuzz,
)
from lockstep.checkers.fuzz.minimise import minimise
from lockstep.checkers.fuzz.state_machine import OutOfTime, PropertyViolation, Recorder, state_machine_for

__all__ = [
    "DEFAULT_EXAMPLES",
    "DEFAULT_SHRINK_SECONDS",
    "DEFAULT_STEPS",
    "EXIT_CODES",
    "FuzzOutcome",
    "FuzzResult",
    "OutOfTime",
    "PropertyViolation",
    "Recorder",
    "fuzz",
    "minimise",
    "state_machine_for",
]
