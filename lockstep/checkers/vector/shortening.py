"""Delta debugging of a counterexample: a short subsequence of its steps that still violates the property.

A run is a sequence of moves, each an action and its arguments. ``shorten`` removes chunks of it
(Zeller and Hildebrandt's ddmin: halves, then quarters and so on, each chunk and each complement
tried), re-running every candidate through the reference interpreter (``InterpretedSystem``, that
is ``evaluate``). A candidate counts only where each of its moves is enabled in turn and the same
property is violated on the way; it is cut at the first state (or step) that violates it, so the
result is never longer than the run given, is 1-minimal (no single move can be removed), and is a
real run of the model. ``Goal`` says what violating means: a state where an ``always`` predicate is
false (or, for ``sometimes``, true: a witness), a deadlock where the property's deadlock condition
fails, a step that leaves a sort (``in_bounds``), or a state ``evaluate`` cannot evaluate
(``well_defined``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lockstep.checkers.definedness import undefined_at
from lockstep.spec.machine import IN_BOUNDS, NO_DEADLOCK, WELL_DEFINED, PropertyKind
from lockstep.spec.semantics import InterpretedSystem, ModelError, State, Transition
from lockstep.spec.sorts import Value

Move = tuple[int, tuple[Value, ...]]  # an action's position and its arguments


@dataclass(frozen=True)
class Goal:
    """What a run must reach: property ``position`` violated (witnessed, for ``sometimes``) in a
    state, or at a deadlock (``deadlock``)."""

    position: int
    deadlock: bool = False


class Replayer:
    """Re-runs moves from the initial state through ``evaluate`` and tells where ``goal`` is met."""

    def __init__(self, system: InterpretedSystem, goal: Goal) -> None:
        self.system = system
        self.goal = goal
        prop = system.machine.properties[goal.position]
        self.name = prop.name
        self.witness = prop.kind is PropertyKind.SOMETIMES
        self.replays = 0  # candidates run (a shortening's cost)

    def _met(self, state: State) -> bool:
        """Whether ``state`` violates (or witnesses) the goal's property, deadlock aside."""
        if self.name == WELL_DEFINED:
            return undefined_at(self.system, state) is not None
        if self.name == IN_BOUNDS:
            return False  # a step, not a state, leaves a sort
        holds = self.system.holds(self.goal.position, state)
        return holds if self.witness else not holds

    def _deadlocked(self, state: State) -> bool:
        """Whether ``state`` is a deadlock where the goal's property fails."""
        if self.system.transitions(state):
            return False
        if self.name == NO_DEADLOCK:
            return not self.system.is_final(state)
        return not self.system.holds_at_deadlock(self.goal.position, state)

    def run(self, moves: Sequence[Move]) -> list[Transition] | None:
        """The steps of ``moves`` up to the first that meets the goal, or None where a move is not
        enabled, evaluation fails, or the goal is never met."""
        self.replays += 1
        try:
            return self._run(moves)
        except ModelError:
            return None

    def _run(self, moves: Sequence[Move]) -> list[Transition] | None:
        system = self.system
        state = system.initial()
        taken: list[Transition] = []
        for action, arguments in moves:
            if not self.goal.deadlock and self._met(state):
                return taken
            transitions = [
                transition
                for transition in system.transitions(state, action, arguments)
                if transition.action == action and transition.arguments == arguments
            ]
            leaving = [transition for transition in transitions if transition.out_of_bounds is not None]
            if self.name == IN_BOUNDS and leaving:
                return [*taken, leaving[0]]
            staying = [transition for transition in transitions if transition.out_of_bounds is None]
            if not staying:
                return None
            taken.append(staying[0])
            state = staying[0].target
        met = self._deadlocked(state) if self.goal.deadlock else self._met(state)
        return taken if met else None


def moves_of(transitions: Sequence[Transition]) -> list[Move]:
    """The moves of a run's steps."""
    return [(transition.action, transition.arguments) for transition in transitions]


def shorten(replayer: Replayer, moves: Sequence[Move], keep_going: Callable[[], bool] = lambda: True) -> list[Move]:
    """A 1-minimal subsequence of ``moves`` that still meets ``replayer``'s goal (ddmin), each
    candidate re-run by ``replayer``; ``moves`` must meet it. ``keep_going`` false stops early with
    the shortest found so far."""
    taken = replayer.run(moves)
    if taken is None:
        raise ModelError("internal error: the run to shorten does not violate its property when evaluated")
    current = moves_of(taken)
    parts = 2
    while len(current) >= 2 and keep_going():
        size = -(-len(current) // parts)
        chunks = [(start, min(start + size, len(current))) for start in range(0, len(current), size)]
        reduced = None
        for start, stop in chunks:  # a chunk alone
            reduced = replayer.run(current[start:stop])
            if reduced is not None:
                parts = 2
                break
        if reduced is None and len(chunks) > 2:
            for start, stop in chunks:  # all but a chunk
                reduced = replayer.run(current[:start] + current[stop:])
                if reduced is not None:
                    parts = max(parts - 1, 2)
                    break
        elif reduced is None:  # two chunks: each complement is the other chunk, tried already
            pass
        if reduced is not None:
            current = moves_of(reduced)
            continue
        if parts >= len(current):
            break
        parts = min(2 * parts, len(current))
    return current


__all__ = ["Goal", "Move", "Replayer", "moves_of", "shorten"]
